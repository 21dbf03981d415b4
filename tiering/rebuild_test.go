package tiering

import (
	"bytes"
	"context"
	"encoding/json"
	"os"
	"testing"
	"time"

	"strata/catalog"
	"strata/engine/store/storetest"
	"strata/tiering/objstore/local"
)

// The data disk is lost; the bucket is all that is left. The catalog is
// rebuilt from the manifests and every tiered offset reads back.
func TestRebuildCatalogFromBucket(t *testing.T) {
	ctx := context.Background()
	lb, _ := local.New(t.TempDir())
	dir := t.TempDir()
	r := newRig(t, lb, dir)
	want := produce(t, r.engine, "orders-5", 30)
	if sum, err := r.job.Run(ctx); err != nil || len(sum.Errors) > 0 {
		t.Fatal(err, sum.Errors)
	}
	segs, _ := r.catalog().Segments("orders-5")
	tieredEnd := segs[len(segs)-1].StartOffset
	r.close()
	os.RemoveAll(dir)

	r2 := newRig(t, lb, t.TempDir())
	sum, err := Rebuild(ctx, lb, "data", r2.cat, r2.engine, time.Now())
	if err != nil || len(sum.Shards) != 1 || sum.Segments != len(segs)-1 {
		t.Fatalf("rebuild: %+v, %v", sum, err)
	}
	if got, _ := r2.catalog().Segments("orders-5"); len(got) != len(segs) || got[0].State != catalog.Remote {
		t.Fatalf("the rebuilt catalog holds %d segments (first %+v); want %d, tiered ones remote", len(got), got[0], len(segs))
	}
	storetest.Equal(t, storetest.ReadAll(t, r2.engine, "orders-5", 0), want[:tieredEnd])
	base, err := r2.engine.Append(ctx, "orders-5", storetest.Records(1, 1))
	if err != nil || base != tieredEnd {
		t.Fatalf("append after rebuild: base %d, %v; want %d", base, err, tieredEnd)
	}
	// Running it again changes nothing; a shard whose every object
	// retention took has nothing to restore, and stops nothing.
	empty, _ := json.Marshal(Manifest{Version: 1, Shard: "gone-0", Topic: "gone"})
	if err := lb.Upload(ctx, "data/topic=gone/partition=0/_strata_manifest.json", bytes.NewReader(empty)); err != nil {
		t.Fatal(err)
	}
	if again, err := Rebuild(ctx, lb, "data", r2.catalog(), r2.engine, time.Now()); err != nil || len(again.Skipped) != 1 || len(again.Empty) != 1 {
		t.Fatalf("second rebuild: %+v, %v", again, err)
	}
}

// Records deleted before the data disk was lost stay deleted: the run
// records the log start in the manifest once it cuts into the first
// object, and the rebuilt shard starts there.
func TestRebuildKeepsTheLogStart(t *testing.T) {
	ctx := context.Background()
	lb, _ := local.New(t.TempDir())
	dir := t.TempDir()
	r := newRig(t, lb, dir)
	want := produce(t, r.engine, "orders-5", 30)
	if sum, err := r.job.Run(ctx); err != nil || len(sum.Errors) > 0 {
		t.Fatal(err, sum.Errors)
	}
	segs, _ := r.catalog().Segments("orders-5")
	cut := segs[0].StartOffset + 7 // inside the first object
	if err := r.engine.DeleteBefore(ctx, "orders-5", cut); err != nil {
		t.Fatal(err)
	}
	if sum, err := r.job.Run(ctx); err != nil || len(sum.Errors) > 0 {
		t.Fatal(err, sum.Errors)
	}
	tieredEnd := segs[len(segs)-1].StartOffset
	r.close()
	os.RemoveAll(dir)

	r2 := newRig(t, lb, t.TempDir())
	if _, err := Rebuild(ctx, lb, "data", r2.cat, r2.engine, time.Now()); err != nil {
		t.Fatal(err)
	}
	if low, _, err := r2.engine.Watermarks(ctx, "orders-5"); err != nil || low != cut {
		t.Fatalf("the rebuilt shard's log start is %d (%v); it was %d before the disk was lost", low, err, cut)
	}
	storetest.Equal(t, storetest.ReadAll(t, r2.engine, "orders-5", cut), want[cut:tieredEnd])
}
