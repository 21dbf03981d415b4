package kafka

import (
	"context"
	"fmt"
	"os"
	"strconv"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/testutil"
	dto "github.com/prometheus/client_model/go"
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

// Consume 100,000 records of 1 KiB from the start with franz-go (16
// partitions, bench/load), from one engine through two servers: one with
// fetch read-ahead (kafka.fetch_read_ahead_bytes 128MiB), one without (the
// default). Runs alternate; medians of
// 5 (STRATA_BENCH_RUNS sets another count).
func BenchmarkKafkaConsume(b *testing.B) {
	const partitions, total, size = 16, 100_000, 1024
	runs := 5
	if n, err := strconv.Atoi(os.Getenv("STRATA_BENCH_RUNS")); err == nil && n > 0 {
		runs = n
	}
	ctx := context.Background()
	eng, err := segment.Open(segment.Config{Dir: b.TempDir(), Workers: 4, Logger: quiet})
	if err != nil {
		b.Fatal(err)
	}
	defer eng.Close()
	metrics := NewMetrics(prometheus.NewRegistry())
	ahead, _ := serveStore(b, eng, Config{Metrics: metrics, MaxReadAheadBytes: 128 << 20})
	plainMetrics := NewMetrics(prometheus.NewRegistry())
	plain, _ := serveStore(b, eng, Config{Metrics: plainMetrics})
	const topic = "consume"
	if err := load.CreateTopic(ctx, ahead, topic, partitions, nil); err != nil {
		b.Fatal(err)
	}
	c, err := kgo.NewClient(load.ClientOpts(ahead)...)
	if err != nil {
		b.Fatal(err)
	}
	_, err = load.Produce(ctx, c, topic, total, size, 0, nil)
	c.Close()
	if err != nil {
		b.Fatal(err)
	}
	// CPU seconds (server and client, this process) say whether reading
	// ahead costs work, which the neighbours' load does not hide.
	var withAhead, without, aheadCPU, plainCPU []float64
	for run := 0; run < runs; run++ {
		for _, side := range []struct {
			addr       string
			rates, cpu *[]float64
		}{{ahead, &withAhead, &aheadCPU}, {plain, &without, &plainCPU}} {
			cpu := cpuTime()
			res, err := load.Consume(ctx, side.addr, topic, total, nil)
			if err != nil {
				b.Fatal(err)
			}
			*side.rates = append(*side.rates, res.RecordsPerSec())
			*side.cpu = append(*side.cpu, (cpuTime() - cpu).Seconds())
		}
		b.Logf("run %d: read-ahead %.0f rec/s (%.3f s CPU), without %.0f rec/s (%.3f s CPU)", run,
			withAhead[run], aheadCPU[run], without[run], plainCPU[run])
	}
	// The read-ahead must be what the consumer's fetches took, or the
	// figure measures something else.
	used := testutil.ToFloat64(metrics.ahead.WithLabelValues("used"))
	unused := testutil.ToFloat64(metrics.ahead.WithLabelValues("unused"))
	b.Logf("read-ahead partitions used %.0f, unused %.0f", used, unused)
	// The broker's share of each round trip (the time from a fetch read to
	// its answer framed; the client waits for it): what read-ahead takes
	// off the consumer's path, whatever the machine's load does to rates.
	handling := func(m *Metrics) float64 {
		var d dto.Metric
		m.latency.WithLabelValues("Fetch").(prometheus.Histogram).Write(&d)
		return 1000 * d.Histogram.GetSampleSum() / float64(d.Histogram.GetSampleCount())
	}
	if used < 10*unused {
		b.Errorf("read-ahead partitions used %.0f, unused %.0f: the consumer's fetches did not take them", used, unused)
	}
	report(b, bench.Figure{Name: "kafka consume from the start, fetch read-ahead (franz-go)", Value: bench.Median(withAhead), Unit: "rec/s",
		Reference: "the same consume without read-ahead", ReferenceValue: bench.Median(without), Runs: runs})
	report(b, bench.Figure{Name: "kafka consume CPU, fetch read-ahead (server and franz-go)", Value: bench.Median(aheadCPU), Unit: "s",
		Reference: "the same consume without read-ahead", ReferenceValue: bench.Median(plainCPU), Target: "<= 1.10", Runs: runs})
	report(b, bench.Figure{Name: "kafka fetch handling, mean, fetch read-ahead (consumer's wait for the broker)", Value: handling(metrics), Unit: "ms",
		Reference: "the same consume without read-ahead", ReferenceValue: handling(plainMetrics), Runs: runs})
}

func cpuTime() time.Duration {
	var ru syscall.Rusage
	syscall.Getrusage(syscall.RUSAGE_SELF, &ru)
	return time.Duration(ru.Utime.Nano() + ru.Stime.Nano())
}
