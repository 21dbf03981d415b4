package kafka

import (
	"context"
	"fmt"
	"testing"
	"time"

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
