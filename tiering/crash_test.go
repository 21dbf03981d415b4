package tiering

import (
	"context"
	"errors"
	"io"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"strata/catalog"
	"strata/engine/record"
	"strata/engine/store/storetest"
	"strata/tiering/objstore"
	"strata/tiering/objstore/faulty"
	"strata/tiering/objstore/local"
)

func countObjects(t *testing.T, b objstore.Bucket) int {
	n := 0
	b.List(context.Background(), "", func(a objstore.Attrs) error {
		if strings.HasSuffix(a.Name, ".parquet") {
			n++
		}
		return nil
	})
	return n
}

// Every step of the job can fail or the process can die there. After the
// failure nothing is lost or half-published; after the next clean run every
// sealed segment is remote, exactly once in the bucket, and reads are whole.
func TestEveryCrashPointRecovers(t *testing.T) {
	for _, tc := range []struct {
		name  string
		fault func(t *testing.T, r *rig, f *faulty.Bucket)
		// after the faulty run: the state of segment 0 and objects in the bucket
		wantState   catalog.State
		wantObjects int
		// crashed: the fault is a process that died; no faulty run follows
		crashed bool
		// adopted: segments the clean run finds in the manifest already
		adopted int
	}{
		{"stream cut mid-upload", func(t *testing.T, r *rig, f *faulty.Bucket) {
			f.CutNextUpload(3000, nil)
		}, catalog.Sealed, 0, false, 0},
		{"upload refused", func(t *testing.T, r *rig, f *faulty.Bucket) {
			f.FailNth(objstore.OpUpload, 1, nil)
		}, catalog.Sealed, 0, false, 0},
		{"verify cannot stat", func(t *testing.T, r *rig, f *faulty.Bucket) {
			f.FailNth(objstore.OpStat, 1, nil)
		}, catalog.Sealed, 0, false, 0},
		{"manifest write fails", func(t *testing.T, r *rig, f *faulty.Bucket) {
			f.FailNth(objstore.OpUploadIf, 1, nil) // the manifest
		}, catalog.Sealed, 1, false, 0}, // the object stays until the retry replaces it
		{"died after marking uploading", func(t *testing.T, r *rig, f *faulty.Bucket) {
			s := firstSegment(t, r)
			r.catalog().Transition("orders-0", s.No, catalog.Sealed, catalog.Uploading, func(c *catalog.Segment) {
				c.UploadStarted = time.Now().Add(-time.Second) // a killed process's, a moment ago
			})
		}, catalog.Uploading, 0, true, 0},
		{"died after the upload, before the commit", func(t *testing.T, r *rig, f *faulty.Bucket) {
			// Upload the object the way the job would, then leave the catalog at uploading.
			s := firstSegment(t, r)
			loc, _ := LocationOf("orders-0")
			pr, pw := io.Pipe()
			go func() {
				_, _, err := r.job.convert("orders-0", s, CopyFile{Path: r.job.Engine.SegmentPath("orders-0", s.No)}, false, pw)
				pw.CloseWithError(err)
			}()
			if err := f.Bucket.Upload(context.Background(), loc.ObjectKey(r.job.Prefix, s.StartOffset, s.EndOffset), pr); err != nil {
				t.Fatal(err)
			}
			r.catalog().Transition("orders-0", s.No, catalog.Sealed, catalog.Uploading, func(c *catalog.Segment) {
				c.UploadStarted = time.Now().Add(-time.Second) // a killed process's, a moment ago
			})
		}, catalog.Uploading, 1, true, 0},
		{"died after the manifest write, before the commit", func(t *testing.T, r *rig, f *faulty.Bucket) {
			s := firstSegment(t, r)
			loc, _ := LocationOf("orders-0")
			key := loc.ObjectKey(r.job.Prefix, s.StartOffset, s.EndOffset)
			pr, pw := io.Pipe()
			go func() {
				_, _, err := r.job.convert("orders-0", s, CopyFile{Path: r.job.Engine.SegmentPath("orders-0", s.No)}, false, pw)
				pw.CloseWithError(err)
			}()
			if err := f.Bucket.Upload(context.Background(), key, pr); err != nil {
				t.Fatal(err)
			}
			size, err := r.job.verify(context.Background(), key, s)
			if err != nil {
				t.Fatal(err)
			}
			if err := r.job.addToManifest(context.Background(), "orders-0", loc, key, s, size); err != nil {
				t.Fatal(err)
			}
			r.catalog().Transition("orders-0", s.No, catalog.Sealed, catalog.Uploading, func(c *catalog.Segment) {
				c.UploadStarted = time.Now().Add(-time.Second) // a killed process's, a moment ago
			})
		}, catalog.Uploading, 1, true, 1},
	} {
		t.Run(tc.name, func(t *testing.T) {
			ctx := context.Background()
			lb, _ := local.New(t.TempDir())
			f := faulty.Wrap(lb)
			r := newRig(t, f, t.TempDir())
			r.job.Policy.LocalRetention = time.Hour // keep local copies: this test is about uploads
			want := produce(t, r.engine, "orders-0", 30)
			tc.fault(t, r, f)
			if !tc.crashed {
				// Only segment 0 is attempted while it fails: later ones wait for it.
				sum, _ := r.job.Run(ctx)
				if len(sum.Errors) == 0 {
					t.Fatal("the faulty run reported no error")
				}
			}
			if s := firstSegment(t, r); s.State != tc.wantState {
				t.Fatalf("after the fault segment 0 is %s, want %s", s.State, tc.wantState)
			}
			if countObjects(t, f) != tc.wantObjects {
				t.Fatalf("after the fault %d objects in the bucket, want %d", countObjects(t, f), tc.wantObjects)
			}
			storetest.Equal(t, storetest.ReadAll(t, r.engine, "orders-0", 0), want)

			// The next run resumes a killed process's upload at once (one
			// node: no upload recorded before the run is still going), not
			// only once StaleUpload (10m) has passed.
			r.job.Policy.LocalRetention = 0
			if sum, err := r.job.Run(ctx); err != nil || len(sum.Errors) > 0 || len(sum.Adopted) != tc.adopted {
				t.Fatalf("clean run: %d adopted (want %d), %v %v", len(sum.Adopted), tc.adopted, err, sum.Errors)
			}
			segs, _ := r.catalog().Segments("orders-0")
			for _, s := range segs[:len(segs)-1] {
				if s.State != catalog.Remote {
					t.Fatalf("after the clean run segment %d is %s", s.No, s.State)
				}
			}
			if n := countObjects(t, f); n != len(segs)-1 {
				t.Fatalf("%d objects for %d tiered segments: something was duplicated or lost", n, len(segs)-1)
			}
			storetest.Equal(t, storetest.ReadAll(t, r.engine, "orders-0", 0), want)
		})
	}
}

