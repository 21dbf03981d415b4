package icetable

import (
	"context"
	"errors"
	"fmt"
	"path"
	"path/filepath"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/apache/arrow-go/v18/arrow/array"
	"github.com/apache/iceberg-go"
	"github.com/apache/iceberg-go/table"

	"strata/catalog"
	"strata/catalog/pebblecat"
	"strata/engine/record"
	"strata/engine/segment"
	"strata/engine/store"
	"strata/parquet"
	"strata/tiering"
	"strata/tiering/objstore"
)

// mergeRig tiers two partitions in many small objects, each only in the
// bucket, and asks for merging into objects of at most 64 KiB.
func mergeRig(t *testing.T, bucket objstore.Bucket, dir string) (*rig, map[string][]record.Record) {
	r := newRig(t, bucket, dir)
	produced := map[string][]record.Record{
		"orders-0": produce(t, r.engine, "orders-0", 40, 0),
		"orders-1": produce(t, r.engine, "orders-1", 25, 100),
	}
	tiered := map[string]uint64{}
	r.run(t, tiered)
	for shard, n := range tiered {
		produced[shard] = produced[shard][:n]
		if remote := remoteSegments(t, r, shard); len(remote) < 3 {
			t.Fatalf("%s: %d segments only in the bucket; the rig needs several to merge", shard, len(remote))
		}
	}
	r.job.Policy.Merging = tiering.MergePolicy{TargetBytes: 64 << 10, MinObjects: 2}
	return r, produced
}

func remoteSegments(t *testing.T, r *rig, shard string) []catalog.Segment {
	t.Helper()
	segs, err := r.job.Catalog.Segments(shard)
	if err != nil {
		t.Fatal(err)
	}
	var out []catalog.Segment
	for _, s := range segs {
		if s.State == catalog.Remote {
			out = append(out, s)
		}
	}
	return out
}

// checkMerged fails unless a Kafka read of each partition from its first
// cold offset, through the cold reader, gets every record tiered byte for
// byte; the manifest lists each offset once, in objects that exist; the
// table reads exactly the records tiered; and no segment names an object
// that is not in the bucket. It returns the shards' remote segments.
func checkMerged(t *testing.T, r *rig, bucket objstore.Bucket, produced map[string][]record.Record) map[string][]catalog.Segment {
	t.Helper()
	ctx := context.Background()
	out := map[string][]catalog.Segment{}
	for p, shard := range []string{"orders-0", "orders-1"} {
		remote := remoteSegments(t, r, shard)
		out[shard] = remote
		for _, s := range remote {
			if _, err := bucket.Stat(ctx, s.ObjectKey); err != nil {
				t.Fatalf("%s segment %d names %s: %v", shard, s.No, s.ObjectKey, err)
			}
		}
		reader := tiering.NewColdReader(r.job.Catalog, bucket, 0)
		got, err := reader.Read(ctx, shard, remote[0].StartOffset, store.Budget{MaxRecords: 100_000, MaxBytes: 256 << 20})
		if err != nil {
			t.Fatal(err)
		}
		want := produced[shard][remote[0].StartOffset : remote[len(remote)-1].EndOffset+1]
		if len(got) != len(want) {
			t.Fatalf("%s: a cold read from offset %d gets %d records, %d are cold", shard, remote[0].StartOffset, len(got), len(want))
		}
		for i := range want {
			a, _ := record.Append(nil, &got[i])
			b, _ := record.Append(nil, &want[i])
			if string(a) != string(b) {
				t.Fatalf("%s: offset %d reads back otherwise from the cold tier", shard, want[i].Offset)
			}
		}
		m, err := tiering.ReadManifest(ctx, bucket, "data/topic=orders/partition="+string(rune('0'+p))+"/_strata_manifest.json")
		if err != nil {
			t.Fatal(err)
		}
		for i, e := range m.Objects {
			if i > 0 && e.StartOffset != m.Objects[i-1].EndOffset+1 {
				t.Fatalf("%s's manifest goes from offset %d to %d", shard, m.Objects[i-1].EndOffset, e.StartOffset)
			}
			if _, err := bucket.Stat(ctx, e.Key); err != nil {
				t.Fatalf("%s's manifest lists %s: %v", shard, e.Key, err)
			}
		}
	}
	rows, _ := scan(t, r.tables, "orders", 0, 1)
	sameRecords(t, "the table after merging: orders-0", rows[0], produced["orders-0"])
	sameRecords(t, "the table after merging: orders-1", rows[1], produced["orders-1"])
	everyFileExists(t, bucket, r.tables, "orders")
	return out
}

