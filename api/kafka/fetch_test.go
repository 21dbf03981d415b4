package kafka

import (
	"bytes"
	"context"
	"encoding/binary"
	"fmt"
	"strata/engine/record"
	"strata/engine/store"
	"testing"
	"time"

	"github.com/twmb/franz-go/pkg/kerr"
	"github.com/twmb/franz-go/pkg/kgo"
	"github.com/twmb/franz-go/pkg/kmsg"
)

// One Fetch for many partitions, read in parallel, answers in request order
// and stops at max_bytes: the first partition with records always comes
// back (at least one record), later ones with what is left of max_bytes
// (the client asks again for the rest).
func TestFetchManyPartitionsHonoursMaxBytes(t *testing.T) {
	addr, _ := startServer(t, Config{AutoCreateTopics: true, DefaultPartitions: 6})
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	c := client(t, addr, kgo.DefaultProduceTopic("wide"), kgo.AllowAutoTopicCreation(), kgo.RecordPartitioner(kgo.ManualPartitioner()))
	for p := int32(0); p < 6; p++ {
		for i := 0; i < 50; i++ {
			if err := c.ProduceSync(ctx, &kgo.Record{Partition: p, Value: []byte(fmt.Sprintf("p%d-%d-%0100d", p, i, 0))}).FirstErr(); err != nil {
				t.Fatal(err)
			}
		}
	}
	var batchBytes []int
	fetch := func(maxBytes int32) []int {
		batchBytes = batchBytes[:0]
		req := kmsg.NewPtrFetchRequest()
		req.Version, req.ReplicaID, req.MaxBytes = 11, -1, maxBytes
		rt := kmsg.NewFetchRequestTopic()
		rt.Topic = "wide"
		for _, p := range []int32{4, 1, 5, 0, 2, 3} { // request order, not partition order
			rp := kmsg.NewFetchRequestTopicPartition()
			rp.Partition, rp.PartitionMaxBytes, rp.CurrentLeaderEpoch, rp.LogStartOffset = p, 1<<20, -1, -1
			rt.Partitions = append(rt.Partitions, rp)
		}
		req.Topics = append(req.Topics, rt)
		resp, err := req.RequestWith(ctx, c)
		if err != nil {
			t.Fatal(err)
		}
		var sizes []int
		for i, p := range resp.Topics[0].Partitions {
			if want := rt.Partitions[i].Partition; p.Partition != want || p.ErrorCode != 0 {
				t.Fatalf("answer %d: partition %d error %d, want partition %d", i, p.Partition, p.ErrorCode, want)
			}
			recs, _, err := decodeBatches(p.RecordBatches, ptr(int64(1<<30)))
			if err != nil {
				t.Fatal(err)
			}
			for j, r := range recs {
				if want := fmt.Sprintf("p%d-%d-", p.Partition, j); string(r.Value[:len(want)]) != want {
					t.Fatalf("partition %d record %d is %q", p.Partition, j, r.Value)
				}
			}
			sizes = append(sizes, len(recs))
			batchBytes = append(batchBytes, len(p.RecordBatches))
		}
		return sizes
	}
	if got := fmt.Sprint(fetch(50 << 20)); got != "[50 50 50 50 50 50]" {
		t.Fatalf("a roomy fetch returned %s records per partition", got)
	}
	twoAndABit := int32(batchBytes[0] + batchBytes[1] + batchBytes[2]/2)
	got := fetch(twoAndABit)
	total := 0
	for _, n := range batchBytes {
		total += n
	}
	// As Kafka: whole partitions while they fit, then what is left of
	// max_bytes goes to the next ones (each a prefix of its partition).
	if got[0] != 50 || got[1] != 50 || got[2] == 0 || got[2] == 50 || total > int(twoAndABit) {
		t.Fatalf("a fetch with room for two partitions and a half returned %v records per partition, %d bytes for max_bytes %d", got, total, twoAndABit)
	}
	if got := fmt.Sprint(fetch(1)); got != "[1 0 0 0 0 0]" {
		t.Fatalf("a 1-byte fetch returned %s records per partition; want one record of the first, the rest empty", got)
	}
}

