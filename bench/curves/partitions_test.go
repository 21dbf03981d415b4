package curves

import (
	"context"
	"fmt"
	"os"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/twmb/franz-go/pkg/kadm"
	"github.com/twmb/franz-go/pkg/kgo"

	"strata/bench"
	"strata/bench/load"
	"strata/internal/testsvc"
)

var partitionCounts = []int{16, 256, 1_000, 10_000}

// fileModel is one way to lay a topic's partitions out on disk: the topic
// configs its topics are created with and the server settings it needs.
// The partitions curve runs once per model, each a series of its charts.
type fileModel struct {
	name    string
	configs map[string]*string
	sets    []string
}

// fileModels are the models the partitions curve compares: a file per
// partition (the default) and the design's shared files
// (strata.file.model=shared, docs/engine.md).
var fileModels = []fileModel{
	{name: "file per partition"},
	{name: "shared files", configs: map[string]*string{"strata.file.model": ptr("shared")}},
}

// BenchmarkCurvePartitions: how produce, consume, latency and memory move
// with the partitions of a topic, through `strata serve` (default
// settings: fsync before the acknowledgement; tiering off) driven by
// franz-go with bench/load's producer settings (acks=all, no compression,
// 1 KiB values). At each point (16, 256, 1,000, 10,000 partitions) a fresh
// server and one topic; records go round robin over the partitions, so
// every partition takes writes. The topic's creation is timed (CreateTopics
// until Metadata gives every partition a leader). One untimed warm-up pass
// of 20,000 records, then 3 runs of: produce 100,000 records (30,000 above
// 1,000 partitions) as fast as the client goes, consume as many from the
// start with a new client; then p99 latency of a fifth as many records at
// one rate (half the 16-partition point's produce rate, or half this
// point's when that is lower), 3 runs. RSS is the server's peak resident
// set (its process_resident_memory_bytes, sampled every 100 ms from the
// topic's creation to the last write). The engine's fsyncs per 1,000
// records in the p99 passes (its /metrics) say what the fixed rate costs
// the disk. Every
// figure is judged against the 16-partition point of the same model in
// the same run.
func BenchmarkCurvePartitions(b *testing.B) {
	for _, m := range fileModels {
		var ref *partitionPoint
		for _, n := range points(b, partitionCounts) {
			p := measurePartitions(b, m, n, ref)
			if ref == nil {
				ref = &p
			}
			series := func(what string) string { return what + ", " + m.name }
			x := float64(n)
			report(b, bench.Figure{Name: fmt.Sprintf("curve: produce 1KiB x %d partitions, %s", n, m.name), Value: p.produce, Unit: "rec/s",
				Reference: "16 partitions, same run", ReferenceValue: ref.produce, Runs: partitionRuns,
				Curve: "partitions-throughput", Series: series("produce"), X: x, XUnit: "partitions"})
			report(b, bench.Figure{Name: fmt.Sprintf("curve: consume x %d partitions, %s", n, m.name), Value: p.consume, Unit: "rec/s",
				Reference: "16 partitions, same run", ReferenceValue: ref.consume, Runs: partitionRuns,
				Curve: "partitions-throughput", Series: series("consume"), X: x, XUnit: "partitions"})
			report(b, bench.Figure{Name: fmt.Sprintf("curve: produce p99 at %.0f rec/s x %d partitions, %s", p.rate, n, m.name), Value: p.p99, Unit: "ms",
				Reference: "16 partitions, same run", ReferenceValue: ref.p99, Runs: partitionRuns,
				Curve: "partitions-latency", Series: series("produce p99"), X: x, XUnit: "partitions"})
			report(b, bench.Figure{Name: fmt.Sprintf("curve: engine fsyncs per 1,000 records at %.0f rec/s x %d partitions, %s", p.rate, n, m.name), Value: p.fsyncsPer1k, Unit: "fsyncs",
				Reference: "16 partitions, same run", ReferenceValue: ref.fsyncsPer1k, Runs: partitionRuns,
				Curve: "partitions-fsyncs", Series: series("engine fsyncs per 1,000 records, p99 passes"), X: x, XUnit: "partitions"})
			report(b, bench.Figure{Name: fmt.Sprintf("curve: create a topic of %d partitions, %s", n, m.name), Value: p.create, Unit: "s",
				Reference: "16 partitions, same run", ReferenceValue: ref.create, Runs: 1,
				Curve: "partitions-create", Series: series("CreateTopics until every partition has a leader"), X: x, XUnit: "partitions"})
			report(b, bench.Figure{Name: fmt.Sprintf("curve: server peak RSS x %d partitions, %s", n, m.name), Value: p.rssMiB, Unit: "MiB",
				Reference: "16 partitions, same run", ReferenceValue: ref.rssMiB, Runs: 1,
				Curve: "partitions-rss", Series: series("server peak RSS"), X: x, XUnit: "partitions"})
		}
	}
}

const (
	partitionRuns    = 3
	partitionRecords = 100_000
	// Above 1,000 partitions a run is 30,000 records (3 a partition), so
	// the 10,000-partition point takes minutes, not a quarter of an hour.
	partitionRecordsMany = 30_000
	partitionWarmup      = 20_000
)