// Merging packs each partition's small cold objects into objects of at
// most the target: the catalog holds one segment per merged object, the
// manifest and the table name the new objects, which hold the same
// records; a cold read gets them byte for byte; the old objects stay for
// the reads begun before; a second merge and a tiering run change nothing.
func TestMergeRewritesSmallColdObjects(t *testing.T) {
	ctx := context.Background()
	bucket, dir := localBucket(t)
	r, produced := mergeRig(t, bucket, dir)
	before := map[string][]catalog.Segment{}
	for _, shard := range []string{"orders-0", "orders-1"} {
		before[shard] = remoteSegments(t, r, shard)
		var seen []tiering.MergeProgress
		sum, err := r.job.Merge(ctx, shard, func(p tiering.MergeProgress) { seen = append(seen, p) })
		if err != nil {
			t.Fatal(err)
		}
		if sum.Merges == 0 || sum.Objects < 2*sum.Merges || len(seen) != sum.Merges || seen[len(seen)-1].Merge != seen[len(seen)-1].Of {
			t.Fatalf("%s: merge %+v, progress %+v; want each merge of two objects or more reported", shard, sum, seen)
		}
	}
	after := checkMerged(t, r, bucket, produced)
	for shard, segs := range after {
		if len(segs) >= len(before[shard]) {
			t.Fatalf("%s: %d segments in the bucket after merging, %d before", shard, len(segs), len(before[shard]))
		}
		t.Logf("%s: %d objects in the bucket merged into %d", shard, len(before[shard]), len(segs))
		for _, s := range segs {
			if s.ObjectSize > 64<<10 && s.Records > before[shard][0].Records {
				t.Errorf("%s: merged object %s is %d bytes, past the 64 KiB target", shard, s.ObjectKey, s.ObjectSize)
			}
		}
		for _, s := range before[shard] {
			if _, err := bucket.Stat(ctx, s.ObjectKey); err != nil {
				t.Errorf("the old object %s: %v; want it kept for the reads begun before", s.ObjectKey, err)
			}
		}
	}
	sum, err := r.job.Merge(ctx, "orders-0", nil)
	if err != nil || sum.Merges != 0 {
		t.Fatalf("a second merge: %+v %v; want nothing to do", sum, err)
	}
	r.run(t, map[string]uint64{})
	checkMerged(t, r, bucket, produced)
}