func firstSegment(t *testing.T, r *rig) catalog.Segment {
	segs, err := r.catalog().Segments("orders-0")
	if err != nil || len(segs) < 2 {
		t.Fatalf("segments: %v %v", segs, err)
	}
	return segs[0]
}

// A local copy that no longer matches its sealed checksum is never uploaded.
func TestDamagedLocalCopyIsNotUploaded(t *testing.T) {
	ctx := context.Background()
	lb, _ := local.New(t.TempDir())
	r := newRig(t, lb, t.TempDir())
	produce(t, r.engine, "orders-0", 30)
	s := firstSegment(t, r)
	path := r.engine.SegmentPath("orders-0", s.No)
	data, _ := os.ReadFile(path)
	data[len(data)/2] ^= 1
	os.Chmod(path, 0o644)
	os.WriteFile(path, data, 0o444)
	sum, _ := r.job.Run(ctx)
	if len(sum.Errors) == 0 || !errors.Is(sum.Errors[0], record.ErrCorrupt) || sum.Errors[0].Step != StepUpload || sum.Errors[0].Segment != s.No {
		t.Fatalf("run over a damaged segment: %v", sum.Errors)
	}
	if countObjects(t, lb) != 0 || firstSegment(t, r).State != catalog.Sealed {
		t.Fatalf("a damaged segment was published: %d objects, state %s", countObjects(t, lb), firstSegment(t, r).State)
	}
}

// Objects nobody recorded are removed once past the grace period.
func TestOrphanSweep(t *testing.T) {
	ctx := context.Background()
	lb, _ := local.New(t.TempDir())
	r := newRig(t, lb, t.TempDir())
	produce(t, r.engine, "orders-0", 30)
	if _, err := r.job.Run(ctx); err != nil {
		t.Fatal(err)
	}
	tiered := countObjects(t, lb)
	lb.Upload(ctx, "data/topic=orders/partition=0/99999999999999999990-99999999999999999999.parquet", strings.NewReader("stray"))
	r.job.Run(ctx)
	if countObjects(t, lb) != tiered+1 {
		t.Fatal("a fresh unrecorded object was deleted inside the grace period")
	}
	r.job.Now = func() time.Time { return time.Now().Add(2 * time.Hour) }
	// A staged upload a dead process left behind, old enough to go.
	stale := filepath.Join(lb.Root(), objstore.TempDir, "upload-dead")
	os.WriteFile(stale, []byte("half"), 0o644)
	os.Chtimes(stale, time.Now().Add(-2*time.Hour), time.Now().Add(-2*time.Hour))
	sum, _ := r.job.Run(ctx)
	if _, err := os.Stat(stale); !os.IsNotExist(err) {
		t.Fatal("a stale staged upload survived the sweep")
	}
	if sum.OrphansDeleted != 2 || countObjects(t, lb) != tiered {
		t.Fatalf("orphan sweep deleted %d; %d objects left, want %d", sum.OrphansDeleted, countObjects(t, lb), tiered)
	}
}

