package tiering

import (
	"context"
	"errors"
	"slices"
	"strings"
	"testing"
	"time"

	"strata/catalog"
	"strata/engine/record"
	"strata/engine/segment"
	"strata/engine/store"
	"strata/engine/store/storetest"
	"strata/tiering/objstore"
)

// Retention bounds the whole log, local and cold together (Kafka's
// retention.ms and retention.bytes under tiered storage). While tiering is
// behind, data within retention waits on local disk for its upload; once
// the log is past retention its oldest segments leave every tier, uploaded
// or not, and the low watermark rises past them.
func TestRetentionOverEveryTier(t *testing.T) {
	for _, model := range []string{"partition", segment.ModelShared} {
		t.Run(model, func(t *testing.T) { retentionOverEveryTier(t, modelOpts(model)...) })
	}
}

func retentionOverEveryTier(t *testing.T, opts ...func(*segment.Config)) {
	ctx := context.Background()
	r := newRig(t, backends["local"](t), t.TempDir(), opts...)
	want := produce(t, r.engine, "logs-0", 20) // timestamps from 2023: years old

	// Tiering behind, the log within its byte bound: nothing goes anywhere.
	r.job.Policy = Policy{MinSealedAge: time.Hour, RetentionMaxBytes: 1 << 30}
	if sum, err := r.job.Run(ctx); err != nil || len(sum.Uploaded) != 0 || len(sum.Errors) > 0 {
		t.Fatalf("run while behind: %+v, %v", sum, err)
	}
	storetest.Equal(t, storetest.ReadAll(t, r.engine, "logs-0", 0), want)

	// Half of the segments tiered and their local copies dropped, more sealed after.
	segs, _ := r.catalog().Segments("logs-0")
	r.job.Policy = Policy{LocalRetention: 0}
	if sum, err := r.job.Run(ctx); err != nil || len(sum.Errors) > 0 || len(sum.Uploaded) != len(segs)-1 {
		t.Fatalf("tiering run: %+v, %v", sum, err)
	}
	more := produce(t, r.engine, "logs-0", 10)
	want = append(want, more...)
	segs, _ = r.catalog().Segments("logs-0")
	states := map[catalog.State]int{}
	for _, s := range segs {
		states[s.State]++
	}
	if states[catalog.Remote] == 0 || states[catalog.Sealed] == 0 {
		t.Fatalf("want remote and sealed segments to expire together; have %v", states)
	}

	// Past retention: every sealed and remote segment goes, from every tier.
	r.job.Policy = Policy{MinSealedAge: time.Hour, RetentionMaxAge: 24 * time.Hour}
	sum, err := r.job.Run(ctx)
	if err != nil || len(sum.Errors) > 0 {
		t.Fatalf("retention run: %+v, %v", sum, err)
	}
	if sum.Expired != len(segs)-1 {
		t.Fatalf("retention expired %d segments, want every one but the active (%d)", sum.Expired, len(segs)-1)
	}
	active := segs[len(segs)-1]
	low, high, _ := r.engine.Watermarks(ctx, "logs-0")
	if low != active.StartOffset || high != uint64(len(want)) {
		t.Fatalf("watermarks %d-%d after retention; want %d-%d", low, high, active.StartOffset, len(want))
	}
	storetest.Equal(t, storetest.ReadAll(t, r.engine, "logs-0", low), want[low:])
	var oor *store.OutOfRangeError
	if _, err := r.engine.Read(ctx, "logs-0", 0, store.Budget{}); !errors.As(err, &oor) {
		t.Fatalf("a read below retention: %v; want out of range", err)
	}
	var left []string
	r.bucket.List(ctx, "data/", func(a objstore.Attrs) error {
		if strings.HasSuffix(a.Name, ".parquet") {
			left = append(left, a.Name)
		}
		return nil
	})
	m, _ := readManifest(ctx, r.bucket, Location{"logs", 0}.ManifestKey("data"))
	if len(left) != 0 || len(m.Objects) != 0 {
		t.Fatalf("after retention the bucket holds %v and the manifest %d entries", left, len(m.Objects))
	}
	for _, s := range segs[:len(segs)-1] {
		if _, _, err := r.engine.Checksum(ctx, "logs-0", s.No); err == nil {
			t.Fatalf("segment %d is still on local disk", s.No)
		}
	}

	// A restart agrees.
	r.close()
	r2 := newRig(t, r.bucket, r.dir, opts...)
	if low2, _, _ := r2.engine.Watermarks(ctx, "logs-0"); low2 != low {
		t.Fatalf("after a restart the low watermark is %d, want %d", low2, low)
	}
	storetest.Equal(t, storetest.ReadAll(t, r2.engine, "logs-0", low), want[low:])
}