// A merge killed at any write (the new object's upload, the manifest's
// swap, just after it, the table's commit, just after it) leaves each
// offset in one object; the next tiering run and merge finish the job.
func TestEveryMergeStepRecovers(t *testing.T) {
	object := func(b string) bool { return strings.HasSuffix(b, ".parquet") }
	manifest := func(b string) bool { return b == "_strata_manifest.json" }
	hint := func(b string) bool { return b == hintName }
	for _, tc := range []struct {
		name   string
		op     objstore.Op
		step   func(string) bool
		landed bool
	}{
		{"dies uploading the new object", objstore.OpUpload, object, false},
		{"dies after uploading the new object", objstore.OpUpload, object, true},
		{"dies swapping the manifest", objstore.OpUploadIf, manifest, false},
		{"dies after swapping the manifest", objstore.OpUploadIf, manifest, true},
		{"dies swapping the table's pointer", objstore.OpUploadIf, hint, false},
		{"dies after swapping the table's pointer", objstore.OpUploadIf, hint, true},
	} {
		t.Run(tc.name, func(t *testing.T) {
			ctx := context.Background()
			raw, dir := localBucket(t)
			dying := &dieAt{Bucket: raw}
			r, produced := mergeRig(t, dying, dir)
			dying.op, dying.step, dying.landed = tc.op, tc.step, tc.landed
			if _, err := r.job.Merge(ctx, "orders-0", nil); !errors.Is(err, errKilled) {
				t.Fatalf("the dying merge: %v, want it killed", err)
			}
			// The process starts again on the same catalog and bucket.
			r.job.Bucket, r.tables.Bucket = raw, raw
			r.run(t, map[string]uint64{})
			checkMerged(t, r, raw, produced)
			for _, shard := range []string{"orders-0", "orders-1"} {
				if _, err := r.job.Merge(ctx, shard, nil); err != nil {
					t.Fatal(err)
				}
			}
			checkMerged(t, r, raw, produced)
		})
	}
}

// Retention goes by offsets through a merged object as through any: the
// log start moved inside it hides the rows below in the table and the
// cold read starts there; moved past it, the merged segment expires and
// its object leaves the bucket.
func TestRetentionThroughAMergedObject(t *testing.T) {
	ctx := context.Background()
	bucket, dir := localBucket(t)
	r, produced := mergeRig(t, bucket, dir)
	r.tables.FileDeleteDelay, r.tables.MaintainEvery = -1, -1 // no snapshot keeps an object
	if _, err := r.job.Merge(ctx, "orders-1", nil); err != nil {
		t.Fatal(err)
	}
	merged := remoteSegments(t, r, "orders-1")[0]
	cut := merged.StartOffset + 30
	if err := r.engine.DeleteBefore(ctx, "orders-1", cut); err != nil {
		t.Fatal(err)
	}
	r.run(t, map[string]uint64{})
	rows, _ := scan(t, r.tables, "orders", 1)
	sameRecords(t, "orders-1 with its log start inside the merged object", rows[1], produced["orders-1"][cut:])
	got, err := tiering.NewColdReader(r.job.Catalog, bucket, 0).Read(ctx, "orders-1", cut, store.Budget{MaxRecords: 5, MaxBytes: 1 << 20})
	if err != nil || len(got) != 5 || got[0].Offset != cut {
		t.Fatalf("a cold read from the log start %d: %d records from %v, %v", cut, len(got), got, err)
	}

	if err := r.engine.DeleteBefore(ctx, "orders-1", merged.EndOffset+1); err != nil {
		t.Fatal(err)
	}
	r.run(t, map[string]uint64{})
	r.run(t, map[string]uint64{})
	if segs := remoteSegments(t, r, "orders-1"); len(segs) != 0 {
		t.Fatalf("after the log start passed the merged object: remote segments %+v", segs)
	}
	if _, err := bucket.Stat(ctx, merged.ObjectKey); !errors.Is(err, objstore.ErrNotFound) {
		t.Fatalf("the merged object %s after retention took it: %v, want it gone", merged.ObjectKey, err)
	}
}

// A node that lost its catalog rebuilds it from its engine's segments
// and the bucket's manifest: segments whose objects were merged come back
// as the one segment of the merged object, and every record reads back.
func TestALostCatalogComesBackMerged(t *testing.T) {
	ctx := context.Background()
	bucket, dir := localBucket(t)
	r, produced := mergeRig(t, bucket, dir)
	for _, shard := range []string{"orders-0", "orders-1"} {
		if _, err := r.job.Merge(ctx, shard, nil); err != nil {
			t.Fatal(err)
		}
	}
	want := checkMerged(t, r, bucket, produced)
	if err := r.engine.Close(); err != nil {
		t.Fatal(err)
	}
	reopenWithoutCatalog(t, r, bucket)
	got := checkMerged(t, r, bucket, produced)
	for shard, segs := range want {
		if fmt.Sprint(segsOf(got[shard])) != fmt.Sprint(segsOf(segs)) {
			t.Errorf("%s: the rebuilt catalog's remote segments %v; before it was lost %v", shard, segsOf(got[shard]), segsOf(segs))
		}
	}
}

