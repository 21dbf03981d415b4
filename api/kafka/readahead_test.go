package kafka

import (
	"bytes"
	"context"
	"fmt"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/testutil"
	"github.com/twmb/franz-go/pkg/kadm"
	"github.com/twmb/franz-go/pkg/kerr"
	"github.com/twmb/franz-go/pkg/kgo"
	"github.com/twmb/franz-go/pkg/kmsg"

	"strata/engine/segment"
)

// readAheadSetup is one engine with a topic of 3 partitions of 200
// records each, served twice: with read-ahead (metrics counted) and
// without.
func readAheadSetup(t *testing.T) (ahead, plain string, srv *Server, m *Metrics) {
	e, err := segment.Open(segment.Config{Dir: t.TempDir(), Logger: quiet})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { e.Close() })
	m = NewMetrics(prometheus.NewRegistry())
	ahead, srv = serveStore(t, e, Config{AutoCreateTopics: true, DefaultPartitions: 3, Metrics: m, MaxReadAheadBytes: 128 << 20})
	plain, _ = serveStore(t, e, Config{})
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	c := client(t, ahead, kgo.DefaultProduceTopic("ahead"), kgo.AllowAutoTopicCreation(), kgo.RecordPartitioner(kgo.ManualPartitioner()))
	for p := int32(0); p < 3; p++ {
		var recs []*kgo.Record
		for i := 0; i < 200; i++ {
			recs = append(recs, &kgo.Record{Partition: p, Key: []byte(fmt.Sprint(i)), Value: []byte(fmt.Sprintf("p%d-%d-%0200d", p, i, 0)),
				Headers: []kgo.RecordHeader{{Key: "h", Value: []byte{byte(i)}}}})
		}
		if err := c.ProduceSync(ctx, recs...).FirstErr(); err != nil {
			t.Fatal(err)
		}
	}
	return ahead, plain, srv, m
}

// fetchFrom fetches topic "ahead"'s partitions from the offsets given,
// with partition max bytes limit, and returns each partition's answer.
func fetchFrom(t *testing.T, c *kgo.Client, offsets []int64, limit int32) []kmsg.FetchResponseTopicPartition {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	req := kmsg.NewPtrFetchRequest()
	req.Version, req.ReplicaID, req.MaxBytes = 12, -1, 50<<20
	rt := kmsg.NewFetchRequestTopic()
	rt.Topic = "ahead"
	for p, o := range offsets {
		rp := kmsg.NewFetchRequestTopicPartition()
		rp.Partition, rp.FetchOffset, rp.PartitionMaxBytes, rp.CurrentLeaderEpoch, rp.LogStartOffset = int32(p), o, limit, -1, -1
		rt.Partitions = append(rt.Partitions, rp)
	}
	req.Topics = append(req.Topics, rt)
	resp, err := req.RequestWith(ctx, c)
	if err != nil {
		t.Fatal(err)
	}
	return resp.Topics[0].Partitions
}

// lastOffset is the offset of the last record in batches, or -1.
func lastOffset(t *testing.T, batches []byte) int64 {
	t.Helper()
	last := int64(-1)
	for len(batches) > 0 {
		var b kmsg.RecordBatch
		if err := b.ReadFrom(batches); err != nil {
			t.Fatal(err)
		}
		last = b.FirstOffset + int64(b.LastOffsetDelta)
		batches = batches[12+b.Length:]
	}
	return last
}

func aheadCount(m *Metrics, result string) int {
	return int(testutil.ToFloat64(m.ahead.WithLabelValues(result)))
}

// A consumer reading on from where each answer ended gets, from the
// read-ahead, byte for byte what a server without it answers, to the end
// of the log; a tailing fetch (caught up) starts none.
func TestFetchReadAheadAnswersAsWithout(t *testing.T) {
	ahead, plain, srv, m := readAheadSetup(t)
	withC, withoutC := client(t, ahead), client(t, plain)
	for _, limit := range []int32{4 << 10, 1, 20 << 10} {
		t.Run(fmt.Sprint("limit ", limit), func(t *testing.T) {
			usedBefore := aheadCount(m, "used")
			offsets := []int64{0, 0, 0}
			fetches := 0
			for done := false; !done; fetches++ {
				got, want := fetchFrom(t, withC, offsets, limit), fetchFrom(t, withoutC, offsets, limit)
				done = true
				for p := range got {
					if got[p].ErrorCode != 0 || !bytes.Equal(got[p].RecordBatches, want[p].RecordBatches) {
						t.Fatalf("fetch %d partition %d from %d: error %d, %d bytes; without read-ahead %d bytes", fetches, p, offsets[p],
							got[p].ErrorCode, len(got[p].RecordBatches), len(want[p].RecordBatches))
					}
					if last := lastOffset(t, got[p].RecordBatches); last >= 0 {
						offsets[p] = last + 1
					}
					done = done && offsets[p] == 200
				}
			}
			// Every fetch but the first took its partitions from the
			// read-ahead (the last one, caught up, started none).
			if used := aheadCount(m, "used") - usedBefore; used != 3*(fetches-1) {
				t.Errorf("%d fetches took %d partitions from the read-ahead, want %d", fetches, used, 3*(fetches-1))
			}
		})
	}
	if n := aheadCount(m, "unused") + aheadCount(m, "stale"); n != 0 {
		t.Errorf("%d partitions read ahead went unused or stale", n)
	}
	if held := srv.readAheadBytes.Load(); held != 0 {
		t.Errorf("%d bytes of read-ahead held once the consumer caught up", held)
	}
}

