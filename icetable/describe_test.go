package icetable

import (
	"context"
	"errors"
	"testing"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/testutil"
)

// Describe shows the current snapshot, each partition's committed
// offsets, and the table's files and bytes; the metrics count commits by
// result and time the ones that landed.
func TestDescribeAndMetrics(t *testing.T) {
	ctx := context.Background()
	bucket, dir := localBucket(t)
	r := newRig(t, bucket, dir)
	reg := prometheus.NewRegistry()
	r.tables.Metrics = NewMetrics(reg)
	if _, err := r.tables.Describe(ctx, "orders"); !errors.Is(err, ErrNoTable) {
		t.Fatalf("before any commit: %v, want ErrNoTable", err)
	}
	produce(t, r.engine, "orders-0", 14, 0)
	produce(t, r.engine, "orders-1", 14, 100)
	tiered := map[string]uint64{}
	r.run(t, tiered)
	r.run(t, tiered) // nothing new: a no-op commit
	v, err := r.tables.Describe(ctx, "orders")
	if err != nil {
		t.Fatal(err)
	}
	tbl, _, _ := r.tables.load(ctx, "orders")
	files := len(liveFiles(t, r.tables, "orders"))
	if v.SnapshotID != tbl.CurrentSnapshot().SnapshotID || v.Snapshots != 1 || v.DataFiles != int64(files) || v.Bytes <= 0 ||
		v.Records != int64(tiered["orders-0"]+tiered["orders-1"]) || len(v.Partitions) != 2 ||
		v.Partitions[1].Last != tiered["orders-1"]-1 || v.SnapshotTime.IsZero() {
		t.Fatalf("describe: %+v (tiered %v, %d files)", v, tiered, files)
	}
	if got := r.tables.LastCommitted()["orders"][0]; got.Last != tiered["orders-0"]-1 {
		t.Fatalf("the lag's source: %v", got)
	}
	for result, want := range map[string]float64{"committed": 1, "noop": 1, "failed": 0} {
		if got := testutil.ToFloat64(r.tables.Metrics.commits.WithLabelValues(result)); got != want {
			t.Errorf("strata_iceberg_commits_total{result=%q} = %v, want %v", result, got, want)
		}
	}
	if n := testutil.CollectAndCount(reg, "strata_iceberg_commit_seconds"); n != 1 {
		t.Errorf("strata_iceberg_commit_seconds: %d series", n)
	}
}
