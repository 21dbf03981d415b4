package segment

import (
	"fmt"
	"os"
	"path/filepath"
	"sort"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/cockroachdb/datadriven"
	"github.com/cockroachdb/pebble/vfs"

	"strata/engine/record"
	"strata/engine/store"
)

// TestSyncOrder runs the scripts in testdata/syncorder: each command drives
// the engine, and its expected output is the list of file operations it
// made, in order, so a review sees the order of writes, fsyncs, renames
// and directory syncs (as Pebble's own tests do). Paths are relative to the
// data folder. The two Pebble databases are collapsed to one line per
// synced commit ("manifest: sync", "index: sync": an fsync of their WAL);
// their other file operations are left out. Run with -rewrite to
// regenerate the expected output, then read it.
//
// Commands:
//
//	open [fsync=batch|none] [max-segment-bytes=N]   (Open; recovery's operations)
//	create shard=S                                   (CreateShard)
//	append shard=S records=N                         (one Append of N records)
//	roll shard=S                                     (RollAt the shard's high watermark)
//	delete-before shard=S offset=N                   (DeleteBefore)
//	retain [max-bytes=N]                             (ApplyRetention)
//	drop-local shard=S segment=N                     (DropLocal)
//	delete shard=S                                   (DeleteShard)
//	set-high-watermark shard=S offset=N              (SetHighWatermark)
//	truncate-to shard=S offset=N                     (TruncateTo)
//	assign-epoch shard=S epoch=E offset=N            (AssignEpoch)
//	epochs shard=S            (LeaderEpochs; no file operations)
//	close                                            (Close)
//	garbage shard=S bytes=N   (appends N bytes to the active segment behind the engine's back, after a close: a torn tail)
//	orphan shard=S segment=N (writes the segment's file behind the engine's back, after a close: a removal a crash undid)
//	read shard=S              (the offsets and values a read returns; no file operations)
//	files                     (the segment files and tombstones on disk, with sizes)
func TestSyncOrder(t *testing.T) {
	datadriven.Walk(t, "testdata/syncorder", func(t *testing.T, path string) {
		h := &syncHarness{dir: t.TempDir()}
		h.fs = &recordingFS{FS: vfs.Default, root: h.dir}
		defer func() {
			if h.e != nil {
				h.e.Close()
			}
		}()
		datadriven.RunTest(t, path, h.run)
	})
}

type syncHarness struct {
	dir string
	fs  *recordingFS
	e   *Engine
	cfg Config
}

// syncClock is the engine's only clock in the scripts, so tombstone names
// (which hold a shard's creation time) are the same on every run.
var syncClock = time.Date(2026, 1, 2, 3, 4, 5, 0, time.UTC)

