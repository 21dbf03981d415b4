package icetable

import (
	"context"
	"fmt"
	"testing"

	"github.com/apache/iceberg-go"
	"github.com/apache/iceberg-go/table"

	"strata/tiering"
)

// everySnapshotHoldsItsSummary fails unless each kept snapshot of the
// topic's table reads exactly what its summary says: the offsets of each
// partition its strata.offsets. keys name, once each, and nothing of the
// partitions they do not name. Time travel, or a snapshot chosen by its
// summary ("the table as of offset N"), then gets what it asked for.
func everySnapshotHoldsItsSummary(t *testing.T, tables *Tables, topic string, partitions ...int32) int {
	t.Helper()
	ctx := context.Background()
	tbl, _, err := tables.load(ctx, topic)
	if err != nil {
		t.Fatal(err)
	}
	for _, s := range tbl.Metadata().Snapshots() {
		read, err := readOffsets(ctx, tbl, &s)
		if err != nil {
			t.Errorf("snapshot %d (%s, %v): %v", s.SnapshotID, s.Summary.Operation, s.Summary.Properties, err)
			continue
		}
		for _, p := range partitions {
			if _, named := read[p]; named {
				continue
			}
			sc := tbl.Scan(table.WithSnapshotID(s.SnapshotID), table.WithSelectedFields(ColOffset),
				table.WithRowFilter(iceberg.EqualTo(iceberg.Reference(ColPartition), p)))
			at, err := sc.ToArrowTable(ctx)
			if err != nil {
				t.Fatal(err)
			}
			if n := at.NumRows(); n != 0 {
				t.Errorf("snapshot %d (%s, %v) reads %d rows of partition %d, which its summary does not name", s.SnapshotID, s.Summary.Operation, s.Summary.Properties, n, p)
			}
			at.Release()
		}
	}
	return len(tbl.Metadata().Snapshots())
}

// A commit that adds objects and hides rows below a log start makes more
// than one snapshot (iceberg-go's append, then its delete), and each says
// what it holds: the append's summary carries the offsets of the files it
// has, not the later floor, and each delete's the rows left after it. The
// commit's cases: a partition new to the table whose log start is inside
// its first object; a partition the table holds whose log start moves past
// every file it has and into an object added (the table's one file
// removed, the objects between skipped).
func TestEachSnapshotOfACommitSaysWhatItHolds(t *testing.T) {
	ctx := context.Background()
	raw, dir := localBucket(t)
	r := newRig(t, raw, dir)
	r.job.Tables = nil // tiered, no table yet
	produce(t, r.engine, "orders-0", 30, 0)
	produce(t, r.engine, "orders-1", 30, 100)
	r.run(t, map[string]uint64{})
	tiered := map[int32][]tiering.ManifestEntry{}
	for p := range int32(2) {
		m, err := tiering.ReadManifest(ctx, raw, fmt.Sprintf("data/topic=orders/partition=%d/_strata_manifest.json", p))
		if err != nil || len(m.Objects) < 3 {
			t.Fatalf("partition %d's manifest: %v, %d objects; want several", p, err, len(m.Objects))
		}
		tiered[p] = m.Objects
	}
	// The table holds partition 1's first object.
	if _, err := r.tables.plan(ctx, "orders", func(c map[int32]Range) Plan {
		return PlanCommit(c, map[int32][]tiering.ManifestEntry{1: tiered[1][:1]}, nil)
	}); err != nil {
		t.Fatal(err)
	}
	start0 := tiered[0][0].StartOffset + 7
	start1 := tiered[1][2].StartOffset + 5
	plan, err := r.tables.plan(ctx, "orders", func(c map[int32]Range) Plan {
		return PlanCommit(c, tiered, map[int32]uint64{0: start0, 1: start1})
	})
	if err != nil {
		t.Fatal(err)
	}
	if len(plan.Hide) != 2 || len(plan.Add) != len(tiered[0])+len(tiered[1])-2 {
		t.Fatalf("the plan: %+v; want both partitions' rows hidden, and every object but partition 1's first two added", plan)
	}
	everySnapshotHoldsItsSummary(t, r.tables, "orders", 0, 1)
	tbl, _, err := r.tables.load(ctx, "orders")
	if err != nil {
		t.Fatal(err)
	}
	got, err := Committed(tbl.CurrentSnapshot().Summary.Properties)
	if err != nil || fmt.Sprint(got) != fmt.Sprint(plan.Offsets) {
		t.Fatalf("the current snapshot says %v (%v), want the plan's %v", got, err, plan.Offsets)
	}
	rows, _ := scan(t, r.tables, "orders", 0, 1)
	if rows[0][0].offset != int64(start0) || rows[1][0].offset != int64(start1) {
		t.Fatalf("the current table starts at offsets %d and %d, want the log starts %d and %d", rows[0][0].offset, rows[1][0].offset, start0, start1)
	}
}
