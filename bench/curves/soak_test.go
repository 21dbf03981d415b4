package curves

import (
	"bufio"
	"context"
	"encoding/json"
	"fmt"
	"math"
	"net/http"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/twmb/franz-go/pkg/kgo"

	"strata/bench"
	"strata/bench/load"
	"strata/internal/testsvc"
)

// TestSoak is make soak's long run (STRATA_SOAK_TIME, e.g. 30m; a minute
// without it): one `strata serve` tiering to MinIO every
// minute, 16 partitions of 1 KiB records (64 MiB segments, a minute of
// local retention after upload, 512 MiB per partition in all, so the run
// reaches a steady state on disk and in the bucket). The producer's top
// rate is measured first (median of 3 passes of 100,000 records, as fast as
// franz-go goes), then it produces at half that rate for the whole time.
// Every 10 s window gives a line of STRATA_SOAK_OUT (bench/soak.jsonl by
// default): the p50 and p99 latency of the records sent in it, the
// server's resident set, the bytes sealed and not yet tiered, and whether
// a tiering run finished in it. At the end it says whether RSS grew: the
// median RSS of the last fifth of the windows beside that of the second
// fifth (the first is warm-up), target <= 1.10.
func TestSoak(t *testing.T) {
	// make test runs it for a minute (one tiering run), so the long run's
	// machinery is tested on every change; make soak runs it for real.
	spec, out := os.Getenv("STRATA_SOAK_TIME"), os.Getenv("STRATA_SOAK_OUT")
	if spec == "" {
		spec, out = "1m", filepath.Join(t.TempDir(), "soak.jsonl")
	}
	total, err := time.ParseDuration(spec)
	if err != nil || total < time.Minute {
		t.Fatalf("STRATA_SOAK_TIME=%q: want a duration of at least 1m (e.g. 30m)", spec)
	}
	if out == "" {
		out = filepath.Join("..", "soak.jsonl")
	}
	m := testsvc.StartMinIO(t)
	bucket := m.Bucket(t, "strata-soak")
	srv := testsvc.StartProcess(t, strataBin, t.TempDir(), "cold.backend=s3", "cold.s3.endpoint="+m.Endpoint, "cold.s3.bucket="+bucket,
		"cold.s3.prefix="+testsvc.UniquePrefix(t), "cold.s3.access_key="+m.AccessKey, "cold.s3.secret_key="+m.SecretKey,
		"tiering.schedule=@every 1m", "tiering.min_sealed_age=0s", "tiering.local_retention=1m")
	defer srv.Stop()
	ctx := context.Background()
	const partitions = 16
	topic := "soak"
	if err := createTopic(ctx, srv.Kafka, topic, partitions, map[string]*string{
		"segment.bytes": ptr(strconv.Itoa(64 << 20)), "retention.bytes": ptr(strconv.Itoa(512 << 20)), "local.retention.ms": ptr("60000")}); err != nil {
		t.Fatal(err)
	}
	c, err := kgo.NewClient(append(load.ClientOpts(srv.Kafka), kgo.RecordPartitioner(kgo.ManualPartitioner()))...)
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	var rates []float64
	for run := 0; run < 3; run++ {
		r, err := load.ProduceSpread(ctx, c, topic, partitions, value(0, 1024), 100_000, 0, nil)
		if err != nil {
			t.Fatal(err)
		}
		rates = append(rates, r.RecordsPerSec())
	}
	rate := bench.Median(rates) / 2
	fmt.Fprintf(os.Stderr, "soak: top rate %.0f rec/s; producing at %.0f rec/s for %s, series in %s\n", rate*2, rate, total, out)

	f, err := os.Create(out)
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	enc := json.NewEncoder(f)

	const window = 10 * time.Second
	windows := int(total / window)
	hists := make([]latencyHist, windows+1)
	var mu sync.Mutex
	var failed error
	val := value(0, 1024)
	start := time.Now()
	done := make(chan struct{})
	go func() { // the producer: bursts of 64, paced to the rate on average
		defer close(done)
		for i := 0; time.Since(start) < total; i++ {
			if i%64 == 0 {
				// A schedule, not a ticker: a ticker drops the ticks a
				// blocked Produce misses, and the rate would sag.
				time.Sleep(time.Until(start.Add(time.Duration(float64(i) / rate * float64(time.Second)))))
			}
			sent := time.Now()
			w := int(sent.Sub(start) / window)
			c.Produce(ctx, &kgo.Record{Topic: topic, Partition: int32(i % partitions), Value: val}, func(_ *kgo.Record, err error) {
				mu.Lock()
				defer mu.Unlock()
				if err != nil && failed == nil {
					failed = err
				}
				hists[min(w, windows)].add(time.Since(sent))
			})
		}
	}()
	type point struct {
		T          float64 `json:"t"`
		P50        float64 `json:"p50_ms"`
		P99        float64 `json:"p99_ms"`
		Records    int64   `json:"records"`
		RSS        float64 `json:"rss_mib"`
		LagBytes   float64 `json:"tiering_lag_mib"`
		TieringRun bool    `json:"tiering_run"`
	}
	var series []point
	lastRun, err := lastTieringRun(srv.Admin)
	if err != nil {
		t.Fatal(err)
	}
	for w := 0; w < windows; w++ {
		time.Sleep(time.Until(start.Add(time.Duration(w+1) * window)))
		// The window before last: its records have had a window to be
		// acknowledged.
		if w == 0 {
			continue
		}
		metrics, err := serverMetrics(srv.Admin)
		if err != nil {
			t.Fatal(err)
		}
		finished, err := lastTieringRun(srv.Admin)
		if err != nil {
			t.Fatal(err)
		}
		mu.Lock()
		h := hists[w-1]
		mu.Unlock()
		p := point{T: float64(w) * window.Seconds(), P50: h.percentile(50), P99: h.percentile(99), Records: h.n,
			RSS: metrics["process_resident_memory_bytes"] / (1 << 20), LagBytes: metrics["strata_tiering_lag_bytes"] / (1 << 20),
			TieringRun: finished.After(lastRun)}
		lastRun = finished
		series = append(series, p)
		if err := enc.Encode(p); err != nil {
			t.Fatal(err)
		}
		if w%6 == 0 {
			fmt.Fprintf(os.Stderr, "soak: %s: p99 %.1f ms, RSS %.0f MiB, untiered %.0f MiB\n", time.Duration(p.T)*time.Second, p.P99, p.RSS, p.LagBytes)
		}
	}
	<-done
	if err := c.Flush(ctx); err != nil {
		t.Fatal(err)
	}
	mu.Lock()
	defer mu.Unlock()
	if failed != nil {
		t.Fatalf("a produce failed during the soak: %v", failed)
	}
	if len(series) < 5 {
		t.Fatalf("%d windows: too short a soak to tell whether RSS grew", len(series))
	}
	rss := func(ps []point) float64 {
		var xs []float64
		for _, p := range ps {
			xs = append(xs, p.RSS)
		}
		return bench.Median(xs)
	}
	fifth := len(series) / 5
	late, early := rss(series[len(series)-fifth:]), rss(series[fifth:2*fifth])
	var p99s []float64
	for _, p := range series {
		p99s = append(p99s, p.P99)
	}
	name := fmt.Sprintf("soak: server RSS, last fifth of %s at %.0f rec/s", total, rate)
	bench.Must(t, "make soak", bench.Figure{Name: name, Value: late, Unit: "MiB", Reference: "second fifth", ReferenceValue: early, Target: "<= 1.10", Runs: fifth})
	bench.Must(t, "make soak", bench.Figure{Name: fmt.Sprintf("soak: produce p99, median of %d windows", len(series)), Value: bench.Median(p99s), Unit: "ms",
		Reference: "worst window", ReferenceValue: slicesMax(p99s), Runs: len(series)})
	// Produce blocks when the client's buffer is full, so a server that
	// falls behind shows as records sent behind the schedule, not as lost.
	var sent int64
	for _, p := range series {
		sent += p.Records
	}
	bench.Must(t, "make soak", bench.Figure{Name: "soak: records sent, beside the schedule's", Value: float64(sent), Unit: "records",
		Reference: "the schedule", ReferenceValue: rate * window.Seconds() * float64(len(series)), Target: ">= 0.95", Runs: len(series)})
	if late > early*1.10 {
		fmt.Fprintf(os.Stderr, "soak: RSS grew: %.0f MiB in the last fifth beside %.0f MiB in the second\n", late, early)
	} else {
		fmt.Fprintf(os.Stderr, "soak: RSS did not grow: %.0f MiB in the last fifth beside %.0f MiB in the second\n", late, early)
	}
}

