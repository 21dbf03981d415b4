package kafka

import (
	"context"
	"encoding/binary"
	"fmt"
	"net"
	"strconv"
	"sync"
	"testing"
	"time"

	"github.com/twmb/franz-go/pkg/kerr"
	"github.com/twmb/franz-go/pkg/kgo"
	"github.com/twmb/franz-go/pkg/kmsg"

	"strata/engine/record"
	"strata/engine/segment"
	"strata/metadata"
	"strata/peer"
)

// twoNodes is a cluster of two strata Kafka servers where partition t-0
// moved from node 1 to node 2 at offset 100: node 1 holds 0-99, node 2
// leads from 100 on.
type twoNodes struct {
	self  int32
	mu    *sync.Mutex
	addrs map[int32]string // live nodes
	fixedTopics
}

func (c twoNodes) Self() int32 { return c.self }
func (c twoNodes) Brokers() []Broker {
	c.mu.Lock()
	defer c.mu.Unlock()
	var out []Broker
	for id, addr := range c.addrs {
		host, port, _ := net.SplitHostPort(addr)
		p, _ := strconv.Atoi(port)
		out = append(out, Broker{NodeID: id, Host: host, Port: int32(p)})
	}
	return out
}
func (c twoNodes) Controller() int32 { return 1 }
func (c twoNodes) Topics(context.Context) (map[string]int32, error) {
	return map[string]int32{"t": 1}, nil
}
func (c twoNodes) Partition(topic string, p int32) (PartitionInfo, bool) {
	return PartitionInfo{Leader: 2, LeaderEpoch: 1, Replicas: []int32{2}, ISR: []int32{2}}, topic == "t" && p == 0
}
func (c twoNodes) Coordinator(string) Broker { return c.Brokers()[0] }
func (c twoNodes) Parts(topic string, p int32) []LogPart {
	return []LogPart{{Start: 0, Node: 1}, {Start: 100, Node: 2}}
}

