package icetable

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"strings"
	"testing"
	"time"

	"strata/catalog"
	"strata/engine/record"
	"strata/engine/store"
	"strata/parquet"
	"strata/tiering"
	"strata/tiering/objstore"
	"strata/typed"
)

// lengthColumn is a typed column of every value's length: what a retype
// adds needs no schema to decode by.
func lengthColumn(t *testing.T, tables *Tables, topic string) parquet.TypedColumn {
	t.Helper()
	cols, err := tables.EvolveTyped(context.Background(), topic, func(cur TypedSchema) ([]TypedColumn, error) {
		if c, ok := cur.Columns[parquet.ValueTyped]; ok {
			return []TypedColumn{c}, nil
		}
		typ := typed.Type{Kind: typed.Struct, Optional: true, ID: 1000,
			Fields: []typed.Field{{Name: "length", Type: typed.Type{Kind: typed.Int64, ID: 1001}}}}
		return []TypedColumn{{Name: parquet.ValueTyped, Type: typ, ErrorID: 1002}}, nil
	})
	if err != nil {
		t.Fatal(err)
	}
	return parquet.TypedColumn{Name: parquet.ValueTyped, Type: cols[0].Type, ErrorID: cols[0].ErrorID,
		Decode: func(raw []byte) (any, error) { return map[string]any{"length": int64(len(raw))}, nil }}
}

// retypeRig tiers two partitions without typed columns, moves partition
// 0's log start inside its second object, then asks for the column.
func retypeRig(t *testing.T, bucket objstore.Bucket, dir string) (*rig, map[string][]record.Record, uint64) {
	ctx := context.Background()
	r := newRig(t, bucket, dir)
	produced := map[string][]record.Record{
		"orders-0": produce(t, r.engine, "orders-0", 30, 0),
		"orders-1": produce(t, r.engine, "orders-1", 14, 100),
	}
	tiered := map[string]uint64{}
	r.run(t, tiered)
	m, err := tiering.ReadManifest(ctx, bucket, "data/topic=orders/partition=0/_strata_manifest.json")
	if err != nil {
		t.Fatal(err)
	}
	cut := m.Objects[1].StartOffset + 7
	if err := r.engine.DeleteBefore(ctx, "orders-0", cut); err != nil {
		t.Fatal(err)
	}
	r.run(t, tiered)
	for shard, n := range tiered {
		produced[shard] = produced[shard][:n]
	}
	col := lengthColumn(t, r.tables, "orders")
	r.job.ParquetFor = func(string) parquet.Options {
		return parquet.Options{RowGroupBytes: 4 << 10, Typed: []parquet.TypedColumn{col}}
	}
	return r, produced, cut
}

// checkRetyped fails unless every cold segment of both partitions names an
// object with the typed column, holding the records tiered byte for byte;
// the table reads exactly those records (each offset once, none below
// partition 0's log start); and the manifests list each offset once.
func checkRetyped(t *testing.T, r *rig, bucket objstore.Bucket, produced map[string][]record.Record, cut uint64) {
	t.Helper()
	ctx := context.Background()
	for p, shard := range []string{"orders-0", "orders-1"} {
		segs, err := r.job.Catalog.Segments(shard)
		if err != nil {
			t.Fatal(err)
		}
		var got []record.Record
		for _, s := range segs {
			if s.State != catalog.Cold && s.State != catalog.Remote {
				continue
			}
			if !strings.HasSuffix(s.ObjectKey, ".r1.parquet") {
				t.Fatalf("%s segment %d names %s, not its retyped object", shard, s.No, s.ObjectKey)
			}
			f, err := parquet.Open(tiering.ObjectReader(ctx, bucket, s.ObjectKey), s.ObjectSize)
			if err != nil {
				t.Fatal(err)
			}
			if fmt := f.TypedColumns(); len(fmt) != 1 || fmt[0] != parquet.ValueTyped {
				t.Fatalf("%s has typed columns %v", s.ObjectKey, fmt)
			}
			for g := range f.Groups() {
				recs, err := f.ReadGroup(g)
				if err != nil {
					t.Fatal(err)
				}
				got = append(got, recs...)
			}
		}
		want := produced[shard]
		if p == 0 { // the catalog's first cold object starts at or below the log start
			for len(want) > 0 && want[0].Offset < got[0].Offset {
				want = want[1:]
			}
		}
		if len(got) != len(want) {
			t.Fatalf("%s: the retyped objects hold %d records, %d were tiered", shard, len(got), len(want))
		}
		for i := range want {
			a, _ := record.Append(nil, &got[i])
			b, _ := record.Append(nil, &want[i])
			if string(a) != string(b) {
				t.Fatalf("%s: offset %d reads back otherwise from its retyped object", shard, want[i].Offset)
			}
		}
		m, err := tiering.ReadManifest(ctx, bucket, "data/topic=orders/partition="+string(rune('0'+p))+"/_strata_manifest.json")
		if err != nil {
			t.Fatal(err)
		}
		for i, e := range m.Objects {
			if i > 0 && e.StartOffset <= m.Objects[i-1].EndOffset {
				t.Fatalf("%s's manifest lists offsets %d-%d twice", shard, e.StartOffset, m.Objects[i-1].EndOffset)
			}
		}
	}
	rows, _ := scan(t, r.tables, "orders", 0, 1)
	from := 0
	for from < len(produced["orders-0"]) && produced["orders-0"][from].Offset < cut {
		from++
	}
	sameRecords(t, "the table after the retype: orders-0", rows[0], produced["orders-0"][from:])
	sameRecords(t, "the table after the retype: orders-1", rows[1], produced["orders-1"])
	everyFileExists(t, bucket, r.tables, "orders")
}