func ptr[T any](v T) *T { return &v }

// A fetch frames each record itself: byte for byte what kmsg encodes, for
// null and empty keys, values and header values, and any deltas.
func TestAppendRecordAsKmsg(t *testing.T) {
	for _, tc := range []struct {
		name    string
		r       record.Record
		tsDelta int64
		delta   int32
	}{
		{"null key and value", record.Record{}, 0, 0},
		{"empty key and value", record.Record{Key: []byte{}, Value: []byte{}}, 1, 1},
		{"key, value, headers", record.Record{Key: []byte("k"), Value: bytes.Repeat([]byte("v"), 300),
			Headers: []record.Header{{Key: "a", Value: []byte("1")}, {Key: "", Value: nil}, {Key: "c", Value: []byte{}}}}, 1 << 40, 1<<31 - 1},
		{"negative timestamp delta", record.Record{Value: []byte("x")}, -5, 63},
		{"long value", record.Record{Value: make([]byte, 1<<20)}, 64, 64},
	} {
		t.Run(tc.name, func(t *testing.T) {
			length := recordLen(&tc.r, tc.tsDelta, tc.delta)
			var headers []kmsg.Header
			for _, h := range tc.r.Headers {
				headers = append(headers, kmsg.Header{Key: h.Key, Value: h.Value})
			}
			kr := kmsg.Record{Length: length, TimestampDelta64: tc.tsDelta, OffsetDelta: tc.delta, Key: tc.r.Key, Value: tc.r.Value, Headers: headers}
			want := kr.AppendTo([]byte("prefix"))
			got := appendRecord([]byte("prefix"), length, tc.tsDelta, tc.delta, &tc.r)
			if !bytes.Equal(got, want) {
				t.Fatalf("appendRecord: %d bytes %x..., kmsg: %d bytes %x...", len(got), got[:min(len(got), 32)], len(want), want[:min(len(want), 32)])
			}
			if n, k := binary.Varint(got[len("prefix"):]); int(n) != len(got)-len("prefix")-k {
				t.Fatalf("length field %d, record of %d bytes after it", n, len(got)-len("prefix")-k)
			}
		})
	}
}

// A consumer fetch between the high watermark and the log end is answered
// empty, not out of range: after a failover a consumer that read up to the
// old leader's high watermark may be ahead of the new leader's until its
// followers catch up, and a reset there would re-read or skip the log.
// Kafka checks a consumer's offset against the log end.
func TestFetchBetweenHighWatermarkAndLogEndIsEmpty(t *testing.T) {
	addr, s := startServer(t, Config{AutoCreateTopics: true, DefaultPartitions: 1})
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	c := client(t, addr, kgo.DefaultProduceTopic("ahead"), kgo.AllowAutoTopicCreation())
	produce := func(n int) {
		for i := 0; i < n; i++ {
			if err := c.ProduceSync(ctx, &kgo.Record{Value: []byte(fmt.Sprint(i))}).FirstErr(); err != nil {
				t.Fatal(err)
			}
		}
	}
	produce(10)
	// A managed high watermark stays at 10 while the log grows to 20, as a
	// new leader's does until its followers fetch.
	if err := s.(store.Replica).SetHighWatermark(ctx, "ahead-0", 10); err != nil {
		t.Fatal(err)
	}
	produce(10)
	for _, tc := range []struct {
		offset int64
		want   int16
	}{{10, 0}, {11, 0}, {15, 0}, {20, 0}, {21, kerr.OffsetOutOfRange.Code}} {
		p := rawFetch(ctx, t, c, "ahead", tc.offset, -1)
		if p.ErrorCode != tc.want || p.HighWatermark != 10 || len(p.RecordBatches) != 0 {
			t.Errorf("fetch at %d (high watermark 10, log end 20): error %d, high watermark %d, %d bytes of batches; want error %d, 10, none",
				tc.offset, p.ErrorCode, p.HighWatermark, len(p.RecordBatches), tc.want)
		}
	}
}