func segsOf(segs []catalog.Segment) []string {
	var out []string
	for _, s := range segs {
		out = append(out, fmt.Sprintf("%d:%d-%d:%s", s.No, s.StartOffset, s.EndOffset, path.Base(s.ObjectKey)))
	}
	return out
}

// A tiering run merges too, one merge per shard, and says so in its
// summary; the objects it merges are the ones tiered MinAge ago.
func TestATieringRunMerges(t *testing.T) {
	ctx := context.Background()
	bucket, dir := localBucket(t)
	r, produced := mergeRig(t, bucket, dir)
	now := time.Now()
	r.job.Now = func() time.Time { return now }
	r.job.Policy.Merging.MinAge = time.Hour
	if sum, err := r.job.Run(ctx); err != nil || len(sum.Merges) != 0 {
		t.Fatalf("a run before the objects are an hour old: %+v %v; want no merge", sum.Merges, err)
	}
	now = now.Add(time.Hour)
	sum, err := r.job.Run(ctx)
	if err != nil || len(sum.Errors) > 0 {
		t.Fatalf("tiering run: %v %+v", err, sum.Errors)
	}
	shards := map[string]bool{}
	for _, m := range sum.Merges {
		shards[m.Shard] = true
		if len(m.Objects) < 2 || m.Key == "" || m.Bytes == 0 {
			t.Errorf("the run reports merge %+v", m)
		}
	}
	if len(sum.Merges) != 2 || len(shards) != 2 {
		t.Fatalf("the run merged %+v; want one merge in each of the two shards", sum.Merges)
	}
	checkMerged(t, r, bucket, produced)
}

// A table reader scanning in a loop while merges run sees, at every scan,
// each offset of the partition once: the swap is one replace snapshot, so
// no scan meets a gap or a duplicate.
func TestATableReaderNeverSeesAMergeHalfDone(t *testing.T) {
	ctx := context.Background()
	bucket, dir := localBucket(t)
	r, produced := mergeRig(t, bucket, dir)
	remote := remoteSegments(t, r, "orders-0")
	r.job.Policy.Merging.TargetBytes = 2*remote[0].ObjectSize + 1 // two objects a merge: several swaps
	r.job.BytesPerSecond = 32 << 10                               // each merge's upload takes a while
	want := len(produced["orders-0"])
	done := make(chan struct{})
	scans := make(chan error, 1)
	var n int
	go func() {
		defer close(scans)
		for {
			offsets, err := scanOffsets(ctx, r.tables, "orders", 0)
			if err == nil {
				for i, o := range offsets {
					if o != int64(i) {
						err = fmt.Errorf("scan %d: row %d is offset %d (%d rows, %d tiered)", n, i, o, len(offsets), want)
						break
					}
				}
				if err == nil && len(offsets) != want {
					err = fmt.Errorf("scan %d: %d rows, %d tiered", n, len(offsets), want)
				}
			}
			n++
			select {
			case <-done:
				scans <- err
				return
			default:
			}
			if err != nil {
				scans <- err
				return
			}
		}
	}()
	sum, err := r.job.Merge(ctx, "orders-0", nil)
	close(done)
	if err := <-scans; err != nil {
		t.Fatal(err)
	}
	if err != nil || sum.Merges < 2 {
		t.Fatalf("merge %+v, %v; want several", sum, err)
	}
	t.Logf("%d scans over %d merges, each whole", n, sum.Merges)
	checkMerged(t, r, bucket, produced)
}