// A retype rewrites every cold object of a shard with the typed column,
// one by one: the catalog, the manifest and the table name the new
// objects, which hold the same records; the rows below the log start stay
// hidden in the table; the old objects stay for the reads begun before;
// a second retype finds nothing to do.
func TestRetypeRewritesTheColdObjects(t *testing.T) {
	ctx := context.Background()
	bucket, dir := localBucket(t)
	r, produced, cut := retypeRig(t, bucket, dir)
	var seen []tiering.RetypeProgress
	for _, shard := range []string{"orders-0", "orders-1"} {
		sum, err := r.job.Retype(ctx, shard, func(p tiering.RetypeProgress) { seen = append(seen, p) })
		if err != nil {
			t.Fatal(err)
		}
		if sum.Rewritten == 0 || sum.Rewritten != sum.Objects || sum.Skipped != 0 {
			t.Fatalf("%s: retype %+v; want every object rewritten", shard, sum)
		}
	}
	if len(seen) == 0 || seen[len(seen)-1].Object != seen[len(seen)-1].Of {
		t.Fatalf("progress: %+v", seen)
	}
	checkRetyped(t, r, bucket, produced, cut)
	for _, p := range seen {
		old := strings.TrimSuffix(p.Key, ".r1.parquet") + ".parquet"
		if _, err := bucket.Stat(ctx, old); err != nil {
			t.Fatalf("the old object %s: %v; want it kept for the reads begun before", old, err)
		}
	}
	sum, err := r.job.Retype(ctx, "orders-0", nil)
	if err != nil || sum.Rewritten != 0 || sum.Skipped != sum.Objects {
		t.Fatalf("a second retype: %+v %v; want every object left as it is", sum, err)
	}
	r.run(t, map[string]uint64{}) // a tiering run after: nothing moves
	checkRetyped(t, r, bucket, produced, cut)
}

// A retype killed at any write (the new object's upload, the manifest's
// swap, just after it, the table's commit, just after it) leaves each
// offset in one object; the next tiering run and retype finish the job.
func TestEveryRetypeStepRecovers(t *testing.T) {
	object := func(b string) bool { return strings.HasSuffix(b, ".r1.parquet") }
	manifest := func(b string) bool { return b == "_strata_manifest.json" }
	hint := func(b string) bool { return b == hintName }
	for _, tc := range []struct {
		name   string
		op     objstore.Op
		step   func(string) bool
		landed bool
	}{
		{"dies uploading the new object", objstore.OpUpload, object, false},
		{"dies swapping the manifest", objstore.OpUploadIf, manifest, false},
		{"dies after swapping the manifest", objstore.OpUploadIf, manifest, true},
		{"dies swapping the table's pointer", objstore.OpUploadIf, hint, false},
		{"dies after swapping the table's pointer", objstore.OpUploadIf, hint, true},
	} {
		t.Run(tc.name, func(t *testing.T) {
			ctx := context.Background()
			raw, dir := localBucket(t)
			dying := &dieAt{Bucket: raw}
			r, produced, cut := retypeRig(t, dying, dir)
			dying.op, dying.step, dying.landed = tc.op, tc.step, tc.landed
			if _, err := r.job.Retype(ctx, "orders-0", nil); !errors.Is(err, errKilled) {
				t.Fatalf("the dying retype: %v, want it killed", err)
			}
			// The process starts again on the same catalog and bucket.
			r.job.Bucket, r.tables.Bucket = raw, raw
			r.run(t, map[string]uint64{})
			for _, shard := range []string{"orders-0", "orders-1"} {
				if _, err := r.job.Retype(ctx, shard, nil); err != nil {
					t.Fatal(err)
				}
			}
			checkRetyped(t, r, raw, produced, cut)
		})
	}
}

