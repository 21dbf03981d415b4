package tiering

import (
	"context"
	"errors"
	"testing"

	"strata/catalog"
	"strata/engine/record"
	"strata/engine/store"
	"strata/engine/store/storetest"
	"strata/tiering/objstore/local"
)

// copySealed gives dst the sealed segments of src's shard, appended at
// their offsets and rolled where src rolled, as a follower copies its
// leader; change, if set, alters the records of each segment first.
func copySealed(t *testing.T, src, dst *rig, shard string, change func(no int, recs []record.Record)) []catalog.Segment {
	ctx := context.Background()
	if err := dst.engine.CreateShard(ctx, shard); err != nil {
		t.Fatal(err)
	}
	segs, _ := src.catalog().Segments(shard)
	segs = segs[:len(segs)-1] // the active one stays the source's
	for i, s := range segs {
		var recs []record.Record
		for off := s.StartOffset; off <= s.EndOffset; off = recs[len(recs)-1].Offset + 1 {
			got, err := src.engine.Read(ctx, shard, off, store.Budget{MaxRecords: int(s.EndOffset - off + 1)})
			if err != nil || len(got) == 0 {
				t.Fatalf("reading %s at %d: %d records, %v", shard, off, len(got), err)
			}
			recs = append(recs, got...)
		}
		if change != nil {
			change(i, recs)
		}
		if err := dst.engine.AppendAt(ctx, shard, recs); err != nil {
			t.Fatal(err)
		}
		if err := dst.engine.RollAt(ctx, shard, s.EndOffset+1); err != nil {
			t.Fatal(err)
		}
	}
	return segs
}

// A node whose copy of a segment is byte-identical to the one another node
// already tiered uploads nothing: it records that object as its own
// segment's, and drops its local copy as usual.
func TestIdenticalCopyIsAdopted(t *testing.T) {
	ctx := context.Background()
	lb, _ := local.New(t.TempDir())
	first, second := newRig(t, lb, t.TempDir()), newRig(t, lb, t.TempDir())
	want := produce(t, first.engine, "orders-0", 30)
	segs := copySealed(t, first, second, "orders-0", nil)
	if sum, err := first.job.Run(ctx); err != nil || len(sum.Errors) > 0 || len(sum.Uploaded) != len(segs) {
		t.Fatalf("first node's run: %d uploaded, %v %v; want %d", len(sum.Uploaded), err, sum.Errors, len(segs))
	}
	sum, err := second.job.Run(ctx)
	if err != nil || len(sum.Errors) > 0 || len(sum.Uploaded) != 0 || len(sum.Adopted) != len(segs) || sum.DroppedLocal != len(segs) {
		t.Fatalf("second node's run: %d uploaded, %d adopted, %d dropped, %v %v; want 0, %d, %d",
			len(sum.Uploaded), len(sum.Adopted), sum.DroppedLocal, err, sum.Errors, len(segs), len(segs))
	}
	got, _ := second.catalog().Segments("orders-0")
	for i, s := range segs {
		if got[i].State != catalog.Remote || got[i].ObjectKey != sum.Adopted[i].Key || got[i].ObjectSize == 0 {
			t.Fatalf("second node's segment %d: %s at %q (%d bytes)", i, got[i].State, got[i].ObjectKey, got[i].ObjectSize)
		}
		if got[i].StartOffset != s.StartOffset {
			t.Fatalf("segment %d starts at %d on the second node, %d on the first", i, got[i].StartOffset, s.StartOffset)
		}
	}
	if n := countObjects(t, lb); n != len(segs) {
		t.Fatalf("%d objects for %d segments", n, len(segs))
	}
	end := segs[len(segs)-1].EndOffset + 1
	storetest.Equal(t, storetest.ReadAll(t, second.engine, "orders-0", 0), want[:end])
}