func slicesMax(xs []float64) float64 {
	m := math.Inf(-1)
	for _, x := range xs {
		m = max(m, x)
	}
	return m
}

// latencyHist counts latencies in buckets 2% apart, from 1 µs: a window of
// a 30-minute run keeps a thousand counters, not every sample.
type latencyHist struct {
	n       int64
	buckets [1200]int64
}

var logStep = math.Log(1.02)

func (h *latencyHist) add(d time.Duration) {
	us := max(1, float64(d)/float64(time.Microsecond))
	h.buckets[min(len(h.buckets)-1, int(math.Log(us)/logStep))]++
	h.n++
}

// percentile is the p-th percentile in ms (the bucket's upper bound).
func (h *latencyHist) percentile(p float64) float64 {
	if h.n == 0 {
		return 0
	}
	want := int64(math.Ceil(float64(h.n) * p / 100))
	var seen int64
	for i, c := range h.buckets {
		if seen += c; seen >= want {
			return math.Exp(float64(i+1)*logStep) / 1000
		}
	}
	return math.Exp(float64(len(h.buckets))*logStep) / 1000
}

// serverMetrics reads the unlabelled samples of a strata serve's /metrics.
func serverMetrics(admin string) (map[string]float64, error) {
	resp, err := http.Get("http://" + admin + "/metrics")
	if err != nil {
		return nil, err
	}
	defer resp.Body.Close()
	got := map[string]float64{}
	sc := bufio.NewScanner(resp.Body)
	sc.Buffer(make([]byte, 64<<10), 1<<20)
	for sc.Scan() {
		name, v, ok := strings.Cut(sc.Text(), " ")
		if !ok || strings.HasPrefix(name, "#") || strings.Contains(name, "{") {
			continue
		}
		if f, err := strconv.ParseFloat(strings.TrimSpace(v), 64); err == nil {
			got[name] = f
		}
	}
	return got, sc.Err()
}

// lastTieringRun is when the server's latest tiering run finished (zero:
// none yet), from GET /v1/tiering/jobs.
func lastTieringRun(admin string) (time.Time, error) {
	resp, err := http.Get("http://" + admin + "/v1/tiering/jobs")
	if err != nil {
		return time.Time{}, err
	}
	defer resp.Body.Close()
	var runs []struct {
		Finished time.Time `json:"finished"`
	}
	if err := json.NewDecoder(resp.Body).Decode(&runs); err != nil {
		return time.Time{}, fmt.Errorf("GET /v1/tiering/jobs: %w", err)
	}
	var last time.Time
	for _, r := range runs {
		if r.Finished.After(last) {
			last = r.Finished
		}
	}
	return last, nil
}