// createTopic is load.CreateTopic with room for 10,000 partitions: the
// broker creates each partition's files before it answers, which takes
// longer than a client's default request timeout.
func createTopic(ctx context.Context, brokers, topic string, partitions int, configs map[string]*string) error {
	c, err := kgo.NewClient(kgo.SeedBrokers(brokers), kgo.RequestTimeoutOverhead(10*time.Minute))
	if err != nil {
		return err
	}
	defer c.Close()
	adm := kadm.NewClient(c)
	adm.SetTimeoutMillis(int32((10 * time.Minute).Milliseconds()))
	resp, err := adm.CreateTopic(ctx, int32(partitions), 1, configs, topic)
	if err == nil {
		err = resp.Err
	}
	if err != nil {
		return fmt.Errorf("create topic %s with %d partitions at %s: %w", topic, partitions, brokers, err)
	}
	// Then every partition has a leader (load.CreateTopic's wait).
	return load.CreateTopic(ctx, brokers, topic, partitions, configs)
}

type partitionPoint struct {
	produce, consume, p99, rate, rssMiB, create float64
	// fsyncsPer1k is the engine's fsyncs per 1,000 records appended in
	// the latency passes: what a fixed rate costs the disk.
	fsyncsPer1k float64
}

func measurePartitions(b *testing.B, m fileModel, n int, ref *partitionPoint) partitionPoint {
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Minute)
	defer cancel()
	srv := testsvc.StartProcess(b, strataBin, b.TempDir(), append([]string{"tiering.enabled=false"}, m.sets...)...)
	defer srv.Stop()
	topic := fmt.Sprintf("curve-%d", n)
	t0 := time.Now()
	if err := createTopic(ctx, srv.Kafka, topic, n, m.configs); err != nil {
		b.Fatal(err)
	}
	created := time.Since(t0)
	fmt.Fprintf(os.Stderr, "curves: %s, %d partitions created in %s\n", m.name, n, created.Round(time.Millisecond))
	records := partitionRecords
	if n > 1_000 {
		records = partitionRecordsMany
	}
	peak := watchRSS(b, srv.Admin)
	c, err := kgo.NewClient(append(load.ClientOpts(srv.Kafka), kgo.RecordPartitioner(kgo.ManualPartitioner()))...)
	if err != nil {
		b.Fatal(err)
	}
	defer c.Close()
	if _, err := load.ProduceSpread(ctx, c, topic, n, value(0, 1024), partitionWarmup, 0, nil); err != nil {
		b.Fatal(err)
	}
	var prod, cons, p99 []float64
	for run := 0; run < partitionRuns; run++ {
		pr, err := load.ProduceSpread(ctx, c, topic, n, value(0, 1024), records, 0, nil)
		if err != nil {
			b.Fatal(err)
		}
		cr, err := load.Consume(ctx, srv.Kafka, topic, records, nil)
		if err != nil {
			b.Fatal(err)
		}
		prod, cons = append(prod, pr.RecordsPerSec()), append(cons, cr.RecordsPerSec())
		fmt.Fprintf(os.Stderr, "curves: %s, %d partitions, run %d/%d: produce %.0f rec/s, consume %.0f rec/s\n",
			m.name, n, run+1, partitionRuns, pr.RecordsPerSec(), cr.RecordsPerSec())
	}
	p := partitionPoint{produce: bench.Median(prod), consume: bench.Median(cons), create: created.Seconds()}
	p.rate = p.produce / 2
	if ref != nil {
		p.rate = min(ref.rate, p.rate)
	}
	before, err := serverMetrics(srv.Admin)
	if err != nil {
		b.Fatal(err)
	}
	for run := 0; run < partitionRuns; run++ {
		lr, err := load.ProduceSpread(ctx, c, topic, n, value(0, 1024), records/5, p.rate, nil)
		if err != nil {
			b.Fatal(err)
		}
		p99 = append(p99, bench.Ms(bench.Percentile(lr.Latencies, 99)))
	}
	p.p99 = bench.Median(p99)
	after, err := serverMetrics(srv.Admin)
	if err != nil {
		b.Fatal(err)
	}
	const fsyncs, appended = "strata_engine_fsyncs_total", "strata_engine_appended_records_total"
	p.fsyncsPer1k = (after[fsyncs] - before[fsyncs]) / max(1, after[appended]-before[appended]) * 1000
	p.rssMiB = float64(peak()) / (1 << 20)
	return p
}

// watchRSS samples the server's resident set from its /metrics every
// 100 ms until the benchmark ends; the function returned stops it and
// gives the largest sample.
func watchRSS(b testing.TB, admin string) func() int64 {
	var peak atomic.Int64
	stop, done := make(chan struct{}), make(chan struct{})
	sample := func() {
		if v, err := serverRSS(admin); err == nil && v > peak.Load() {
			peak.Store(v)
		}
	}
	go func() {
		defer close(done)
		for {
			sample()
			select {
			case <-stop:
				return
			case <-time.After(100 * time.Millisecond):
			}
		}
	}()
	var once sync.Once
	finish := func() int64 {
		once.Do(func() { close(stop); <-done; sample() })
		return peak.Load()
	}
	b.Cleanup(func() { finish() })
	return finish
}

// serverRSS is the process_resident_memory_bytes a strata serve reports.
func serverRSS(admin string) (int64, error) {
	m, err := serverMetrics(admin)
	if err != nil {
		return 0, err
	}
	v, ok := m["process_resident_memory_bytes"]
	if !ok {
		return 0, fmt.Errorf("%s/metrics has no process_resident_memory_bytes", admin)
	}
	return int64(v), nil
}
