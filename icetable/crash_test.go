package icetable

import (
	"context"
	"errors"
	"io"
	"path"
	"strings"
	"sync"
	"testing"

	"github.com/apache/iceberg-go/table"

	"strata/engine/record"
	"strata/tiering"
	"strata/tiering/objstore"
)

var errKilled = errors.New("killed")

// dieAt is the cold tier of a process that dies at one write of a commit:
// the first Upload or UploadIf of a file of the step's kind fails, before
// the write reaches the store or, with landed, after it did, as a kill -9
// (or a timeout) right after the request left would. Once it has died
// every later call fails too: a dead process does nothing more.
type dieAt struct {
	objstore.Bucket
	op     objstore.Op
	step   func(base string) bool
	landed bool
	skip   int // matching writes let through first

	mu   sync.Mutex
	dead bool
}

func (d *dieAt) hit(op objstore.Op, name string) bool {
	d.mu.Lock()
	defer d.mu.Unlock()
	if d.dead || op != d.op || !d.step(path.Base(name)) {
		return false
	}
	if d.skip > 0 {
		d.skip--
		return false
	}
	d.dead = true
	return true
}

func (d *dieAt) isDead() bool { d.mu.Lock(); defer d.mu.Unlock(); return d.dead }

func (d *dieAt) write(op objstore.Op, name string, do func() error) error {
	if d.isDead() {
		return errKilled
	}
	if !d.hit(op, name) {
		return do()
	}
	if d.landed {
		if err := do(); err != nil {
			return err
		}
	}
	return errKilled
}

func (d *dieAt) Upload(ctx context.Context, name string, r io.Reader) error {
	return d.write(objstore.OpUpload, name, func() error { return d.Bucket.Upload(ctx, name, r) })
}

func (d *dieAt) UploadIf(ctx context.Context, name string, r io.Reader, v objstore.Version) error {
	return d.write(objstore.OpUploadIf, name, func() error { return d.Bucket.UploadIf(ctx, name, r, v) })
}

func (d *dieAt) ReadVersioned(ctx context.Context, name string) ([]byte, objstore.Version, error) {
	if d.isDead() {
		return nil, "", errKilled
	}
	return d.Bucket.ReadVersioned(ctx, name)
}

// A commit can die at every step: writing the manifest, the manifest list,
// the metadata file, or the pointer swap, before its write landed or just
// after. In every case the table afterwards (a new process committing
// again, from the bucket alone) holds each tiered offset exactly once and
// nothing that was not tiered; a commit that died before its pointer swap
// landed left the table as it was.
func TestEveryCommitStepRecovers(t *testing.T) {
	manifest := func(b string) bool { return strings.HasSuffix(b, ".avro") && !strings.HasPrefix(b, "snap-") }
	manifestList := func(b string) bool { return strings.HasPrefix(b, "snap-") }
	// Not the table's first metadata file: the one a commit writes.
	metadata := func(b string) bool { return strings.HasSuffix(b, ".metadata.json") && !strings.HasPrefix(b, "00000-") }
	pointer := func(b string) bool { return b == hintName }
	// A Hadoop-style table's (hadoop.go): its first metadata file, v1,
	// is the table made; a commit's is the next v{N}.
	v1 := func(b string) bool { return b == "v1.metadata.json" }
	vN := func(b string) bool { return strings.HasSuffix(b, ".metadata.json") && b != "v1.metadata.json" }
	for _, tc := range []struct {
		name   string
		op     objstore.Op
		step   func(string) bool
		landed bool
		skip   int
		// snapshots: the table's after the crash (-1: no table yet)
		snapshots int
		hadoop    bool
	}{
		{"hadoop: dies creating the table", objstore.OpUploadIf, v1, false, 0, -1, true},
		{"hadoop: dies after creating the table, before its hint", objstore.OpUploadIf, v1, true, 0, 0, true},
		{"hadoop: dies writing the manifest list", objstore.OpUpload, manifestList, false, 0, 0, true},
		{"hadoop: dies writing the metadata", objstore.OpUploadIf, vN, false, 0, 0, true},
		{"hadoop: dies after writing the metadata, before the hint", objstore.OpUploadIf, vN, true, 0, 1, true},
		{"hadoop: dies writing the hint", objstore.OpUpload, pointer, false, 1, 1, true},
		{"dies creating the table, before its pointer", objstore.OpUploadIf, pointer, false, 0, -1, false},
		{"dies writing the manifest", objstore.OpUpload, manifest, false, 0, 0, false},
		{"dies after writing the manifest", objstore.OpUpload, manifest, true, 0, 0, false},
		{"dies writing the manifest list", objstore.OpUpload, manifestList, false, 0, 0, false},
		{"dies after writing the manifest list", objstore.OpUpload, manifestList, true, 0, 0, false},
		{"dies writing the metadata", objstore.OpUpload, metadata, false, 0, 0, false},
		{"dies after writing the metadata", objstore.OpUpload, metadata, true, 0, 0, false},
		// skip 1: the table's creation swaps the pointer first.
		{"dies swapping the pointer", objstore.OpUploadIf, pointer, false, 1, 0, false},
		{"dies after swapping the pointer (result unknown)", objstore.OpUploadIf, pointer, true, 1, 1, false},
	} {
		t.Run(tc.name, func(t *testing.T) {
			ctx := context.Background()
			bucket, dir := localBucket(t)
			r := newRig(t, bucket, dir)
			r.job.Tables = nil // the commit below is the one that dies
			produced := map[string][]record.Record{
				"orders-0": produce(t, r.engine, "orders-0", 14, 0),
				"orders-1": produce(t, r.engine, "orders-1", 14, 100),
			}
			tiered := map[string]uint64{}
			r.run(t, tiered)

			dying := &Tables{Bucket: &dieAt{Bucket: bucket, op: tc.op, step: tc.step, landed: tc.landed, skip: tc.skip}, Prefix: "data", Location: dir, Log: quiet, Hadoop: tc.hadoop}
			err := dying.CommitTables(ctx, map[string]uint64{"orders-0": 0, "orders-1": 0})
			// A Hadoop-style table's hint is written after the commit has
			// landed, and failing to write it fails nothing.
			if hintAfter := tc.hadoop && tc.op == objstore.OpUpload && tc.skip == 1; hintAfter && err != nil {
				t.Fatalf("the commit whose hint was not written: %v, want it landed", err)
			} else if !hintAfter && !errors.Is(err, errKilled) {
				t.Fatalf("the dying commit: %v, want it killed", err)
			}
			fresh := &Tables{Bucket: bucket, Prefix: "data", Location: dir, Log: quiet, Hadoop: tc.hadoop}
			if tc.snapshots >= 0 {
				tbl, _, err := fresh.load(ctx, "orders")
				if err != nil {
					t.Fatalf("after the crash: %v", err)
				}
				if n := len(tbl.Metadata().Snapshots()); n != tc.snapshots {
					t.Fatalf("after the crash the table has %d snapshots, want %d", n, tc.snapshots)
				}
			} else if _, _, err := fresh.load(ctx, "orders"); !errors.Is(err, errNoTable) {
				t.Fatalf("after the crash: %v, want no table yet", err)
			}

			if err := fresh.CommitTables(ctx, map[string]uint64{"orders-0": 0, "orders-1": 0}); err != nil {
				t.Fatal(err)
			}
			rows, tbl := scan(t, fresh, "orders", 0, 1)
			for p, shard := range []string{"orders-0", "orders-1"} {
				sameRecords(t, shard, rows[int32(p)], produced[shard][:tiered[shard]])
			}
			if n := len(tbl.Metadata().Snapshots()); n != 1 {
				t.Fatalf("the table has %d snapshots, want the one commit", n)
			}
		})
	}
}