// A node whose copy of an offset range differs from the one the bucket
// holds refuses loudly: an error naming both checksums, its segment stays
// sealed and local, and the other node's object and manifest entry stay.
func TestDifferentCopyIsRefused(t *testing.T) {
	ctx := context.Background()
	lb, _ := local.New(t.TempDir())
	first, second := newRig(t, lb, t.TempDir()), newRig(t, lb, t.TempDir())
	produce(t, first.engine, "orders-0", 30)
	segs := copySealed(t, first, second, "orders-0", func(no int, recs []record.Record) {
		if no == 0 {
			recs[3].Value = []byte("not what the first node holds")
		}
	})
	if sum, err := first.job.Run(ctx); err != nil || len(sum.Errors) > 0 {
		t.Fatal(err, sum.Errors)
	}
	before, _ := readManifest(ctx, lb, Location{"orders", 0}.ManifestKey("data"))
	sum, err := second.job.Run(ctx)
	if err != nil || len(sum.Errors) != 1 || len(sum.Uploaded)+len(sum.Adopted) != 0 {
		t.Fatalf("second node's run: %d uploaded, %d adopted, %v %v; want one error and nothing tiered",
			len(sum.Uploaded), len(sum.Adopted), err, sum.Errors)
	}
	e := sum.Errors[0]
	if !errors.Is(e, ErrCopiesDiffer) || e.Step != StepUpload || e.Segment != 0 {
		t.Fatalf("the refusal: %v; want ErrCopiesDiffer at upload of segment 0", e)
	}
	got, _ := second.catalog().Segments("orders-0")
	if got[0].State != catalog.Sealed || got[0].Checksum == segs[0].Checksum {
		t.Fatalf("second node's segment 0: %s, crc32c %08x (first node's %08x)", got[0].State, got[0].Checksum, segs[0].Checksum)
	}
	after, _ := readManifest(ctx, lb, Location{"orders", 0}.ManifestKey("data"))
	if len(after.Objects) != len(before.Objects) || after.Objects[0] != before.Objects[0] {
		t.Fatalf("the refusal changed the manifest: %+v, was %+v", after.Objects, before.Objects)
	}
	if _, err := first.job.verify(ctx, before.Objects[0].Key, segs[0]); err != nil {
		t.Fatalf("the first node's object after the refusal: %v", err)
	}
}

// A copy refilled from a log start that DeleteRecords left inside a
// segment holds only that segment's tail, ending where the other copies'
// segment ends. The whole segment is in the bucket already: the node
// adopts that object for its part instead of putting a second object over
// the same offsets (in a cluster, no seal ever names the part, and every
// later segment of the shard waited behind it), and reads from its log
// start come from the bucket.
func TestCopyStartingInsideATieredSegmentAdoptsIt(t *testing.T) {
	ctx := context.Background()
	lb, _ := local.New(t.TempDir())
	first, second := newRig(t, lb, t.TempDir()), newRig(t, lb, t.TempDir())
	want := produce(t, first.engine, "orders-0", 30)
	segs, _ := first.catalog().Segments("orders-0")
	segs = segs[:len(segs)-1]
	if sum, err := first.job.Run(ctx); err != nil || len(sum.Errors) > 0 || len(sum.Uploaded) != len(segs) {
		t.Fatalf("first node's run: %d uploaded, %v %v; want %d", len(sum.Uploaded), err, sum.Errors, len(segs))
	}
	start := (segs[0].StartOffset + segs[0].EndOffset) / 2
	if err := first.engine.DeleteBefore(ctx, "orders-0", start); err != nil {
		t.Fatal(err)
	}
	if err := second.engine.CreateShardAt(ctx, "orders-0", start); err != nil {
		t.Fatal(err)
	}
	for _, s := range segs {
		from := max(s.StartOffset, start)
		recs := storetest.ReadAll(t, first.engine, "orders-0", from)
		recs = recs[:s.EndOffset-from+1]
		if err := second.engine.AppendAt(ctx, "orders-0", recs); err != nil {
			t.Fatal(err)
		}
		if err := second.engine.RollAt(ctx, "orders-0", s.EndOffset+1); err != nil {
			t.Fatal(err)
		}
	}
	sum, err := second.job.Run(ctx)
	if err != nil || len(sum.Errors) > 0 || len(sum.Uploaded) != 0 || len(sum.Adopted) != len(segs) || sum.DroppedLocal != len(segs) {
		t.Fatalf("second node's run: %d uploaded, %d adopted, %d dropped, %v %v; want 0, %d, %d",
			len(sum.Uploaded), len(sum.Adopted), sum.DroppedLocal, err, sum.Errors, len(segs), len(segs))
	}
	if n := countObjects(t, lb); n != len(segs) {
		t.Fatalf("%d objects for %d segments", n, len(segs))
	}
	got, _ := second.catalog().Segments("orders-0")
	if got[0].State != catalog.Remote || got[0].StartOffset != segs[0].StartOffset || got[0].ObjectKey != sum.Adopted[0].Key {
		t.Fatalf("second node's first segment: %s from %d at %q; want remote, the whole segment's object from %d",
			got[0].State, got[0].StartOffset, got[0].ObjectKey, segs[0].StartOffset)
	}
	if low, _, _ := second.engine.Watermarks(ctx, "orders-0"); low != start {
		t.Fatalf("second node's log start %d after the run, was %d", low, start)
	}
	end := segs[len(segs)-1].EndOffset + 1
	storetest.Equal(t, storetest.ReadAll(t, second.engine, "orders-0", start), want[start:end])
}