// scanOffsets reads the offsets of one partition of the topic's current
// table, in order.
func scanOffsets(ctx context.Context, tables *Tables, topic string, p int32) ([]int64, error) {
	tbl, _, err := tables.load(ctx, topic)
	if err != nil {
		return nil, err
	}
	at, err := tbl.Scan(table.WithRowFilter(iceberg.EqualTo(iceberg.Reference(ColPartition), p)),
		table.WithSelectedFields(ColOffset)).ToArrowTable(ctx)
	if err != nil {
		return nil, err
	}
	defer at.Release()
	var out []int64
	tr := array.NewTableReader(at, 1024)
	defer tr.Release()
	for tr.Next() {
		out = append(out, tr.RecordBatch().Column(0).(*array.Int64).Int64Values()...)
	}
	slices.Sort(out)
	return out, nil
}

// An object holding offsets below the log start is left to retention,
// so the deleted records are never written again; the objects after it
// merge, the table still hides the rows below the log start, and a cold
// read starts there.
func TestAMergeLeavesAnObjectBelowTheLogStart(t *testing.T) {
	ctx := context.Background()
	bucket, dir := localBucket(t)
	r, produced := mergeRig(t, bucket, dir)
	first := remoteSegments(t, r, "orders-0")[0]
	cut := first.StartOffset + 11
	if err := r.engine.DeleteBefore(ctx, "orders-0", cut); err != nil {
		t.Fatal(err)
	}
	saved := r.job.Policy.Merging
	r.job.Policy.Merging = tiering.MergePolicy{} // the cut reaches the table first
	r.run(t, map[string]uint64{})
	r.job.Policy.Merging = saved
	if sum, err := r.job.Merge(ctx, "orders-0", nil); err != nil || sum.Merges == 0 {
		t.Fatalf("merge: %+v %v", sum, err)
	}
	if segs := remoteSegments(t, r, "orders-0"); segs[0].ObjectKey != first.ObjectKey || len(segs) != 2 || segs[1].StartOffset != first.EndOffset+1 {
		t.Fatalf("after the merge the remote segments are %v; want %s left as it was and the rest merged", segsOf(segs), path.Base(first.ObjectKey))
	}
	rows, _ := scan(t, r.tables, "orders", 0)
	sameRecords(t, "orders-0 merged with its log start inside", rows[0], produced["orders-0"][cut:])
	got, err := tiering.NewColdReader(r.job.Catalog, bucket, 0).Read(ctx, "orders-0", cut, store.Budget{MaxRecords: 3, MaxBytes: 1 << 20})
	if err != nil || len(got) != 3 || got[0].Offset != cut {
		t.Fatalf("a cold read from the log start %d: %d records, %v", cut, len(got), err)
	}
	r.run(t, map[string]uint64{})
	rows, _ = scan(t, r.tables, "orders", 0)
	sameRecords(t, "orders-0 after the next run", rows[0], produced["orders-0"][cut:])
}

