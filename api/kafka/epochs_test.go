package kafka

import (
	"context"
	"fmt"
	"net"
	"reflect"
	"strconv"
	"sync/atomic"
	"testing"
	"time"

	"github.com/twmb/franz-go/pkg/kerr"
	"github.com/twmb/franz-go/pkg/kgo"
	"github.com/twmb/franz-go/pkg/kmsg"

	"strata/engine/record"
	"strata/engine/store"
	"strata/metadata"
)

// epochNode is a cluster of one node that leads topic "ep" (one partition)
// at whatever epoch the test sets: a leader whose epoch moves, as after
// elections, without the rest of a cluster.
type epochNode struct {
	addr  string
	epoch *atomic.Int32
	fixedTopics
}

func (c epochNode) Self() int32 { return 0 }
func (c epochNode) Brokers() []Broker {
	host, port, _ := net.SplitHostPort(c.addr)
	p, _ := strconv.Atoi(port)
	return []Broker{{NodeID: 0, Host: host, Port: int32(p)}}
}
func (c epochNode) Controller() int32 { return 0 }
func (c epochNode) Topics(context.Context) (map[string]int32, error) {
	return map[string]int32{"ep": 1}, nil
}
func (c epochNode) Partition(topic string, p int32) (PartitionInfo, bool) {
	return PartitionInfo{Leader: 0, LeaderEpoch: c.epoch.Load(), Replicas: []int32{0}, ISR: []int32{0}}, topic == "ep" && p == 0
}
func (c epochNode) Coordinator(string) Broker { return c.Brokers()[0] }