// What the next fetch does not ask for exactly (another offset, another
// limit) is dropped and read afresh; what retention or DeleteRecords took
// meanwhile is not answered from the read-ahead.
func TestFetchReadAheadDropsWhatDoesNotMatch(t *testing.T) {
	ahead, _, srv, m := readAheadSetup(t)
	c := client(t, ahead)
	check := func(parts []kmsg.FetchResponseTopicPartition, wantFirst int64) {
		t.Helper()
		for p, rp := range parts {
			var b kmsg.RecordBatch
			if rp.ErrorCode != 0 || b.ReadFrom(rp.RecordBatches) != nil || b.FirstOffset != wantFirst {
				t.Fatalf("partition %d: error %d, first offset %d, want %d", p, rp.ErrorCode, b.FirstOffset, wantFirst)
			}
		}
	}
	first := fetchFrom(t, c, []int64{0, 0, 0}, 4<<10)
	next := lastOffset(t, first[0].RecordBatches) + 1
	// Another limit: the read-ahead is dropped, the answer right.
	check(fetchFrom(t, c, []int64{next, next, next}, 8<<10), next)
	if got := aheadCount(m, "unused"); got != 3 {
		t.Fatalf("%d partitions read ahead unused after a fetch with another limit, want 3", got)
	}
	// Another offset (a seek back): the read-ahead is stopped (what it
	// framed by then dropped, unused), the answer right.
	check(fetchFrom(t, c, []int64{1, 1, 1}, 4<<10), 1)
	if got := aheadCount(m, "used"); got != 0 {
		t.Fatalf("%d partitions answered from a read-ahead of other offsets or limits", got)
	}
	// DeleteRecords past the read-ahead's offsets (from another client: the
	// fetches keep their connection): the fetch is out of range, as
	// without read-ahead.
	third := fetchFrom(t, c, []int64{0, 0, 0}, 4<<10)
	next = lastOffset(t, third[0].RecordBatches) + 1
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	del := kmsg.NewPtrDeleteRecordsRequest()
	dt := kmsg.NewDeleteRecordsRequestTopic()
	dt.Topic = "ahead"
	for p := int32(0); p < 3; p++ {
		dt.Partitions = append(dt.Partitions, kmsg.DeleteRecordsRequestTopicPartition{Partition: p, Offset: next + 1})
	}
	del.Topics, del.TimeoutMillis = append(del.Topics, dt), 10_000
	if resp, err := del.RequestWith(ctx, client(t, ahead)); err != nil || resp.Topics[0].Partitions[0].ErrorCode != 0 {
		t.Fatalf("DeleteRecords: %v %+v", err, resp)
	}
	for p, rp := range fetchFrom(t, c, []int64{next, next, next}, 4<<10) {
		if rp.ErrorCode != kerr.OffsetOutOfRange.Code {
			t.Fatalf("partition %d from %d after DeleteRecords to %d: error %d, %d bytes; want OFFSET_OUT_OF_RANGE", p, next, next+1, rp.ErrorCode, len(rp.RecordBatches))
		}
	}
	if got := aheadCount(m, "stale"); got != 3 {
		t.Fatalf("%d partitions read ahead found stale after DeleteRecords, want 3", got)
	}
	// A read-ahead in flight or waiting when the client goes away is let go.
	fetchFrom(t, c, []int64{next + 1, next + 1, next + 1}, 4<<10)
	c.Close()
	deadline := time.Now().Add(10 * time.Second)
	for srv.readAheadBytes.Load() != 0 {
		if time.Now().After(deadline) {
			t.Fatalf("%d bytes of read-ahead held after the client left", srv.readAheadBytes.Load())
		}
		time.Sleep(10 * time.Millisecond)
	}
}

// A topic deleted and created again under its name has other records at
// the same offsets: what was read ahead of the old one is not answered.
func TestFetchReadAheadNotAcrossTopicDeletion(t *testing.T) {
	ahead, _, _, m := readAheadSetup(t)
	c := client(t, ahead)
	first := fetchFrom(t, c, []int64{0, 0, 0}, 4<<10)
	next := lastOffset(t, first[0].RecordBatches) + 1
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	adm := kadm.NewClient(client(t, ahead))
	if _, err := adm.DeleteTopic(ctx, "ahead"); err != nil {
		t.Fatal(err)
	}
	p := client(t, ahead, kgo.DefaultProduceTopic("ahead"), kgo.AllowAutoTopicCreation(), kgo.RecordPartitioner(kgo.ManualPartitioner()))
	for part := int32(0); part < 3; part++ {
		var recs []*kgo.Record
		for i := 0; i < 200; i++ {
			recs = append(recs, &kgo.Record{Partition: part, Value: []byte(fmt.Sprintf("new-%d", i))})
		}
		if err := p.ProduceSync(ctx, recs...).FirstErr(); err != nil {
			t.Fatal(err)
		}
	}
	for part, rp := range fetchFrom(t, c, []int64{next, next, next}, 4<<10) {
		recs, _, err := decodeBatches(rp.RecordBatches, ptr(int64(1<<30)))
		if err != nil || rp.ErrorCode != 0 || len(recs) == 0 {
			t.Fatalf("partition %d: error %d, %d records, %v", part, rp.ErrorCode, len(recs), err)
		}
		if want := fmt.Sprintf("new-%d", next); string(recs[0].Value) != want {
			t.Fatalf("partition %d from %d after the topic was created again: %q, want %q", part, next, recs[0].Value, want)
		}
	}
	// (A read ahead still under way when the topic went may have found no
	// records to frame: none is used, whatever the timing.)
	if got := aheadCount(m, "used"); got != 0 {
		t.Fatalf("%d partitions answered from the read-ahead after the topic's deletion", got)
	}
}
