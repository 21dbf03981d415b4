package tiering

import (
	"context"
	"errors"
	"path/filepath"
	"testing"
	"time"

	"strata/catalog"
	"strata/catalog/pebblecat"
	"strata/engine/segment"
	"strata/engine/store"
	"strata/tiering/objstore/local"
)

// Events the catalog never heard (a crash before their delivery, or a start
// without the catalog) are made up at the next start: the catalog ends
// with the engine's segments, seals, checksums, deletions and low watermark.
func TestCatalogCatchesUpWithTheEngine(t *testing.T) {
	ctx := context.Background()
	dir := t.TempDir()
	cat, err := pebblecat.Open(filepath.Join(dir, "catalog"))
	if err != nil {
		t.Fatal(err)
	}
	defer cat.Close()
	open := func(listen bool) *segment.Engine {
		cfg := segment.Config{Dir: dir, Workers: 2, MaxSegmentBytes: 4 << 10, RollCheckInterval: 10, Logger: quiet}
		if listen {
			cfg.Events = Listen(cat, nil, "", quiet)
		}
		e, err := segment.Open(cfg)
		if err != nil {
			t.Fatal(err)
		}
		return e
	}
	e := open(true)
	produce(t, e, "late-0", 10)
	e.Close()

	// Rolls, a DeleteRecords and retention happen while nobody listens.
	e = open(false)
	produce(t, e, "late-0", 20)
	segs, _ := e.Segments("late-0")
	if err := e.DeleteBefore(ctx, "late-0", segs[2].StartOffset); err != nil {
		t.Fatal(err)
	}
	if n, err := e.ApplyRetention(ctx, segment.RetentionPolicy{}, nil); err != nil || n != 2 {
		t.Fatalf("retention deleted %d segments, %v; want 2", n, err)
	}
	produce(t, e, "new-0", 5)
	held, _ := e.Segments("late-0")
	e.Close()

	e = open(true)
	defer e.Close()
	e.SyncEvents()
	got, err := cat.Segments("late-0")
	if err != nil {
		t.Fatal(err)
	}
	if len(got) != len(segs) {
		t.Fatalf("the catalog has %d segments, the engine had %d", len(got), len(segs))
	}
	for _, c := range got[:2] {
		if c.State != catalog.Deleted {
			t.Errorf("segment %d, deleted by retention, is %s in the catalog", c.No, c.State)
		}
	}
	for i, c := range got[2:] {
		h := held[i]
		want := catalog.Sealed
		if h.State == segment.SegmentActive {
			want = catalog.Active
		}
		if c.No != h.No || c.State != want || c.StartOffset != h.StartOffset || (want == catalog.Sealed && (c.EndOffset != h.EndOffset || c.Checksum != h.Checksum)) {
			t.Errorf("catalog segment %+v; the engine holds %+v", c, h)
		}
	}
	if sh, err := cat.Shard("late-0"); err != nil || sh.LowWatermark != segs[2].StartOffset {
		t.Errorf("catalog low watermark %d, %v; want %d", sh.LowWatermark, err, segs[2].StartOffset)
	}
	if _, err := cat.Shard("new-0"); err != nil {
		t.Errorf("a shard created while the catalog was away: %v", err)
	}
}