// Another node commits the table between this commit's read of the
// pointer and its swap: the swap (the bucket's conditional write, or the
// catalog row's compare-and-swap) fails, the commit plans again from the
// table the other node left, and adds nothing twice.
func TestACommitThatLosesTheRacePlansAgain(t *testing.T) {
	for _, p := range pointers(t) {
		t.Run(p.name, func(t *testing.T) {
			ctx := context.Background()
			bucket, dir := localBucket(t)
			r := newRig(t, bucket, dir)
			r.job.Tables = nil
			produced := map[string][]record.Record{"orders-0": produce(t, r.engine, "orders-0", 14, 0)}
			tiered := map[string]uint64{}
			r.run(t, tiered)
			other := p.open(t, bucket, dir)
			if _, err := other.loadOrCreate(ctx, "orders"); err != nil {
				t.Fatal(err)
			}
			raced := false
			slow := &raceAt{Bucket: bucket, before: func() {
				if !raced {
					raced = true
					if _, err := other.Commit(ctx, "orders", map[int32]uint64{0: 0}); err != nil {
						t.Errorf("the other node's commit: %v", err)
					}
				}
			}}
			mine := p.open(t, slow, dir)
			plan, err := mine.Commit(ctx, "orders", map[int32]uint64{0: 0})
			if err != nil || !raced {
				t.Fatalf("commit: %v (raced: %v)", err, raced)
			}
			if len(plan.Add) != 0 {
				t.Fatalf("planned again after losing, it still adds %d files", len(plan.Add))
			}
			rows, tbl := scan(t, mine, "orders", 0)
			sameRecords(t, "orders-0", rows[0], produced["orders-0"][:tiered["orders-0"]])
			if n := len(tbl.Metadata().Snapshots()); n != 1 {
				t.Fatalf("the table has %d snapshots, want the other node's one", n)
			}
		})
	}
}

// raceAt runs before just before each commit's metadata file is written,
// which is before the commit swaps the pointer.
type raceAt struct {
	objstore.Bucket
	before func()
}

func (r *raceAt) Upload(ctx context.Context, name string, rd io.Reader) error {
	r.at(name)
	return r.Bucket.Upload(ctx, name, rd)
}

// UploadIf is where a Hadoop-style table's metadata file is written.
func (r *raceAt) UploadIf(ctx context.Context, name string, rd io.Reader, match objstore.Version) error {
	r.at(name)
	return r.Bucket.UploadIf(ctx, name, rd, match)
}