// The leader of a split partition serves every offset: the earlier part
// read from the node that holds it, the earliest offset and offsets by time
// from there too; while that node is down its offsets answer
// KAFKA_STORAGE_ERROR (retriable) and the leader's own still read.
func TestSplitLogReadsThroughTheLeader(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	mu, addrs := &sync.Mutex{}, map[int32]string{}
	stops := map[int32]func(){}
	began := time.Now().UnixMilli()
	for _, id := range []int32{1, 2} {
		e, err := segment.Open(segment.Config{Dir: t.TempDir(), Logger: quiet})
		if err != nil {
			t.Fatal(err)
		}
		start, n := uint64(0), 100
		if id == 2 {
			start, n = 100, 50
		}
		if err := e.CreateShardAt(ctx, "t-0", start); err != nil {
			t.Fatal(err)
		}
		var recs []record.Record
		for i := 0; i < n; i++ {
			ts := began + int64(start) + int64(i)
			if id == 1 && i == 50 {
				ts = began + 10_000 // the partition's largest timestamp, in node 1's part
			}
			recs = append(recs, record.Record{Timestamp: ts, Value: []byte(fmt.Sprintf("r%03d", int(start)+i))})
		}
		if _, err := e.Append(ctx, "t-0", recs); err != nil {
			t.Fatal(err)
		}
		nodes, secret := twoNodes{self: id, mu: mu, addrs: addrs}, []byte("the two nodes' peer secret")
		peers := peer.NewClient(peer.ClientConfig{Self: id, Secret: secret, Addr: func(n int32) (string, bool) { return metadata.BrokerAddr(nodes, n) }})
		srv := New(e, Config{Logger: quiet, Cluster: nodes, Peers: peers, PeerSecret: secret})
		ln, err := net.Listen("tcp", "127.0.0.1:0")
		if err != nil {
			t.Fatal(err)
		}
		go srv.Serve(ln)
		mu.Lock()
		addrs[id] = ln.Addr().String()
		mu.Unlock()
		stops[id] = func() {
			mu.Lock()
			delete(addrs, id)
			mu.Unlock()
			srv.Shutdown(ctx)
			peers.Close()
			e.Close()
		}
		t.Cleanup(stops[id])
	}

	cl := client(t, addrs[2], kgo.ConsumePartitions(map[string]map[int32]kgo.Offset{"t": {0: kgo.NewOffset().AtStart()}}))
	var got []string
	for len(got) < 150 {
		fs := cl.PollFetches(ctx)
		if ctx.Err() != nil {
			t.Fatalf("read %d of 150 records through the leader: %v", len(got), fs.Errors())
		}
		fs.EachRecord(func(r *kgo.Record) {
			if want := fmt.Sprintf("r%03d", r.Offset); string(r.Value) != want {
				t.Errorf("offset %d holds %q, want %q", r.Offset, r.Value, want)
			}
			got = append(got, string(r.Value))
		})
	}

	for _, tc := range []struct {
		ts, want int64
	}{
		{-2, 0},              // earliest: node 1's
		{-1, 150},            // latest: the leader's
		{began + 42, 42},     // in node 1's part
		{began + 120, 50},    // node 1's offset 50 is the first at or after it: its timestamp is the largest
		{began + 20_000, -1}, // after every record
		{-3, 50},             // the largest timestamp, in node 1's part
	} {
		req := kmsg.NewPtrListOffsetsRequest()
		rt := kmsg.NewListOffsetsRequestTopic()
		rt.Topic = "t"
		rp := kmsg.NewListOffsetsRequestTopicPartition()
		rp.Timestamp = tc.ts
		rt.Partitions = append(rt.Partitions, rp)
		req.Topics = append(req.Topics, rt)
		resp, err := req.RequestWith(ctx, cl)
		if err != nil {
			t.Fatal(err)
		}
		if p := resp.Topics[0].Partitions[0]; p.ErrorCode != 0 || p.Offset != tc.want {
			t.Errorf("ListOffsets at %d through the leader: offset %d, error %d; want %d", tc.ts, p.Offset, p.ErrorCode, tc.want)
		}
	}

	stops[1]()
	leader := client(t, addrs[2]).SeedBrokers()[0]
	fetch := func(offset int64) kmsg.FetchResponseTopicPartition {
		req := kmsg.NewPtrFetchRequest()
		req.MaxBytes = 1 << 20
		rt := kmsg.NewFetchRequestTopic()
		rt.Topic = "t"
		rp := kmsg.NewFetchRequestTopicPartition()
		rp.FetchOffset, rp.PartitionMaxBytes = offset, 1<<20
		rt.Partitions = append(rt.Partitions, rp)
		req.Topics = append(req.Topics, rt)
		resp, err := req.RequestWith(ctx, leader)
		if err != nil {
			t.Fatal(err)
		}
		return resp.Topics[0].Partitions[0]
	}
	if p := fetch(10); p.ErrorCode != kerr.KafkaStorageError.Code {
		t.Errorf("fetching node 1's part with node 1 down: error %d, want KAFKA_STORAGE_ERROR", p.ErrorCode)
	}
	if p := fetch(120); p.ErrorCode != 0 || len(p.RecordBatches) == 0 || p.HighWatermark != 150 {
		t.Errorf("fetching the leader's own part with node 1 down: error %d, %d bytes, high watermark %d", p.ErrorCode, len(p.RecordBatches), p.HighWatermark)
	}
}

// A partition placed on this node a moment ago, its shard not made yet:
// an idempotent produce answers UNKNOWN_TOPIC_OR_PARTITION, which clients
// retry, not UNKNOWN_SERVER_ERROR, which they give up on.
func TestIdempotentProduceBeforeTheShardExists(t *testing.T) {
	e, err := segment.Open(segment.Config{Dir: t.TempDir(), Logger: quiet})
	if err != nil {
		t.Fatal(err)
	}
	mu := &sync.Mutex{}
	srv := New(e, Config{Logger: quiet, Cluster: twoNodes{self: 2, mu: mu, addrs: map[int32]string{}}})
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	go srv.Serve(ln)
	t.Cleanup(func() { srv.Shutdown(context.Background()); e.Close() })

	// One record from producer 7, epoch 0, sequence 0.
	batch := encodeBatch(nil, []record.Record{{Value: []byte("v")}})
	binary.BigEndian.PutUint64(batch[43:], 7) // producer id
	binary.BigEndian.PutUint16(batch[51:], 0) // producer epoch
	binary.BigEndian.PutUint32(batch[53:], 0) // first sequence
	binary.BigEndian.PutUint32(batch[17:], crcOf(batch[21:]))
	req := produceRequest("t", batch)
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	cl := client(t, ln.Addr().String())
	resp, err := req.RequestWith(ctx, cl.SeedBrokers()[0])
	if err != nil {
		t.Fatal(err)
	}
	if code := resp.Topics[0].Partitions[0].ErrorCode; code != kerr.UnknownTopicOrPartition.Code {
		t.Errorf("idempotent produce before the shard exists: error %d, want UNKNOWN_TOPIC_OR_PARTITION", code)
	}
}

func (c twoNodes) ProducerID(ctx context.Context) (int64, error) { return fakePIDs.Next(ctx) }
