package kafka

import (
	"context"
	"fmt"
	"sync"
	"testing"
	"time"

	"github.com/twmb/franz-go/pkg/kgo"

	"strata/bench"
	"strata/engine/record"
	"strata/engine/segment"
	"strata/engine/store"
)

func report(b *testing.B, f bench.Figure) {
	bench.Must(b, "make bench (go test -bench Kafka ./api/kafka)", f)
}

// Produce and consume through the Kafka front end with franz-go (1 KiB
// records, acks=all, 16 partitions), beside the engine's own append rate for
// the same records in the same run; then produce latency at half the rate.
func BenchmarkKafkaProduceConsume(b *testing.B) {
	const partitions, total, size = 16, 200_000, 1024
	ctx := context.Background()
	value := make([]byte, size)

	// The engine alone: the same records, 16 shards, producer-sized batches.
	eng, err := segment.Open(segment.Config{Dir: b.TempDir(), Logger: quiet})
	if err != nil {
		b.Fatal(err)
	}
	for p := 0; p < partitions; p++ {
		eng.CreateShard(ctx, store.ShardName("e", int32(p)))
	}
	t0 := time.Now()
	var wg sync.WaitGroup
	for p := 0; p < partitions; p++ {
		wg.Add(1)
		go func(p int) {
			defer wg.Done()
			recs := make([]record.Record, 16)
			for i := 0; i < total/partitions; i += len(recs) {
				for j := range recs {
					recs[j] = record.Record{Timestamp: time.Now().UnixMilli(), Value: value}
				}
				if _, err := eng.Append(ctx, store.ShardName("e", int32(p)), recs); err != nil {
					b.Error(err)
					return
				}
			}
		}(p)
	}
	wg.Wait()
	engineRate := float64(total) / time.Since(t0).Seconds()
	eng.Close()

	addr, _ := startServer(b, Config{AutoCreateTopics: true, DefaultPartitions: partitions})
	c, err := kgo.NewClient(kgo.SeedBrokers(addr), kgo.DefaultProduceTopic("bench"), kgo.AllowAutoTopicCreation(),
		kgo.RequiredAcks(kgo.AllISRAcks()), kgo.ProducerBatchCompression(kgo.NoCompression()), kgo.MaxBufferedRecords(50_000))
	if err != nil {
		b.Fatal(err)
	}
	defer c.Close()
	t0 = time.Now()
	var failed error
	var mu sync.Mutex
	for i := 0; i < total; i++ {
		c.Produce(ctx, &kgo.Record{Value: value}, func(_ *kgo.Record, err error) {
			if err != nil {
				mu.Lock()
				failed = err
				mu.Unlock()
			}
		})
	}
	if err := c.Flush(ctx); err != nil || failed != nil {
		b.Fatal(err, failed)
	}
	produceRate := float64(total) / time.Since(t0).Seconds()
	report(b, bench.Figure{Name: "kafka produce 1KiB x 16 partitions, acks=all (franz-go)", Value: produceRate, Unit: "rec/s",
		Reference: "engine append, same records", ReferenceValue: engineRate, Target: ">= 0.70", Runs: 1})

	cons, err := kgo.NewClient(kgo.SeedBrokers(addr), kgo.ConsumeTopics("bench"), kgo.ConsumeResetOffset(kgo.NewOffset().AtStart()))
	if err != nil {
		b.Fatal(err)
	}
	defer cons.Close()
	t0 = time.Now()
	for n := 0; n < total; {
		fs := cons.PollFetches(ctx)
		if err := fs.Err(); err != nil {
			b.Fatal(err)
		}
		n += fs.NumRecords()
	}
	consumeRate := float64(total) / time.Since(t0).Seconds()
	report(b, bench.Figure{Name: "kafka consume from the start (franz-go)", Value: consumeRate, Unit: "rec/s",
		Reference: "kafka produce rate, same run", ReferenceValue: produceRate, Runs: 1})

	// Latency at half the measured maximum rate.
	rate := produceRate / 2
	interval := time.Duration(float64(time.Second) / rate * 64)
	var lat []time.Duration
	var lmu sync.Mutex
	tick := time.NewTicker(interval)
	for burst := 0; burst < 300; burst++ {
		<-tick.C
		for i := 0; i < 64; i++ {
			start := time.Now()
			c.Produce(ctx, &kgo.Record{Value: value}, func(_ *kgo.Record, err error) {
				lmu.Lock()
				lat = append(lat, time.Since(start))
				lmu.Unlock()
			})
		}
	}
	tick.Stop()
	c.Flush(ctx)
	report(b, bench.Figure{Name: fmt.Sprintf("kafka produce p99 at half the max rate (%.0f rec/s)", rate), Value: bench.Ms(bench.Percentile(lat, 99)),
		Unit: "ms", Reference: "produce p50, same load", ReferenceValue: bench.Ms(bench.Percentile(lat, 50)), Runs: len(lat)})
}