// A leader records each epoch it writes under from the log end before its
// first append in it; fetched batches carry the epoch that wrote them and
// never span two; OffsetForLeaderEpoch answers from the history (the log
// end for the current epoch, UNDEFINED past it); Fetch, ListOffsets and
// OffsetForLeaderEpoch check the client's current epoch as Kafka does; a
// franz-go consumer reads across the epochs.
func TestLeaderEpochsFromProduceToFetch(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	epoch := &atomic.Int32{}
	addr, e := serveShards(t, []string{"ep-0"}, func(addr string) metadata.Cluster { return epochNode{addr: addr, epoch: epoch} })

	c := client(t, addr, kgo.DefaultProduceTopic("ep"), kgo.RecordPartitioner(kgo.ManualPartitioner()))
	produce := func(n int, tag string) {
		t.Helper()
		for i := 0; i < n; i++ {
			if err := c.ProduceSync(ctx, &kgo.Record{Value: []byte(fmt.Sprintf("%s-%d", tag, i))}).FirstErr(); err != nil {
				t.Fatalf("produce at epoch %d: %v", epoch.Load(), err)
			}
		}
	}
	epoch.Store(3)
	produce(5, "three")
	epoch.Store(5)
	produce(3, "five")
	epoch.Store(7) // a leader at epoch 7 that has written nothing yet
	if got, err := e.LeaderEpochs(ctx, "ep-0"); err != nil || !reflect.DeepEqual(got, []store.EpochEntry{{Epoch: 3, Start: 0}, {Epoch: 5, Start: 5}}) {
		t.Fatalf("the shard's history: %v, %v; want 3@0 5@5", got, err)
	}

	t.Run("batches carry their epoch", func(t *testing.T) {
		for _, tc := range []struct {
			from int64
			want []string // first offset, epoch, records of each batch
		}{
			{0, []string{"0 epoch 3 x5", "5 epoch 5 x3"}},
			{3, []string{"3 epoch 3 x2", "5 epoch 5 x3"}},
			{6, []string{"6 epoch 5 x2"}},
		} {
			p := rawFetch(ctx, t, c, "ep", tc.from, 7)
			code, raw := p.ErrorCode, p.RecordBatches
			if code != 0 {
				t.Fatalf("fetch from %d: %v", tc.from, kerr.ErrorForCode(code))
			}
			if got := batchEpochs(t, raw); !reflect.DeepEqual(got, tc.want) {
				t.Errorf("fetch from %d: batches %v, want %v", tc.from, got, tc.want)
			}
		}
	})

	t.Run("offset for leader epoch", func(t *testing.T) {
		for _, tc := range []struct {
			asked     int32
			wantEpoch int32
			wantEnd   int64
		}{
			{2, 2, 0}, // older than the first known: where the history starts
			{3, 3, 5},
			{4, 3, 5},
			{5, 5, 8},
			{6, 5, 8},
			{7, 7, 8}, // the current epoch: the log end
			{8, -1, -1},
		} {
			code, ep, end := rawOffsetForLeaderEpoch(ctx, t, c, 7, tc.asked)
			if code != 0 || ep != tc.wantEpoch || end != tc.wantEnd {
				t.Errorf("OffsetForLeaderEpoch(%d) = %v, epoch %d, end %d; want epoch %d, end %d",
					tc.asked, kerr.ErrorForCode(code), ep, end, tc.wantEpoch, tc.wantEnd)
			}
		}
	})

	t.Run("current leader epoch checks", func(t *testing.T) {
		for _, tc := range []struct {
			current int32
			want    int16
		}{
			{-1, 0},
			{7, 0},
			{6, kerr.FencedLeaderEpoch.Code},
			{-2, kerr.FencedLeaderEpoch.Code}, // only -1 means "none" (but to Fetch, any negative)
			{8, kerr.UnknownLeaderEpoch.Code},
		} {
			want := tc.want
			if tc.current < 0 {
				want = 0 // Fetch takes any negative epoch for none, as Kafka's does
			}
			if code := rawFetch(ctx, t, c, "ep", 0, tc.current).ErrorCode; code != want {
				t.Errorf("Fetch at current epoch %d: %v, want %v", tc.current, kerr.ErrorForCode(code), kerr.ErrorForCode(want))
			}
			if code, _, _ := rawListOffsets(ctx, t, c, tc.current, -1); code != tc.want {
				t.Errorf("ListOffsets at current epoch %d: %v, want %v", tc.current, kerr.ErrorForCode(code), kerr.ErrorForCode(tc.want))
			}
			if code, _, _ := rawOffsetForLeaderEpoch(ctx, t, c, tc.current, 5); code != tc.want {
				t.Errorf("OffsetForLeaderEpoch at current epoch %d: %v, want %v", tc.current, kerr.ErrorForCode(code), kerr.ErrorForCode(tc.want))
			}
		}
	})

	t.Run("list offsets answers the epoch", func(t *testing.T) {
		for _, tc := range []struct {
			ts         int64
			wantOffset int64
			wantEpoch  int32
		}{{-2, 0, 3}, {-1, 8, 7}} {
			code, off, ep := rawListOffsets(ctx, t, c, 7, tc.ts)
			if code != 0 || off != tc.wantOffset || ep != tc.wantEpoch {
				t.Errorf("ListOffsets(%d) = %v, offset %d, epoch %d; want %d, %d", tc.ts, kerr.ErrorForCode(code), off, ep, tc.wantOffset, tc.wantEpoch)
			}
		}
	})

	t.Run("a consumer reads across the epochs", func(t *testing.T) {
		cons := client(t, addr, kgo.ConsumePartitions(map[string]map[int32]kgo.Offset{"ep": {0: kgo.NewOffset().AtStart()}}))
		var got []string
		for len(got) < 8 && ctx.Err() == nil {
			fs := cons.PollFetches(ctx)
			if err := fs.Err(); err != nil {
				t.Fatalf("consume: %v", err)
			}
			fs.EachRecord(func(r *kgo.Record) {
				got = append(got, fmt.Sprintf("%d %s epoch %d", r.Offset, r.Value, r.LeaderEpoch))
			})
		}
		want := []string{"0 three-0 epoch 3", "1 three-1 epoch 3", "2 three-2 epoch 3", "3 three-3 epoch 3", "4 three-4 epoch 3",
			"5 five-0 epoch 5", "6 five-1 epoch 5", "7 five-2 epoch 5"}
		if !reflect.DeepEqual(got, want) {
			t.Fatalf("consumed %v, want %v", got, want)
		}
	})

	t.Run("a stale epoch cannot append", func(t *testing.T) {
		epoch.Store(4) // this node's view is behind the history (5)
		defer epoch.Store(7)
		req := kmsg.NewPtrProduceRequest()
		req.Acks, req.TimeoutMillis = -1, 5000
		rt := kmsg.NewProduceRequestTopic()
		rt.Topic = "ep"
		rp := kmsg.NewProduceRequestTopicPartition()
		rp.Records = encodeBatch(nil, []record.Record{{Value: []byte("stale")}})
		rt.Partitions = append(rt.Partitions, rp)
		req.Topics = append(req.Topics, rt)
		resp, err := req.RequestWith(ctx, c)
		if err != nil {
			t.Fatal(err)
		}
		if code := resp.Topics[0].Partitions[0].ErrorCode; code != kerr.NotLeaderForPartition.Code {
			t.Fatalf("produce at a stale epoch: %v, want NOT_LEADER_OR_FOLLOWER", kerr.ErrorForCode(code))
		}
		if end, _ := e.LogEnd(ctx, "ep-0"); end != 8 {
			t.Fatalf("the refused produce was appended: log end %d", end)
		}
	})
}

// rawFetch is a consumer's Fetch (v12, by name) of topic's partition 0
// from offset, answered at once.
func rawFetch(ctx context.Context, t *testing.T, c *kgo.Client, topic string, offset int64, current int32) kmsg.FetchResponseTopicPartition {
	t.Helper()
	req := kmsg.NewPtrFetchRequest()
	req.ReplicaID, req.MaxBytes, req.MaxWaitMillis = -1, 1<<20, 0
	rt := kmsg.NewFetchRequestTopic()
	rt.Topic = topic
	rp := kmsg.NewFetchRequestTopicPartition()
	rp.FetchOffset, rp.PartitionMaxBytes, rp.CurrentLeaderEpoch, rp.LogStartOffset = offset, 1<<20, current, -1
	rt.Partitions = append(rt.Partitions, rp)
	req.Topics = append(req.Topics, rt)
	req.Version = 12 // by name, not topic ID
	resp, err := req.RequestWith(ctx, c)
	if err != nil {
		t.Fatal(err)
	}
	return resp.Topics[0].Partitions[0]
}