// A deletion whose listener failed is owed: its name is refused until the
// listener succeeds (retried while the engine runs, and at the next start).
// A retry that comes once the name belongs to a new shard (the deletion
// told late) leaves the new shard's catalog entries and objects alone.
func TestRetriedDeletionSparesTheNewShard(t *testing.T) {
	ctx := context.Background()
	dir := t.TempDir()
	lb, _ := local.New(t.TempDir())
	cat, err := pebblecat.Open(filepath.Join(dir, "catalog"))
	if err != nil {
		t.Fatal(err)
	}
	defer cat.Close()
	open := func(failDeletes bool) *segment.Engine {
		l := Listen(cat, lb, "data", quiet)
		if failDeletes {
			l.ShardDeleted = func(context.Context, string, time.Time) error { return errors.New("the bucket is unreachable") }
		}
		e, err := segment.Open(segment.Config{Dir: dir, Workers: 2, MaxSegmentBytes: 16 << 10, RollCheckInterval: 10, Logger: quiet, Events: l})
		if err != nil {
			t.Fatal(err)
		}
		return e
	}
	e := open(true)
	produce(t, e, "again-0", 3)
	old, _ := e.Shard("again-0")
	if err := e.DeleteShard(ctx, "again-0"); err != nil {
		t.Fatal(err)
	}
	if err := e.CreateShard(ctx, "again-0"); !errors.Is(err, store.ErrShardDeleting) {
		t.Fatalf("creating the name again while its deletion is owed: %v; want %v", err, store.ErrShardDeleting)
	}
	e.Close()

	e = open(false) // the old deletion is told again, to a listener that works
	defer e.Close()
	e.SyncEvents()
	time.Sleep(2 * time.Millisecond) // a new creation time
	produce(t, e, "again-0", 30)
	job := &Job{Engine: e, Catalog: cat, Bucket: lb, Prefix: "data", Log: quiet}
	if sum, err := job.Run(ctx); err != nil || len(sum.Uploaded) == 0 {
		t.Fatalf("tiering the new shard: %+v, %v", sum, err)
	}
	tiered := countObjects(t, lb)
	// The old shard's deletion told late, to the new shard's listener.
	if err := Listen(cat, lb, "data", quiet).ShardDeleted(ctx, "again-0", old.Created); err != nil {
		t.Fatal(err)
	}
	live, _ := e.Shard("again-0")
	got, err := cat.Shard("again-0")
	if err != nil || !got.Created.Equal(live.Created) {
		t.Fatalf("the catalog's again-0: %+v, %v; want the live shard created %s", got, err, live.Created)
	}
	if n := countObjects(t, lb); n != tiered {
		t.Fatalf("the retried deletion of the old shard left %d of the new shard's %d objects in the bucket", n, tiered)
	}
}

// A shard made at a start offset (another node holds the offsets below):
// the catalog's low watermark is the start from its creation on, and its
// segments begin there once sealed.
func TestCatalogOfAShardMadeAtAStart(t *testing.T) {
	ctx := context.Background()
	dir := t.TempDir()
	cat, err := pebblecat.Open(filepath.Join(dir, "catalog"))
	if err != nil {
		t.Fatal(err)
	}
	defer cat.Close()
	e, err := segment.Open(segment.Config{Dir: dir, Workers: 2, MaxSegmentBytes: 4 << 10, RollCheckInterval: 10, Logger: quiet,
		Events: Listen(cat, nil, "", quiet)})
	if err != nil {
		t.Fatal(err)
	}
	defer e.Close()
	const start = 12345
	if err := e.CreateShardAt(ctx, "at-0", start); err != nil {
		t.Fatal(err)
	}
	e.SyncEvents()
	if sh, err := cat.Shard("at-0"); err != nil || sh.LowWatermark != start {
		t.Fatalf("the catalog's low watermark of a shard made at %d: %d, %v", start, sh.LowWatermark, err)
	}
	produce(t, e, "at-0", 10)
	e.SyncEvents()
	got, err := cat.Segments("at-0")
	if err != nil || len(got) < 2 {
		t.Fatalf("the catalog has %d segments, %v; want several", len(got), err)
	}
	held, _ := e.Segments("at-0")
	for i, c := range got[:len(got)-1] {
		if c.State != catalog.Sealed || c.StartOffset != held[i].StartOffset || c.EndOffset != held[i].EndOffset {
			t.Errorf("catalog segment %+v; the engine holds %+v", c, held[i])
		}
	}
	if got[0].StartOffset != start {
		t.Errorf("the first sealed segment begins at %d in the catalog, want %d", got[0].StartOffset, start)
	}
}