func (h *syncHarness) run(t *testing.T, d *datadriven.TestData) string {
	var shard string
	d.MaybeScanArgs(t, "shard", &shard)
	h.fs.take()
	var out []string
	fail := func(err error) {
		if err != nil {
			out = append(out, "error: "+err.Error())
		}
	}
	switch d.Cmd {
	case "open":
		fsync := "batch"
		d.MaybeScanArgs(t, "fsync", &fsync)
		h.cfg = testConfig(h.dir)
		h.cfg.Workers, h.cfg.FS, h.cfg.Fsync, h.cfg.IndexInterval = 1, h.fs, FsyncPolicy(fsync), 2
		h.cfg.Now = func() time.Time { return syncClock }
		d.MaybeScanArgs(t, "max-segment-bytes", &h.cfg.MaxSegmentBytes)
		h.cfg.RollCheckInterval = 1
		e, err := Open(h.cfg)
		fail(err)
		h.e = e
	case "create":
		fail(h.e.CreateShard(ctx, shard))
	case "append":
		var n int
		d.ScanArgs(t, "records", &n)
		_, high, _ := h.e.Watermarks(ctx, shard)
		recs := make([]record.Record, n)
		for i := range recs {
			recs[i] = record.Record{Value: []byte(fmt.Sprintf("value-%d", int(high)+i)), Timestamp: syncClock.UnixMilli()}
		}
		base, err := h.e.Append(ctx, shard, recs)
		fail(err)
		defer func() { out = append(out, fmt.Sprintf("-> base %d", base)) }()
	case "roll":
		_, high, _ := h.e.Watermarks(ctx, shard)
		fail(h.e.RollAt(ctx, shard, high))
	case "delete-before":
		var off uint64
		d.ScanArgs(t, "offset", &off)
		fail(h.e.DeleteBefore(ctx, shard, off))
	case "retain":
		var p RetentionPolicy
		d.MaybeScanArgs(t, "max-bytes", &p.MaxBytes)
		n, err := h.e.ApplyRetention(ctx, p, nil)
		fail(err)
		defer func() { out = append(out, fmt.Sprintf("-> %d segments deleted", n)) }()
	case "drop-local":
		var no uint64
		d.ScanArgs(t, "segment", &no)
		fail(h.e.DropLocal(ctx, shard, no))
	case "delete":
		fail(h.e.DeleteShard(ctx, shard))
	case "set-high-watermark":
		var off uint64
		d.ScanArgs(t, "offset", &off)
		fail(h.e.SetHighWatermark(ctx, shard, off))
	case "truncate-to":
		var off uint64
		d.ScanArgs(t, "offset", &off)
		fail(h.e.TruncateTo(ctx, shard, off))
	case "assign-epoch":
		var off uint64
		var epoch int
		d.ScanArgs(t, "offset", &off)
		d.ScanArgs(t, "epoch", &epoch)
		fail(h.e.AssignEpoch(ctx, shard, int32(epoch), off))
	case "epochs":
		es, err := h.e.LeaderEpochs(ctx, shard)
		fail(err)
		for _, e := range es {
			out = append(out, fmt.Sprintf("epoch %d from offset %d", e.Epoch, e.Start))
		}
		if len(es) == 0 {
			out = append(out, "no epochs")
		}
		return strings.Join(out, "\n")
	case "close":
		fail(h.e.Close())
		h.e = nil
	case "garbage":
		var n int
		d.ScanArgs(t, "bytes", &n)
		files, _ := filepath.Glob(filepath.Join(h.dir, shard, "*.msg"))
		sort.Slice(files, func(i, j int) bool {
			return len(files[i]) < len(files[j]) || len(files[i]) == len(files[j]) && files[i] < files[j]
		})
		f, err := os.OpenFile(files[len(files)-1], os.O_WRONLY|os.O_APPEND, 0)
		if err != nil {
			t.Fatal(err)
		}
		f.Write([]byte(strings.Repeat("\xff", n)))
		f.Close()
		return fmt.Sprintf("%d bytes appended to %s", n, h.fs.rel(files[len(files)-1]))
	case "orphan":
		var no int
		d.ScanArgs(t, "segment", &no)
		path := filepath.Join(h.dir, shard, fmt.Sprintf("%d.msg", no))
		if err := os.WriteFile(path, []byte("left behind"), 0o644); err != nil {
			t.Fatal(err)
		}
		return fmt.Sprintf("%s written", h.fs.rel(path))
	case "read":
		recs, err := h.e.Read(ctx, shard, 0, store.Budget{})
		fail(err)
		for _, r := range recs {
			out = append(out, fmt.Sprintf("%d %s", r.Offset, r.Value))
		}
		low, high, _ := h.e.Watermarks(ctx, shard)
		end, _ := h.e.LogEnd(ctx, shard)
		out = append(out, fmt.Sprintf("watermarks [%d, %d), log end %d", low, high, end))
		return strings.Join(out, "\n")
	case "files":
		filepath.Walk(h.dir, func(path string, info os.FileInfo, err error) error {
			rel := h.fs.rel(path)
			if err != nil || rel == "." || rel == "index" || rel == "manifest" || rel == "LOCK" {
				if info != nil && info.IsDir() && rel != "." {
					return filepath.SkipDir
				}
				return nil
			}
			if info.IsDir() {
				out = append(out, rel+"/")
			} else {
				out = append(out, fmt.Sprintf("%s %d", rel, info.Size()))
			}
			return nil
		})
		return strings.Join(out, "\n")
	default:
		t.Fatalf("%s: unknown command %q", d.Pos, d.Cmd)
	}
	return strings.Join(append(h.fs.take(), out...), "\n")
}

// recordingFS logs the write-side operations made through it, for
// TestSyncOrder. Reads, stats, listings and closes are not logged; a
// MkdirAll is logged only when it makes a folder.
type recordingFS struct {
	vfs.FS
	root string
	mu   sync.Mutex
	ops  []string
}