func (r *raceAt) at(name string) {
	if b := path.Base(name); strings.HasSuffix(b, ".metadata.json") && !strings.HasPrefix(b, "00000-") && b != "v1.metadata.json" {
		r.before()
	}
}

// A delete commit (a new log start inside a kept file, and files wholly
// below it) can die at every step too: writing the position-delete file,
// the manifests, the manifest list, the metadata or the pointer, before or
// after the write landed. In every case the table afterwards names only
// files in the bucket, and once a new process commits again it holds
// exactly the records from the log start on; the retried commit after one
// that landed adds no snapshot.
func TestEveryDeleteCommitStepRecovers(t *testing.T) {
	posDeletes := func(b string) bool { return strings.HasSuffix(b, ".parquet") }
	manifest := func(b string) bool { return strings.HasSuffix(b, ".avro") && !strings.HasPrefix(b, "snap-") }
	manifestList := func(b string) bool { return strings.HasPrefix(b, "snap-") }
	metadata := func(b string) bool { return strings.HasSuffix(b, ".metadata.json") }
	pointer := func(b string) bool { return b == hintName }
	for _, tc := range []struct {
		name   string
		op     objstore.Op
		step   func(string) bool
		landed bool
		// applied: the crashed commit landed (the pointer was swapped)
		applied bool
	}{
		{"dies writing the position-delete file", objstore.OpUpload, posDeletes, false, false},
		{"dies after writing the position-delete file", objstore.OpUpload, posDeletes, true, false},
		{"dies writing a manifest", objstore.OpUpload, manifest, false, false},
		{"dies after writing a manifest", objstore.OpUpload, manifest, true, false},
		{"dies writing the manifest list", objstore.OpUpload, manifestList, false, false},
		{"dies after writing the manifest list", objstore.OpUpload, manifestList, true, false},
		{"dies writing the metadata", objstore.OpUpload, metadata, false, false},
		{"dies after writing the metadata", objstore.OpUpload, metadata, true, false},
		{"dies swapping the pointer", objstore.OpUploadIf, pointer, false, false},
		{"dies after swapping the pointer (result unknown)", objstore.OpUploadIf, pointer, true, true},
	} {
		t.Run(tc.name, func(t *testing.T) {
			ctx := context.Background()
			bucket, dir := localBucket(t)
			r := newRig(t, bucket, dir)
			produced := produce(t, r.engine, "orders-0", 30, 0)
			tiered := map[string]uint64{}
			r.run(t, tiered)
			fresh := &Tables{Bucket: bucket, Prefix: "data", Location: dir, Log: quiet}
			tbl, _, err := fresh.load(ctx, "orders")
			if err != nil {
				t.Fatal(err)
			}
			snapshots := len(tbl.Metadata().Snapshots())
			m, err := tiering.ReadManifest(ctx, bucket, "data/topic=orders/partition=0/_strata_manifest.json")
			if err != nil || len(m.Objects) < 3 {
				t.Fatalf("manifest: %v, %d objects; want 3 or more", err, len(m.Objects))
			}
			cut := m.Objects[1].StartOffset + 5 // past the first object, inside the second

			dying := &Tables{Bucket: &dieAt{Bucket: bucket, op: tc.op, step: tc.step, landed: tc.landed}, Prefix: "data", Location: dir, Log: quiet}
			if err := dying.RemoveBelow(ctx, "orders-0", cut); !errors.Is(err, errKilled) {
				t.Fatalf("the dying delete commit: %v, want it killed", err)
			}
			everyFileExists(t, bucket, fresh, "orders")
			want := snapshots
			if tc.applied {
				want++
			}
			if tbl, _, err = fresh.load(ctx, "orders"); err != nil || len(tbl.Metadata().Snapshots()) != want {
				t.Fatalf("after the crash: %v; want %d snapshots", err, want)
			}

			if err := fresh.RemoveBelow(ctx, "orders-0", cut); err != nil {
				t.Fatal(err)
			}
			rows, tbl := scan(t, fresh, "orders", 0)
			sameRecords(t, "orders-0", rows[0], produced[cut:tiered["orders-0"]])
			cur := tbl.CurrentSnapshot()
			if ids := removals(tbl); len(ids) != 1 || ids[0] != cur.SnapshotID {
				t.Fatalf("the snapshots removing files are %v, want the one delete, the current %d", ids, cur.SnapshotID)
			}
			// A replayed delete is a no-op.
			if err := fresh.RemoveBelow(ctx, "orders-0", cut); err != nil {
				t.Fatal(err)
			}
			if _, tbl = scan(t, fresh, "orders", 0); tbl.CurrentSnapshot().SnapshotID != cur.SnapshotID {
				t.Fatalf("a replayed delete made a snapshot")
			}
			everyFileExists(t, bucket, fresh, "orders")
		})
	}
}

// removals is the ids of the table's snapshots that removed data files.
func removals(tbl *table.Table) []int64 {
	var out []int64
	for _, s := range tbl.Metadata().Snapshots() {
		if removesFiles(s) {
			out = append(out, s.SnapshotID)
		}
	}
	return out
}