func rawOffsetForLeaderEpoch(ctx context.Context, t *testing.T, c *kgo.Client, current, asked int32) (int16, int32, int64) {
	t.Helper()
	req := kmsg.NewPtrOffsetForLeaderEpochRequest()
	rt := kmsg.NewOffsetForLeaderEpochRequestTopic()
	rt.Topic = "ep"
	rp := kmsg.NewOffsetForLeaderEpochRequestTopicPartition()
	rp.CurrentLeaderEpoch, rp.LeaderEpoch = current, asked
	rt.Partitions = append(rt.Partitions, rp)
	req.Topics = append(req.Topics, rt)
	resp, err := req.RequestWith(ctx, c)
	if err != nil {
		t.Fatal(err)
	}
	p := resp.Topics[0].Partitions[0]
	return p.ErrorCode, p.LeaderEpoch, p.EndOffset
}

func rawListOffsets(ctx context.Context, t *testing.T, c *kgo.Client, current int32, ts int64) (int16, int64, int32) {
	t.Helper()
	req := kmsg.NewPtrListOffsetsRequest()
	req.ReplicaID = -1
	rt := kmsg.NewListOffsetsRequestTopic()
	rt.Topic = "ep"
	rp := kmsg.NewListOffsetsRequestTopicPartition()
	rp.CurrentLeaderEpoch, rp.Timestamp = current, ts
	rt.Partitions = append(rt.Partitions, rp)
	req.Topics = append(req.Topics, rt)
	resp, err := req.RequestWith(ctx, c)
	if err != nil {
		t.Fatal(err)
	}
	p := resp.Topics[0].Partitions[0]
	return p.ErrorCode, p.Offset, p.LeaderEpoch
}

// batchEpochs lists the batches of a fetch answer as "first offset, epoch,
// records".
func batchEpochs(t *testing.T, raw []byte) []string {
	t.Helper()
	var out []string
	for len(raw) > 0 {
		var b kmsg.RecordBatch
		if err := b.ReadFrom(raw); err != nil {
			t.Fatalf("a fetched batch does not decode: %v", err)
		}
		out = append(out, fmt.Sprintf("%d epoch %d x%d", b.FirstOffset, b.PartitionLeaderEpoch, b.NumRecords))
		raw = raw[12+int(b.Length):]
	}
	return out
}

func (c epochNode) ProducerID(ctx context.Context) (int64, error) { return fakePIDs.Next(ctx) }

// A new leader whose high watermark is short of its epoch's start does not
// know yet what its predecessor committed: ListOffsets answers
// OFFSET_NOT_AVAILABLE (KIP-207, retriable) rather than a log end short of
// acknowledged records, and the offset once the high watermark catches up.
func TestListOffsetsWaitsForANewLeadersHighWatermark(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	epoch := &atomic.Int32{}
	addr, e := serveShards(t, []string{"ep-0"}, func(addr string) metadata.Cluster { return epochNode{addr: addr, epoch: epoch} })
	// Managed from an empty log: the high watermark no longer follows the
	// log end, as on a replica.
	if err := e.SetHighWatermark(ctx, "ep-0", 0); err != nil {
		t.Fatal(err)
	}
	c := client(t, addr, kgo.DefaultProduceTopic("ep"), kgo.RecordPartitioner(kgo.ManualPartitioner()))
	epoch.Store(3)
	for i := range 5 {
		if err := c.ProduceSync(ctx, &kgo.Record{Value: []byte(strconv.Itoa(i))}).FirstErr(); err != nil {
			t.Fatal(err)
		}
	}
	if code, off, _ := rawListOffsets(ctx, t, c, 3, -1); code != 0 || off != 0 {
		t.Fatalf("the epoch-3 leader, high watermark 0: %v, offset %d; want the high watermark, 0", kerr.ErrorForCode(code), off)
	}
	epoch.Store(5) // elected with the log at 5, the high watermark at 0
	for _, ts := range []int64{-1, -2} {
		if code, off, _ := rawListOffsets(ctx, t, c, 5, ts); code != kerr.OffsetNotAvailable.Code || off != -1 {
			t.Errorf("the new leader, its high watermark not caught up within %v, ListOffsets(%d): %v, offset %d; want OFFSET_NOT_AVAILABLE",
				offsetsWait, ts, kerr.ErrorForCode(code), off)
		}
	}
	// Caught up while the answer waits: the offset, no error.
	go func() {
		time.Sleep(offsetsWait / 4)
		e.SetHighWatermark(ctx, "ep-0", 5)
	}()
	if code, off, _ := rawListOffsets(ctx, t, c, 5, -1); code != 0 || off != 5 {
		t.Fatalf("the high watermark reaching the epoch's start during the wait: %v, offset %d; want 5", kerr.ErrorForCode(code), off)
	}
}
