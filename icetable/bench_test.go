package icetable

import (
	"bytes"
	"context"
	"fmt"
	"os"
	"strconv"
	"sync"
	"testing"
	"time"

	"strata/bench"
	"strata/catalog"
	"strata/engine/segment"
	"strata/engine/store"
	"strata/parquet"
	"strata/tiering"
)

// timedCatalog times the catalog's writes a tiering run makes for the
// segments it tiers: what the table's commit adds to a run.
type timedCatalog struct {
	catalog.Catalog
	mu   sync.Mutex
	took time.Duration
}

func (c *timedCatalog) Transition(shard string, no uint64, from, to catalog.State, change func(*catalog.Segment)) (catalog.Segment, error) {
	start := time.Now()
	s, err := c.Catalog.Transition(shard, no, from, to, change)
	c.mu.Lock()
	c.took += time.Since(start)
	c.mu.Unlock()
	return s, err
}

func (c *timedCatalog) take() time.Duration {
	c.mu.Lock()
	defer c.mu.Unlock()
	d := c.took
	c.took = 0
	return d
}

// timedTables times each run's commit of the tables.
type timedTables struct {
	*Tables
	took time.Duration
}

func (t *timedTables) CommitTables(ctx context.Context, shards map[string]uint64) error {
	start := time.Now()
	err := t.Tables.CommitTables(ctx, shards)
	t.took = time.Since(start)
	return err
}

// The table's cost to tiering and to an analyst waiting for data, on a
// local cold tier (docs/iceberg.md, "Operators"): the commit of each run
// beside the catalog writes the same run makes for the segments it tiered
// (every run tiers several segments of each of 4 partitions), and the
// lag from a segment's seal to its being in the table beside the tiering
// schedule's interval, with the job run every interval while records
// arrive.
func BenchmarkTableCommit(b *testing.B) {
	bucket, dir := localBucket(b)
	r := newRig(b, bucket, dir)
	cat := &timedCatalog{Catalog: r.job.Catalog}
	tables := &timedTables{Tables: r.tables}
	r.job.Catalog, r.job.Tables = cat, tables
	const partitions, runs = 4, 40
	interval := 500 * time.Millisecond
	shards := make([]string, partitions)
	for p := range shards {
		shards[p] = store.ShardName("orders", int32(p))
	}
	var commits, writes, lags []time.Duration
	seen := map[string]map[uint64]bool{}
	for run := 0; run < runs; run++ {
		next := time.Now().Add(interval)
		for p, shard := range shards {
			produce(b, r.engine, shard, 14, run*partitions+p) // 16 KiB segments: several roll per run
		}
		time.Sleep(time.Until(next))
		cat.take()
		r.run(b, map[string]uint64{})
		commits, writes = append(commits, tables.took), append(writes, cat.take())
		now := time.Now()
		committed := r.tables.LastCommitted()["orders"]
		for p, shard := range shards {
			segs, err := r.job.Catalog.Segments(shard)
			if err != nil {
				b.Fatal(err)
			}
			if seen[shard] == nil {
				seen[shard] = map[uint64]bool{}
			}
			for _, s := range segs {
				rg, ok := committed[int32(p)]
				if s.SealedAt.IsZero() || seen[shard][s.No] || !ok || rg.Empty() || s.EndOffset > rg.Last {
					continue
				}
				seen[shard][s.No] = true
				lags = append(lags, now.Sub(s.SealedAt))
			}
		}
		if run%10 == 9 {
			fmt.Fprintf(os.Stderr, "table bench: %d/%d runs, %d segments in the table\n", run+1, runs, len(lags))
		}
	}
	if len(lags) < runs {
		b.Fatalf("%d segments reached the table in %d runs; the bench wants about one per partition and run", len(lags), runs)
	}
	must := func(f bench.Figure) { bench.Must(b, "make bench (go test -bench TableCommit ./icetable)", f) }
	for _, pct := range []float64{50, 99} {
		must(bench.Figure{Name: fmt.Sprintf("iceberg table commit per tiering run p%d, %d partitions, local", int(pct), partitions),
			Value: bench.Ms(bench.Percentile(commits, pct)), Unit: "ms",
			Reference: "the run's catalog writes for its segments", ReferenceValue: bench.Ms(bench.Percentile(writes, pct)), Runs: runs})
	}
	for _, pct := range []float64{50, 99} {
		must(bench.Figure{Name: fmt.Sprintf("iceberg table lag, seal to in the table p%d", int(pct)),
			Value: bench.Ms(bench.Percentile(lags, pct)), Unit: "ms",
			Reference: "the tiering schedule's interval", ReferenceValue: bench.Ms(interval), Runs: len(lags)})
	}
}

// commitRolling adds one object of 10 offsets to partition 0 and raises
// the log start so the table keeps the last `live` objects (0: all): a
// commit of a topic under retention, in steady state.
func commitRolling(b testing.TB, tables *Tables, topic string, live uint64) {
	b.Helper()
	_, err := tables.plan(context.Background(), topic, func(committed map[int32]Range) Plan {
		next := uint64(0)
		if r, ok := committed[0]; ok {
			next = r.Last + 1
		}
		e := tiering.ManifestEntry{Key: fmt.Sprintf("data/topic=%s/partition=0/%020d-%020d.parquet", topic, next, next+9),
			StartOffset: next, EndOffset: next + 9, Records: 10, ObjectBytes: 1000, MinTimestamp: 1, MaxTimestamp: 2}
		var starts map[int32]uint64
		if live > 0 && next >= live*10 {
			starts = map[int32]uint64{0: next + 10 - live*10}
		}
		return PlanCommit(committed, map[int32][]tiering.ManifestEntry{0: {e}}, starts)
	})
	if err != nil {
		b.Fatal(err)
	}
}