// The catalog says remote but the process died before deleting the file:
// the next tiering run deletes it and reads go to the cold tier.
func TestDiedBetweenRemoteAndDelete(t *testing.T) {
	ctx := context.Background()
	lb, _ := local.New(t.TempDir())
	dir := t.TempDir()
	r := newRig(t, lb, dir)
	r.job.Policy.LocalRetention = time.Hour
	want := produce(t, r.engine, "orders-0", 30)
	r.job.Run(ctx)
	s := firstSegment(t, r)
	if _, err := r.catalog().Transition("orders-0", s.No, catalog.Cold, catalog.Remote, nil); err != nil {
		t.Fatal(err)
	}
	path := r.engine.SegmentPath("orders-0", s.No)
	r.close()
	r2 := newRig(t, lb, dir)
	if sum, err := r2.job.Run(ctx); err != nil || len(sum.Errors) > 0 {
		t.Fatal(err, sum.Errors)
	}
	if _, err := os.Stat(path); !os.IsNotExist(err) {
		t.Fatalf("the local copy of a remote segment survived the next tiering run: %v", err)
	}
	storetest.Equal(t, storetest.ReadAll(t, r2.engine, "orders-0", 0), want)
}

// Remote retention: the oldest remote segments leave the bucket and their
// offsets leave the shard; what is younger still reads back.
func TestRemoteRetentionExpiresOldSegments(t *testing.T) {
	ctx := context.Background()
	lb, _ := local.New(t.TempDir())
	r := newRig(t, lb, t.TempDir())
	want := produce(t, r.engine, "orders-0", 30)
	r.job.Run(ctx)
	segs, _ := r.catalog().Segments("orders-0")
	before := countObjects(t, lb)
	// Records are stamped in 2023, hours apart from batch to batch: a
	// retention just past the newest remote segment's age keeps it and
	// expires the older ones.
	newest := segs[len(segs)-2].MaxTimestamp
	r.job.Policy.RemoteRetention = time.Since(time.UnixMilli(newest)) + time.Minute
	r.job.Now = time.Now
	sum, err := r.job.Run(ctx)
	if err != nil || len(sum.Errors) > 0 || sum.Expired == 0 {
		t.Fatalf("run: expired %d, %v %v", sum.Expired, err, sum.Errors)
	}
	after, _ := r.catalog().Segments("orders-0")
	low, _, _ := r.engine.Watermarks(ctx, "orders-0")
	if low != after[sum.Expired-1].EndOffset+1 || countObjects(t, lb) != before-sum.Expired {
		t.Fatalf("after expiring %d: low watermark %d, %d objects (was %d)", sum.Expired, low, countObjects(t, lb), before)
	}
	storetest.Equal(t, storetest.ReadAll(t, r.engine, "orders-0", low), want[low:])
	m, _ := readManifest(ctx, lb, Location{"orders", 0}.ManifestKey("data"))
	if len(m.Objects) != before-sum.Expired || m.Objects[0].StartOffset != low {
		t.Fatalf("manifest after expiry: %d objects from %d", len(m.Objects), m.Objects[0].StartOffset)
	}
}

// The clean-up of interrupted uploads goes through the bucket's decorators
// (retries, metrics, faults) like every other call, and a failure of any
// step comes back typed, with its step and segment, in the run's summary
// and the job's counts.
func TestRunErrorsAreTypedAndCounted(t *testing.T) {
	ctx := context.Background()
	lb, _ := local.New(t.TempDir())
	fb := faulty.Wrap(lb)
	r := newRig(t, fb, t.TempDir())
	produce(t, r.engine, "orders-0", 30)
	s := firstSegment(t, r)
	fb.FailNth(objstore.OpUpload, 1, nil)
	fb.FailNth(objstore.OpSweep, 1, nil)
	sum, err := r.job.Run(ctx)
	if err != nil {
		t.Fatal(err)
	}
	if fb.Calls(objstore.OpSweep) != 1 {
		t.Fatalf("the sweep of staged uploads reached the decorated bucket %d times, want 1", fb.Calls(objstore.OpSweep))
	}
	var up, sweep *RunError
	for i := range sum.Errors {
		switch e := &sum.Errors[i]; e.Step {
		case StepUpload:
			up = e
		case StepSweep:
			sweep = e
		}
	}
	if up == nil || up.Shard != "orders-0" || up.Segment != s.No || !errors.Is(up, faulty.ErrInjected) {
		t.Fatalf("the failed upload is reported as %+v", up)
	}
	if sweep == nil || !errors.Is(sweep, faulty.ErrInjected) {
		t.Fatalf("the failed sweep is reported as %+v", sweep)
	}
	if got := r.job.Failures(); got[StepUpload] != 1 || got[StepSweep] != 1 {
		t.Fatalf("failures counted %v", got)
	}
	// The next run resumes the interrupted upload, cleaning up after it first.
	if sum, err := r.job.Run(ctx); err != nil || len(sum.Errors) > 0 || len(sum.Uploaded) == 0 {
		t.Fatalf("the run after the failures: %v %v", err, sum.Errors)
	}
}