// Old records at the head of the log and fresh ones after: one run expires
// the old segments and drops the local copies of the tiered fresh ones,
// never leaving a local segment older than a remote one (a hole the read
// path would have to step around), and every offset left reads back. The
// randomized workload found the hole when a drop ran ahead of the expiry.
func TestExpiryAndLocalDropsKeepLocalSegmentsContiguous(t *testing.T) {
	for _, model := range []string{"partition", segment.ModelShared} {
		t.Run(model, func(t *testing.T) { expiryAndLocalDropsKeepLocalSegmentsContiguous(t, modelOpts(model)...) })
	}
}

func expiryAndLocalDropsKeepLocalSegmentsContiguous(t *testing.T, opts ...func(*segment.Config)) {
	ctx := context.Background()
	r := newRig(t, backends["local"](t), t.TempDir(), opts...)
	if err := r.engine.CreateShard(ctx, "mixed-0"); err != nil {
		t.Fatal(err)
	}
	var want []record.Record
	for batch := 0; batch < 60; batch++ {
		recs := storetest.Records(20, batch)
		if batch >= 30 {
			for i := range recs {
				recs[i].Timestamp = time.Now().UnixMilli()
			}
		}
		if _, err := r.engine.Append(ctx, "mixed-0", recs); err != nil {
			t.Fatal(err)
		}
		want = append(want, recs...)
	}
	r.job.Policy = Policy{RetentionMaxAge: 24 * time.Hour}
	sum, err := r.job.Run(ctx)
	if err != nil || len(sum.Errors) > 0 || sum.Expired == 0 || sum.DroppedLocal == 0 {
		t.Fatalf("run: expired %d, dropped %d, %v %v", sum.Expired, sum.DroppedLocal, err, sum.Errors)
	}
	segs, _ := r.catalog().Segments("mixed-0")
	local := false
	for _, s := range segs {
		if s.State.Local() {
			local = true
		} else if local && s.State != catalog.Deleted {
			t.Fatalf("segment %d is %s after a local segment: %+v", s.No, s.State, segs)
		}
	}
	low, _, _ := r.engine.Watermarks(ctx, "mixed-0")
	storetest.Equal(t, storetest.ReadAll(t, r.engine, "mixed-0", low), want[low:])
}

// A local segment older than a remote one (left by earlier versions) does
// not make reads of the remote one's offsets skip ahead: they come from the
// cold tier, at their own offsets.
func TestReadsStepAroundAHoleInTheLocalLog(t *testing.T) {
	for _, model := range []string{"partition", segment.ModelShared} {
		t.Run(model, func(t *testing.T) { readsStepAroundAHoleInTheLocalLog(t, modelOpts(model)...) })
	}
}

func readsStepAroundAHoleInTheLocalLog(t *testing.T, opts ...func(*segment.Config)) {
	ctx := context.Background()
	r := newRig(t, backends["local"](t), t.TempDir(), opts...)
	want := produce(t, r.engine, "holey-0", 30)
	r.job.Policy = Policy{LocalRetention: time.Hour}
	if sum, err := r.job.Run(ctx); err != nil || len(sum.Errors) > 0 || len(sum.Uploaded) < 3 {
		t.Fatalf("run: %+v %v", sum, err)
	}
	segs, _ := r.catalog().Segments("holey-0")
	hole := segs[1]
	if _, err := r.catalog().Transition("holey-0", hole.No, catalog.Cold, catalog.Remote, nil); err != nil {
		t.Fatal(err)
	}
	r.close()
	r = newRig(t, r.bucket, r.dir, opts...) // recovery removes the remote segment's file
	for _, off := range []uint64{hole.StartOffset, hole.StartOffset + 3, hole.EndOffset} {
		got, err := r.engine.Read(ctx, "holey-0", off, store.Budget{MaxRecords: 2})
		if err != nil || len(got) == 0 || got[0].Offset != off {
			t.Fatalf("read at %d, in the hole: %v, %v", off, got, err)
		}
	}
	storetest.Equal(t, storetest.ReadAll(t, r.engine, "holey-0", 0), want)
}