// The table's metadata (its folder: metadata files, manifest lists,
// manifests, the pointer) after 10, 100 and 1,000 commits of a topic
// under retention (100 objects live), with the expiry policy after every
// commit (every snapshot past its age; the last 20 kept), beside the
// same growth at the rate of the first 10 commits: flat, not linear.
// STRATA_TABLE_COMMITS=10000 goes on to 10,000 (12 minutes here, at some
// 0.07 s a commit and its expiry: too long for every make bench).
func BenchmarkTableMetadata(b *testing.B) {
	bucket, dir := localBucket(b)
	tables := &Tables{Bucket: bucket, Prefix: "data", Location: dir, Log: quiet, MaxSnapshotAge: time.Nanosecond,
		OrphanGrace: time.Nanosecond, MaintainEvery: -1}
	last := 1000
	if n, err := strconv.Atoi(os.Getenv("STRATA_TABLE_COMMITS")); err == nil && n > last {
		last = n
	}
	var first int64
	start := time.Now()
	for n := 1; n <= last; n++ {
		commitRolling(b, tables, "orders", 100)
		if n != 10 && n != 100 && n != 1000 && n != last {
			if n%1000 == 0 {
				fmt.Fprintf(os.Stderr, "table metadata bench: %d/%d commits, %.1f s\n", n, last, time.Since(start).Seconds())
			}
			continue
		}
		bytes, files := metadataBytes(b, bucket, tables, "orders")
		if n == 10 {
			first = bytes
		}
		bench.Must(b, "make bench (go test -bench TableMetadata ./icetable)", bench.Figure{
			Name: fmt.Sprintf("iceberg table metadata after %d commits (%d files)", n, files), Value: float64(bytes) / 1024, Unit: "KiB",
			Reference: "linear from 10 commits", ReferenceValue: float64(first) * float64(n) / 10 / 1024, Runs: 1,
			Curve: "iceberg-metadata", Series: "a topic under retention, 100 objects live, expiry after each commit", X: float64(n), XUnit: "commits"})
	}
}

// BenchmarkMerge merges a quiet partition's small cold objects into one
// (tiering.Job.Merge: read, convert, upload, read back, the manifest's
// swap, the table's replace snapshot and the catalog's merge) beside a
// plain GET of each object plus one PUT of the same bytes, on the same
// bucket in the same run: the cost of the merge's checks and its swap.
func BenchmarkMerge(b *testing.B) {
	ctx := context.Background()
	const runs = 3
	var mergeMBs, copyMBs []float64
	var objects int
	var bytesEach int64
	for run := range runs {
		bucket, dir := localBucket(b)
		// Segments of 256 KiB: a quiet partition's objects of about 100 KiB.
		r := newRig(b, bucket, dir, func(c *segment.Config) { c.MaxSegmentBytes = 256 << 10 })
		r.job.Parquet = parquet.Options{} // the defaults, not the rig's tiny row groups
		produce(b, r.engine, "orders-0", 3000, run)
		r.run(b, map[string]uint64{})
		segs, err := r.job.Catalog.Segments("orders-0")
		if err != nil {
			b.Fatal(err)
		}
		var keys []string
		var total int64
		for _, s := range segs {
			if s.State == catalog.Remote {
				keys, total = append(keys, s.ObjectKey), total+s.ObjectSize
			}
		}
		objects, bytesEach = len(keys), total/int64(len(keys))
		start := time.Now()
		var all []byte
		for _, k := range keys {
			a, err := bucket.Stat(ctx, k)
			if err != nil {
				b.Fatal(err)
			}
			buf := make([]byte, a.Size)
			if _, err := bucket.ReadAt(ctx, k, buf, 0); err != nil {
				b.Fatal(err)
			}
			all = append(all, buf...)
		}
		if err := bucket.Upload(ctx, "ref/all.bin", bytes.NewReader(all)); err != nil {
			b.Fatal(err)
		}
		copyMBs = append(copyMBs, float64(total)/1e6/time.Since(start).Seconds())

		r.job.Policy.Merging = tiering.MergePolicy{TargetBytes: 1 << 30}
		start = time.Now()
		sum, err := r.job.Merge(ctx, "orders-0", nil)
		if err != nil || sum.Merges != 1 || sum.Objects != len(keys) {
			b.Fatalf("merge of %d objects: %+v %v", len(keys), sum, err)
		}
		mergeMBs = append(mergeMBs, float64(total)/1e6/time.Since(start).Seconds())
	}
	bench.Must(b, "make bench (go test -run '^$' -bench Merge ./icetable)", bench.Figure{
		Name: fmt.Sprintf("merge %d small cold objects (%.0f KiB each) into one", objects, float64(bytesEach)/1024), Value: bench.Median(mergeMBs), Unit: "MB/s",
		Reference: "a GET of each and one PUT of the same bytes", ReferenceValue: bench.Median(copyMBs), Runs: runs})
}
