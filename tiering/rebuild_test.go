package tiering

import (
	"context"
	"os"
	"path/filepath"
	"testing"
	"time"

	"strata/catalog/pebblecat"
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
	segs, _ := r.engine.Catalog().Segments("orders-5")
	tieredEnd := segs[len(segs)-1].StartOffset
	r.engine.Close()
	os.RemoveAll(dir)

	fresh := t.TempDir()
	cat, err := pebblecat.Open(filepath.Join(fresh, "catalog"))
	if err != nil {
		t.Fatal(err)
	}
	sum, err := Rebuild(ctx, lb, "data", cat, time.Now())
	cat.Close()
	if err != nil || len(sum.Shards) != 1 || sum.Segments != len(segs)-1 {
		t.Fatalf("rebuild: %+v, %v", sum, err)
	}
	r2 := newRig(t, lb, fresh)
	storetest.Equal(t, storetest.ReadAll(t, r2.engine, "orders-5", 0), want[:tieredEnd])
	base, err := r2.engine.Append(ctx, "orders-5", storetest.Records(1, 1))
	if err != nil || base != tieredEnd {
		t.Fatalf("append after rebuild: base %d, %v; want %d", base, err, tieredEnd)
	}
	// Running it again changes nothing.
	cat2 := r2.engine.Catalog()
	if again, err := Rebuild(ctx, lb, "data", cat2, time.Now()); err != nil || len(again.Skipped) != 1 {
		t.Fatalf("second rebuild: %+v, %v", again, err)
	}
}