// A lost catalog comes back merged also when the log start has passed a
// merged object's first segments, which the engine no longer holds: the
// restored segment is the object's whole, as its manifest entry says, and
// a cold read from the log start gets the records from there.
func TestALostCatalogComesBackMergedPastTheLogStart(t *testing.T) {
	ctx := context.Background()
	bucket, dir := localBucket(t)
	r, produced := mergeRig(t, bucket, dir)
	before := remoteSegments(t, r, "orders-0")
	if _, err := r.job.Merge(ctx, "orders-0", nil); err != nil {
		t.Fatal(err)
	}
	merged := remoteSegments(t, r, "orders-0")[0]
	cut := before[1].StartOffset + 5 // the first segment's offsets all deleted
	if err := r.engine.DeleteBefore(ctx, "orders-0", cut); err != nil {
		t.Fatal(err)
	}
	r.job.Policy.Merging = tiering.MergePolicy{}
	r.run(t, map[string]uint64{})
	if err := r.engine.Close(); err != nil {
		t.Fatal(err)
	}
	reopenWithoutCatalog(t, r, bucket)
	cat := r.job.Catalog
	segs, err := cat.Segments("orders-0")
	if err != nil || len(segs) == 0 {
		t.Fatalf("the restored catalog: %v %v", segs, err)
	}
	if got := segs[0]; got.StartOffset != merged.StartOffset || got.EndOffset != merged.EndOffset || got.ObjectKey != merged.ObjectKey || got.Records != merged.Records {
		t.Fatalf("the restored first segment %+v; want the merged one %+v", got, merged)
	}
	got, err := tiering.NewColdReader(cat, bucket, 0).Read(ctx, "orders-0", cut, store.Budget{MaxRecords: 1000, MaxBytes: 64 << 20})
	if err != nil || len(got) == 0 || got[0].Offset != cut {
		t.Fatalf("a read from the log start %d after the restore: %d records, %v", cut, len(got), err)
	}
	for _, rec := range got {
		a, _ := record.Append(nil, &rec)
		b, _ := record.Append(nil, &produced["orders-0"][rec.Offset])
		if string(a) != string(b) {
			t.Fatalf("offset %d reads otherwise after the restore", rec.Offset)
		}
	}
}

// While a topic's typed columns cannot be made (its registry is down),
// merging waits: a merge then would write every record's typed value
// null, those that decoded before too. Once they can, it goes on.
func TestMergingWaitsForTheTypedColumns(t *testing.T) {
	ctx := context.Background()
	bucket, dir := localBucket(t)
	r, produced := mergeRig(t, bucket, dir)
	before := remoteSegments(t, r, "orders-0")
	down := errors.New("the schema registry does not answer")
	r.job.TypedErr = func(string) error { return down }
	if sum, err := r.job.Merge(ctx, "orders-0", nil); err != nil || sum.Merges != 0 {
		t.Fatalf("a merge while the typed columns cannot be made: %+v %v; want none", sum, err)
	}
	if got := remoteSegments(t, r, "orders-0"); fmt.Sprint(segsOf(got)) != fmt.Sprint(segsOf(before)) {
		t.Fatalf("the objects changed while merging waited: %v, before %v", segsOf(got), segsOf(before))
	}
	r.job.TypedErr = func(string) error { return nil }
	if sum, err := r.job.Merge(ctx, "orders-0", nil); err != nil || sum.Merges == 0 {
		t.Fatalf("a merge once they can be made: %+v %v", sum, err)
	}
	checkMerged(t, r, bucket, produced)
}

// A run whose reconcile fails expires nothing of that shard: retention
// waits for the catalog to follow the manifest, so it does not delete the
// segments of objects a merge replaced while the manifest names the
// merged object for their offsets (the catalog could never follow then).
func TestRetentionWaitsForTheCatalogToFollowAMerge(t *testing.T) {
	ctx := context.Background()
	bucket, dir := localBucket(t)
	r, produced := mergeRig(t, bucket, dir)
	before := remoteSegments(t, r, "orders-0")
	broken := &mergeFails{Catalog: r.job.Catalog}
	r.job.Catalog = broken
	if _, err := r.job.Merge(ctx, "orders-0", nil); err == nil || !strings.Contains(err.Error(), "catalog merge fails") {
		t.Fatalf("a merge whose catalog cannot follow: %v", err)
	}
	if err := r.engine.DeleteBefore(ctx, "orders-0", before[0].EndOffset+1); err != nil {
		t.Fatal(err)
	}
	sum, err := r.job.Run(ctx)
	if err != nil || !slices.ContainsFunc(sum.Errors, func(e tiering.RunError) bool { return e.Step == tiering.StepReconcile }) {
		t.Fatalf("the run: %v %+v; want its reconcile to fail", err, sum.Errors)
	}
	if got := remoteSegments(t, r, "orders-0"); sum.Expired != 0 || got[0].No != before[0].No {
		t.Fatalf("the run expired %d segments while its catalog did not follow the manifest", sum.Expired)
	}
	// Once the catalog follows, retention goes on through the merged object.
	r.job.Catalog = broken.Catalog
	r.run(t, map[string]uint64{})
	got := remoteSegments(t, r, "orders-0")
	if len(got) != 1 || got[0].StartOffset != before[0].StartOffset || got[0].EndOffset != before[len(before)-1].EndOffset {
		t.Fatalf("after the catalog followed: remote segments %v", segsOf(got))
	}
	rows, _ := scan(t, r.tables, "orders", 0)
	sameRecords(t, "orders-0 once the catalog followed", rows[0], produced["orders-0"][before[0].EndOffset+1:])
}