// Segments wholly below the log start (DeleteRecords, or a follower taking
// its leader's) leave every tier at the next run, uploaded or not, as Kafka
// deletes the segments below the log start offset: the bucket never gets
// the deleted records, and a cluster, which prunes the seal records below
// the log start, never leaves a replica waiting to claim one. The segment
// the log start falls in stays and is tiered.
func TestSegmentsBelowTheLogStartExpire(t *testing.T) {
	ctx := context.Background()
	lb := backends["local"](t)
	r := newRig(t, lb, t.TempDir())
	want := produce(t, r.engine, "logs-0", 30)
	if sum, err := r.job.Run(ctx); err != nil || len(sum.Errors) > 0 || len(sum.Uploaded) == 0 {
		t.Fatalf("first run: %d uploaded, %v %v", len(sum.Uploaded), err, sum.Errors)
	}
	want = append(want, produce(t, r.engine, "logs-0", 30)...)
	segs, _ := r.catalog().Segments("logs-0")
	// The log start inside the second segment sealed after the first run:
	// below it, segments in the bucket and one only local.
	k := slices.IndexFunc(segs, func(s catalog.Segment) bool { return s.State == catalog.Sealed }) + 1
	if k == 0 || k >= len(segs)-1 {
		t.Fatalf("segments %+v: want two sealed after the remote ones", segs)
	}
	start := segs[k].StartOffset + 1
	if err := r.engine.DeleteBefore(ctx, "logs-0", start); err != nil {
		t.Fatal(err)
	}
	sum, err := r.job.Run(ctx)
	if err != nil || len(sum.Errors) > 0 || sum.Expired != k {
		t.Fatalf("run after the delete: %d expired, %d uploaded, %v %v; want the %d segments below %d expired",
			sum.Expired, len(sum.Uploaded), err, sum.Errors, k, start)
	}
	got, _ := r.catalog().Segments("logs-0")
	for _, s := range got[:len(got)-1] {
		if s.EndOffset < start && s.State != catalog.Deleted {
			t.Fatalf("segment %d (%d-%d) below the log start %d is %s", s.No, s.StartOffset, s.EndOffset, start, s.State)
		}
		if s.EndOffset >= start && s.State != catalog.Remote {
			t.Fatalf("segment %d (%d-%d), at or above the log start %d, is %s; want it tiered", s.No, s.StartOffset, s.EndOffset, start, s.State)
		}
	}
	if n := countObjects(t, lb); n != len(segs)-1-k {
		t.Fatalf("%d objects in the bucket; want %d, none below the log start", n, len(segs)-1-k)
	}
	storetest.Equal(t, storetest.ReadAll(t, r.engine, "logs-0", start), want[start:])
}

// A run that died mid-upload leaves its segment uploading in the catalog
// (issue #24's one-hour harness: node 3 killed in a run). Once DeleteRecords
// moves the log start past it, it must expire like a sealed one: the
// planner's expiry stopped at it, its stale re-upload waits ten minutes and
// then, in a cluster, can never claim it (its seal record is pruned below
// the log start), so it and every later segment stayed on local disk for
// good. Whatever the dead run left at its key goes too.
func TestInterruptedUploadBelowTheLogStartExpires(t *testing.T) {
	ctx := context.Background()
	lb := backends["local"](t)
	r := newRig(t, lb, t.TempDir())
	want := produce(t, r.engine, "logs-0", 60)
	segs, _ := r.catalog().Segments("logs-0")
	if len(segs) < 4 || segs[0].State != catalog.Sealed {
		t.Fatalf("segments %+v: want at least three sealed and the active one", segs)
	}
	loc, _ := LocationOf("logs-0")
	key := loc.ObjectKey("data", segs[0].StartOffset, segs[0].EndOffset)
	if _, err := r.cat.Transition("logs-0", segs[0].No, catalog.Sealed, catalog.Uploading, func(c *catalog.Segment) {
		c.ObjectKey, c.UploadStarted = key, time.Now().UTC()
	}); err != nil {
		t.Fatal(err)
	}
	// The dead run's upload landed; it died before verifying it.
	if err := lb.Upload(ctx, key, strings.NewReader("the dead run's object")); err != nil {
		t.Fatal(err)
	}
	start := segs[2].StartOffset + 1 // inside the third segment
	if err := r.engine.DeleteBefore(ctx, "logs-0", start); err != nil {
		t.Fatal(err)
	}
	sum, err := r.job.Run(ctx)
	if err != nil || len(sum.Errors) > 0 || sum.Expired != 2 {
		t.Fatalf("run after the delete: %d expired, %d uploaded, %v %v; want the 2 segments below %d expired, the uploading one first",
			sum.Expired, len(sum.Uploaded), err, sum.Errors, start)
	}
	got, _ := r.catalog().Segments("logs-0")
	for _, s := range got[:len(got)-1] {
		switch {
		case s.EndOffset < start && s.State != catalog.Deleted:
			t.Fatalf("segment %d (%d-%d) below the log start %d is %s", s.No, s.StartOffset, s.EndOffset, start, s.State)
		case s.EndOffset >= start && s.State != catalog.Remote:
			t.Fatalf("segment %d (%d-%d), at or above the log start %d, is %s; want it tiered", s.No, s.StartOffset, s.EndOffset, start, s.State)
		}
	}
	if _, err := lb.Stat(ctx, key); !errors.Is(err, objstore.ErrNotFound) {
		t.Fatalf("the dead run's object %s after its segment expired: %v, want it gone", key, err)
	}
	storetest.Equal(t, storetest.ReadAll(t, r.engine, "logs-0", start), want[start:])
}