func (r *recordingFS) take() []string {
	r.mu.Lock()
	defer r.mu.Unlock()
	ops := r.ops
	r.ops = nil
	return ops
}

func (r *recordingFS) rel(path string) string {
	rel, err := filepath.Rel(r.root, path)
	if err != nil {
		return path
	}
	return rel
}

// db tells whether path is in one of the Pebble databases, and which.
func (r *recordingFS) db(path string) (string, bool) {
	first, _, _ := strings.Cut(r.rel(path), string(filepath.Separator))
	return first, first == "index" || first == "manifest"
}

func (r *recordingFS) log(path, format string, args ...any) {
	if _, ok := r.db(path); ok {
		return
	}
	r.mu.Lock()
	defer r.mu.Unlock()
	r.ops = append(r.ops, fmt.Sprintf(format, args...))
}

func (r *recordingFS) synced(path string) {
	if db, ok := r.db(path); ok {
		if strings.HasSuffix(path, ".log") { // the WAL: a synced commit
			r.mu.Lock()
			r.ops = append(r.ops, db+": sync")
			r.mu.Unlock()
		}
		return
	}
	r.log(path, "sync %s", r.rel(path))
}

func (r *recordingFS) Create(name string) (vfs.File, error) {
	r.log(name, "create %s", r.rel(name))
	f, err := r.FS.Create(name)
	return r.wrap(f, name, false), err
}

func (r *recordingFS) OpenReadWrite(name string, opts ...vfs.OpenOption) (vfs.File, error) {
	r.log(name, "open-read-write %s", r.rel(name))
	f, err := r.FS.OpenReadWrite(name, opts...)
	return r.wrap(f, name, false), err
}

// Open is not logged (reads are not ordered), but an fsync through what it
// opens is: the synced marks are fsynced so (syncFile).
func (r *recordingFS) Open(name string, opts ...vfs.OpenOption) (vfs.File, error) {
	f, err := r.FS.Open(name, opts...)
	return r.wrap(f, name, false), err
}

func (r *recordingFS) OpenDir(name string) (vfs.File, error) {
	f, err := r.FS.OpenDir(name)
	return r.wrap(f, name, true), err
}

func (r *recordingFS) MkdirAll(dir string, perm os.FileMode) error {
	if _, err := r.FS.Stat(dir); err != nil {
		r.log(dir, "mkdir %s", r.rel(dir))
	}
	return r.FS.MkdirAll(dir, perm)
}

func (r *recordingFS) Rename(oldname, newname string) error {
	r.log(oldname, "rename %s %s", r.rel(oldname), r.rel(newname))
	return r.FS.Rename(oldname, newname)
}

func (r *recordingFS) Remove(name string) error {
	r.log(name, "remove %s", r.rel(name))
	return r.FS.Remove(name)
}

func (r *recordingFS) RemoveAll(name string) error {
	if _, err := r.FS.Stat(name); err == nil {
		r.log(name, "remove-all %s", r.rel(name))
	}
	return r.FS.RemoveAll(name)
}

func (r *recordingFS) wrap(f vfs.File, name string, dir bool) vfs.File {
	if f == nil {
		return nil
	}
	return &recordingFile{File: f, fs: r, name: name, dir: dir}
}

type recordingFile struct {
	vfs.File
	fs   *recordingFS
	name string
	dir  bool
}

func (f *recordingFile) Write(p []byte) (int, error) {
	f.fs.log(f.name, "write %s %d", f.fs.rel(f.name), len(p))
	return f.File.Write(p)
}

func (f *recordingFile) WriteAt(p []byte, off int64) (int, error) {
	f.fs.log(f.name, "write-at %s %d %d", f.fs.rel(f.name), off, len(p))
	return f.File.WriteAt(p, off)
}

func (f *recordingFile) Sync() error {
	if f.dir {
		f.fs.log(f.name, "sync-dir %s", f.fs.rel(f.name))
	} else {
		f.fs.synced(f.name)
	}
	return f.File.Sync()
}

func (f *recordingFile) SyncData() error {
	f.fs.synced(f.name)
	return f.File.SyncData()
}

func (f *recordingFile) SyncTo(length int64) (bool, error) {
	f.fs.synced(f.name)
	return f.File.SyncTo(length)
}

func (f *recordingFile) Truncate(size int64) error {
	f.fs.log(f.name, "truncate %s %d", f.fs.rel(f.name), size)
	return truncateFile(f.File, size)
}