// mergeFails is a catalog whose merges fail.
type mergeFails struct{ catalog.Catalog }

func (mergeFails) Merge(string, []uint64, func(*catalog.Segment)) (catalog.Segment, error) {
	return catalog.Segment{}, errors.New("catalog merge fails")
}

// Objects with a typed column the topic's objects are written without
// now (its registry is off: uploads go without the column) are not
// merged: the merged object would lose the values decoded before. Once
// the column can be made again, they merge with it.
func TestMergingKeepsTypedColumns(t *testing.T) {
	ctx := context.Background()
	bucket, dir := localBucket(t)
	r, produced := mergeRig(t, bucket, dir)
	col := lengthColumn(t, r.tables, "orders")
	typedOpts := func(string) parquet.Options {
		return parquet.Options{RowGroupBytes: 4 << 10, Typed: []parquet.TypedColumn{col}}
	}
	r.job.ParquetFor = typedOpts
	if _, err := r.job.Retype(ctx, "orders-0", nil); err != nil {
		t.Fatal(err)
	}
	before := remoteSegments(t, r, "orders-0")
	r.job.ParquetFor = func(string) parquet.Options { return parquet.Options{RowGroupBytes: 4 << 10} } // the registry is off
	if sum, err := r.job.Merge(ctx, "orders-0", nil); err != nil || sum.Merges != 0 {
		t.Fatalf("a merge of typed objects while the column cannot be made: %+v %v; want none", sum, err)
	}
	if got := remoteSegments(t, r, "orders-0"); fmt.Sprint(segsOf(got)) != fmt.Sprint(segsOf(before)) {
		t.Fatalf("the objects changed while merging waited: %v, before %v", segsOf(got), segsOf(before))
	}
	r.job.ParquetFor = typedOpts
	if sum, err := r.job.Merge(ctx, "orders-0", nil); err != nil || sum.Merges == 0 {
		t.Fatalf("a merge once the column can be made: %+v %v", sum, err)
	}
	for _, s := range remoteSegments(t, r, "orders-0") {
		f, err := parquet.Open(tiering.ObjectReader(ctx, bucket, s.ObjectKey), s.ObjectSize)
		if err != nil {
			t.Fatal(err)
		}
		if cols := f.TypedColumns(); len(cols) != 1 || cols[0] != parquet.ValueTyped {
			t.Fatalf("merged object %s has typed columns %v", s.ObjectKey, cols)
		}
	}
	checkMerged(t, r, bucket, produced)
}

// reopenWithoutCatalog starts the rig's engine again (closed) on a new,
// empty catalog, as a node whose catalog folder was lost: the engine's
// listener restores the catalog from its segments and the bucket.
func reopenWithoutCatalog(t *testing.T, r *rig, bucket objstore.Bucket) {
	t.Helper()
	cat, err := pebblecat.Open(filepath.Join(t.TempDir(), "catalog"))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { cat.Close() })
	e, err := segment.Open(segment.Config{Dir: r.dir, Workers: 2, MaxSegmentBytes: 16 << 10, RollCheckInterval: 10, Logger: quiet,
		Events: tiering.ListenTables(cat, bucket, "data", quiet, r.tables)})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { e.Close() })
	e.SyncEvents()
	r.engine, r.job.Engine, r.job.Catalog = e, e, cat
}