// A node whose catalog still names an object a retype replaced and
// deleted (another node retyped it, and this one's run has not come yet)
// reads the offsets anyway: its cold reader finds the object gone, follows
// the manifest to the new one, and reads the same records.
func TestAColdReadFollowsARetypeItMissed(t *testing.T) {
	ctx := context.Background()
	bucket, dir := localBucket(t)
	r, produced, _ := retypeRig(t, bucket, dir)
	segs, err := r.job.Catalog.Segments("orders-1")
	if err != nil {
		t.Fatal(err)
	}
	old := map[uint64]string{}
	for _, s := range segs {
		if s.State == catalog.Remote {
			old[s.No] = s.ObjectKey
		}
	}
	if len(old) == 0 {
		t.Fatalf("no segment of orders-1 is read from the cold tier only: %+v", segs)
	}
	if _, err := r.job.Retype(ctx, "orders-1", nil); err != nil {
		t.Fatal(err)
	}
	// As this node's catalog would be had another node retyped: the old
	// keys, whose objects the retired grace has let go.
	for no, key := range old {
		if _, err := r.job.Catalog.Transition("orders-1", no, catalog.Remote, catalog.Remote, func(c *catalog.Segment) { c.ObjectKey = key }); err != nil {
			t.Fatal(err)
		}
		if err := bucket.Delete(ctx, key); err != nil {
			t.Fatal(err)
		}
	}
	reader := tiering.NewColdReader(r.job.Catalog, bucket, 0)
	reader.Heal = r.job.Reconcile
	var first catalog.Segment
	for _, s := range segs {
		if s.State == catalog.Remote {
			first = s
			break
		}
	}
	got, err := reader.Read(ctx, "orders-1", first.StartOffset, store.Budget{MaxRecords: 1000, MaxBytes: 64 << 20})
	if err != nil {
		t.Fatalf("a cold read after a retype this node missed: %v", err)
	}
	if len(got) == 0 || got[0].Offset != first.StartOffset {
		t.Fatalf("read %d records from offset %d", len(got), first.StartOffset)
	}
	for _, rec := range got {
		want := produced["orders-1"][rec.Offset]
		a, _ := record.Append(nil, &rec)
		b, _ := record.Append(nil, &want)
		if string(a) != string(b) {
			t.Fatalf("offset %d reads otherwise after the heal", rec.Offset)
		}
	}
	segs, _ = r.job.Catalog.Segments("orders-1")
	for _, s := range segs {
		if s.State == catalog.Remote && !strings.HasSuffix(s.ObjectKey, ".r1.parquet") {
			t.Fatalf("segment %d still names %s after the heal", s.No, s.ObjectKey)
		}
	}
}

// A retype's old object goes once its retired grace has passed, though
// it was uploaded less than the orphan grace ago; one a retype rewrote
// while retention took the old one from the manifest leaves no new object.
func TestRetiredObjectsGo(t *testing.T) {
	ctx := context.Background()
	bucket, dir := localBucket(t)
	r, _, _ := retypeRig(t, bucket, dir)
	r.tables.FileDeleteDelay, r.tables.MaintainEvery = -1, -1 // no snapshot keeps them
	mkey := "data/topic=orders/partition=1/_strata_manifest.json"
	m, err := tiering.ReadManifest(ctx, bucket, mkey)
	if err != nil {
		t.Fatal(err)
	}
	// The first object leaves the manifest, as a retention on another node
	// would take it, before the retype reaches it.
	gone := m.Objects[0].Key
	m.Objects = m.Objects[1:]
	raw, _ := json.Marshal(m)
	if err := bucket.Upload(ctx, mkey, bytes.NewReader(raw)); err != nil {
		t.Fatal(err)
	}
	if _, err := r.job.Retype(ctx, "orders-1", nil); err == nil || !strings.Contains(err.Error(), "no longer lists") {
		t.Fatalf("a retype of an object gone from the manifest: %v", err)
	}
	if _, err := bucket.Stat(ctx, strings.TrimSuffix(gone, ".parquet")+".r1.parquet"); !errors.Is(err, objstore.ErrNotFound) {
		t.Fatalf("the new object of one gone from the manifest: %v, want it deleted", err)
	}

	// Another shard's, retyped: the old copies go with the grace.
	m, _ = tiering.ReadManifest(ctx, bucket, "data/topic=orders/partition=0/_strata_manifest.json")
	if _, err := r.job.Retype(ctx, "orders-0", nil); err != nil {
		t.Fatal(err)
	}
	r.job.RetiredGrace = time.Nanosecond
	r.run(t, map[string]uint64{})
	r.run(t, map[string]uint64{})
	for _, e := range m.Objects {
		if _, err := bucket.Stat(ctx, e.Key); !errors.Is(err, objstore.ErrNotFound) {
			t.Errorf("the old object %s after its retired grace: %v, want it gone", e.Key, err)
		}
	}
}
