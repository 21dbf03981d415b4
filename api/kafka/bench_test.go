package kafka

import (
	"context"
	"fmt"
	"sync"
	"testing"
	"time"

	"github.com/twmb/franz-go/pkg/kgo"

	"strata/bench"
	"strata/bench/load"
	"strata/engine/record"
	"strata/engine/segment"
	"strata/engine/store"
)

func report(b *testing.B, f bench.Figure) {
	bench.Must(b, "make bench (go test -bench Kafka ./api/kafka)", f)
}

// Produce and consume through the Kafka front end with franz-go (1 KiB
// records, acks=all, 16 partitions; bench/load, the load the peer benchmark
// puts on Apache Kafka), beside the engine's own append rate for the same
// records in the same run: what the protocol layer costs. Median of 3 runs.
func BenchmarkKafkaProduceConsume(b *testing.B) {
	const partitions, total, size, runs = 16, 200_000, 1024, 3
	ctx := context.Background()
	value := make([]byte, size)

	// The engine alone: the same records, 16 shards, producer-sized batches.
	eng, err := segment.Open(segment.Config{Dir: b.TempDir(), Logger: quiet})
	if err != nil {
		b.Fatal(err)
	}
	var engineRates []float64
	for run := 0; run < runs; run++ {
		t0 := time.Now()
		var wg sync.WaitGroup
		for p := 0; p < partitions; p++ {
			shard := store.ShardName(fmt.Sprintf("e%d", run), int32(p))
			eng.CreateShard(ctx, shard)
			wg.Add(1)
			go func() {
				defer wg.Done()
				recs := make([]record.Record, 16)
				for i := 0; i < total/partitions; i += len(recs) {
					for j := range recs {
						recs[j] = record.Record{Timestamp: time.Now().UnixMilli(), Value: value}
					}
					if _, err := eng.Append(ctx, shard, recs); err != nil {
						b.Error(err)
						return
					}
				}
			}()
		}
		wg.Wait()
		engineRates = append(engineRates, float64(total)/time.Since(t0).Seconds())
	}
	eng.Close()

	addr, _ := startServer(b, Config{})
	c, err := kgo.NewClient(load.ClientOpts(addr)...)
	if err != nil {
		b.Fatal(err)
	}
	defer c.Close()
	var produceRates, consumeRates []float64
	for run := 0; run < runs; run++ {
		topic := fmt.Sprintf("bench-%d", run)
		if err := load.CreateTopic(ctx, addr, topic, partitions, nil); err != nil {
			b.Fatal(err)
		}
		prod, err := load.Produce(ctx, c, topic, total, size, 0, nil)
		if err != nil {
			b.Fatal(err)
		}
		cons, err := load.Consume(ctx, addr, topic, total, nil)
		if err != nil {
			b.Fatal(err)
		}
		produceRates = append(produceRates, prod.RecordsPerSec())
		consumeRates = append(consumeRates, cons.RecordsPerSec())
	}
	produceRate := bench.Median(produceRates)
	report(b, bench.Figure{Name: "kafka produce 1KiB x 16 partitions, acks=all (franz-go)", Value: produceRate, Unit: "rec/s",
		Reference: "engine append, same records", ReferenceValue: bench.Median(engineRates), Target: ">= 0.70", Runs: runs})
	report(b, bench.Figure{Name: "kafka consume from the start (franz-go)", Value: bench.Median(consumeRates), Unit: "rec/s",
		Reference: "kafka produce rate, same run", ReferenceValue: produceRate, Runs: runs})
}
