package segment

import (
	"context"
	"encoding/binary"
	"errors"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"sort"
	"strings"
	"sync/atomic"
	"syscall"
	"testing"
	"time"

	"github.com/cockroachdb/pebble"
	"github.com/cockroachdb/pebble/vfs"
	"github.com/cockroachdb/pebble/vfs/errorfs"

	"strata/engine/index"
	"strata/engine/record"
	"strata/engine/store"
	"strata/engine/store/storetest"
)

// A request holding a record over record.MaxSize is refused whole: none of
// its records is written or indexed, later appends take its offsets, and
// the shard reopens.
func TestOversizeRecordLeavesNoTrace(t *testing.T) {
	cfg := testConfig(t.TempDir())
	cfg.IndexInterval = 1
	e := open(t, cfg)
	want := fill(t, e, "big-0", 3)
	bad := []record.Record{{Key: []byte("ghost"), Value: []byte("small"), Tags: []string{"ghost"}}, {Value: make([]byte, record.MaxSize)}}
	if _, err := e.Append(ctx, "big-0", bad); err == nil || !strings.Contains(err.Error(), "more than the") {
		t.Fatalf("append of an oversize record: %v; want a refusal naming the limit", err)
	}
	more := storetest.Records(4, 9)
	if base, err := e.Append(ctx, "big-0", append([]record.Record(nil), more...)); err != nil || base != 3 {
		t.Fatalf("append after the refusal: base %d, %v; want 3", base, err)
	}
	for i := range more {
		more[i].Offset = 3 + uint64(i)
	}
	want = append(want, more...)
	check := func(e *Engine) {
		t.Helper()
		storetest.Equal(t, storetest.ReadAll(t, e, "big-0", 0), want)
		for _, off := range []uint64{3, 4, 6} {
			recs, err := e.Read(ctx, "big-0", off, store.Budget{MaxRecords: 1})
			if err != nil || len(recs) != 1 || recs[0].Offset != off {
				t.Fatalf("read at %d: %v, %v", off, recs, err)
			}
		}
		if got, err := e.ReadByKey(ctx, "big-0", []byte("ghost"), 0, store.Budget{}); err != nil || len(got) != 0 {
			t.Fatalf("the refused record's key finds %d records (%v)", len(got), err)
		}
		if got, err := e.ReadByTag(ctx, "big-0", "ghost", 0, store.Budget{}); err != nil || len(got) != 0 {
			t.Fatalf("the refused record's tag finds %d records (%v)", len(got), err)
		}
	}
	check(e)
	e.Close()
	e = open(t, cfg)
	defer e.Close()
	check(e)
}

// blockFS, once armed, holds the next write of a segment file until
// released (errorfs calls its injector before the operation, and the
// injector waits), so a test can queue requests behind it and have the
// worker take them in one batch.
type blockFS struct {
	vfs.FS
	armed   atomic.Bool
	entered chan struct{}
	release chan struct{}
}

func armedBlockFS() *blockFS {
	f := &blockFS{entered: make(chan struct{}), release: make(chan struct{})}
	f.FS = errorfs.Wrap(vfs.Default, errorfs.InjectorFunc(func(op errorfs.Op, path string) error {
		if op == errorfs.OpFileWriteAt && strings.HasSuffix(path, ".msg") && f.armed.CompareAndSwap(true, false) {
			close(f.entered)
			<-f.release
		}
		return nil
	}))
	f.armed.Store(true)
	return f
}

// An append and the shard's deletion taken by the worker in one batch: the
// append is refused (its shard is gone), nothing crashes, and a shard
// created again under the name starts empty.
func TestDeleteInTheSameBatchAsAnAppend(t *testing.T) {
	fs := armedBlockFS()
	cfg := testConfig(t.TempDir())
	cfg.Workers = 1
	cfg.FS = fs
	e := open(t, cfg)
	defer e.Close()
	for _, s := range []string{"a-0", "d-0"} {
		if err := e.CreateShard(ctx, s); err != nil {
			t.Fatal(err)
		}
	}
	first := make(chan error, 1)
	go func() { _, err := e.Append(ctx, "a-0", storetest.Records(1, 1)); first <- err }()
	<-fs.entered // the worker is inside a-0's write
	queued := make(chan error, 1)
	go func() { _, err := e.Append(ctx, "d-0", storetest.Records(2, 2)); queued <- err }()
	waitQueued(t, e, 1)
	deleted := make(chan error, 1)
	go func() { deleted <- e.DeleteShard(ctx, "d-0") }()
	waitQueued(t, e, 2)
	close(fs.release)
	if err := <-first; err != nil {
		t.Fatalf("the blocked append: %v", err)
	}
	if err := <-queued; !errors.Is(err, store.ErrUnknownShard) {
		t.Fatalf("an append batched with its shard's deletion: %v; want ErrUnknownShard", err)
	}
	if err := <-deleted; err != nil {
		t.Fatalf("delete: %v", err)
	}
	if err := e.CreateShard(ctx, "d-0"); err != nil {
		t.Fatal(err)
	}
	if low, high, _ := e.Watermarks(ctx, "d-0"); low != 0 || high != 0 {
		t.Fatalf("re-created shard has watermarks %d-%d, want empty", low, high)
	}
}

func waitQueued(t *testing.T, e *Engine, n int) {
	t.Helper()
	for deadline := time.Now().Add(10 * time.Second); len(e.workers[0].ch) < n; {
		if time.Now().After(deadline) {
			t.Fatalf("%d requests queued, want %d", len(e.workers[0].ch), n)
		}
		time.Sleep(time.Millisecond)
	}
}

// CreateShard of a name being deleted waits for the deletion, then starts
// empty; what it acknowledges survives a restart.
func TestCreateWaitsForARacingDelete(t *testing.T) {
	fs := armedBlockFS()
	fs.armed.Store(false)
	cfg := testConfig(t.TempDir())
	cfg.Workers = 1
	cfg.FS = fs
	e := open(t, cfg)
	fill(t, e, "r-0", 5)
	if err := e.CreateShard(ctx, "x-0"); err != nil {
		t.Fatal(err)
	}
	fs.armed.Store(true)
	blocked := make(chan error, 1)
	go func() { _, err := e.Append(ctx, "x-0", storetest.Records(1, 1)); blocked <- err }()
	<-fs.entered // the only worker is busy: the deletion waits behind it
	deleted := make(chan error, 1)
	go func() { deleted <- e.DeleteShard(ctx, "r-0") }()
	waitQueued(t, e, 1)
	created := make(chan error, 1)
	go func() { created <- e.CreateShard(ctx, "r-0") }()
	select {
	case err := <-created:
		t.Fatalf("CreateShard returned (%v) while the old shard's deletion was still under way", err)
	case <-time.After(50 * time.Millisecond):
	}
	close(fs.release)
	for _, ch := range []chan error{blocked, deleted, created} {
		if err := <-ch; err != nil {
			t.Fatal(err)
		}
	}
	want := storetest.Records(1, 7)
	if base, err := e.Append(ctx, "r-0", want); err != nil || base != 0 {
		t.Fatalf("first append to the re-created shard: base %d, %v", base, err)
	}
	e.Close()
	e = open(t, testConfig(cfg.Dir))
	defer e.Close()
	storetest.Equal(t, storetest.ReadAll(t, e, "r-0", 0), want)
}

// A folder an earlier shard left behind (its removal failed) never becomes
// the new shard's data.
func TestCreateIgnoresAStaleFolder(t *testing.T) {
	cfg := testConfig(t.TempDir())
	old := open(t, testConfig(t.TempDir()))
	fill(t, old, "s-0", 20)
	old.Close()
	if err := os.CopyFS(filepath.Join(cfg.Dir, "s-0"), os.DirFS(filepath.Join(old.cfg.Dir, "s-0"))); err != nil {
		t.Fatal(err)
	}
	e := open(t, cfg)
	if err := e.CreateShard(ctx, "s-0"); err != nil {
		t.Fatal(err)
	}
	if _, high, _ := e.Watermarks(ctx, "s-0"); high != 0 {
		t.Fatalf("new shard over a stale folder has high watermark %d, want 0", high)
	}
	want := storetest.Records(2, 3)
	e.Append(ctx, "s-0", want)
	e.Close()
	e = open(t, cfg)
	defer e.Close()
	storetest.Equal(t, storetest.ReadAll(t, e, "s-0", 0), want)
}

// A second process on the same data folder is refused with a message
// naming the folder; the first keeps working.
func TestSecondOpenIsRefused(t *testing.T) {
	cfg := testConfig(t.TempDir())
	e := open(t, cfg)
	defer e.Close()
	if _, err := Open(cfg); err == nil || !strings.Contains(err.Error(), "in use by another strata process") {
		t.Fatalf("second open of %s: %v; want a refusal", cfg.Dir, err)
	}
	fill(t, e, "l-0", 1)
}

// The steps of shard creation and deletion, in order; the lifecycle crash
// test kills a process at each.
var lifecycleSteps = []string{"create:manifest", "create:mkdir", "create:segment",
	"delete:closed", "delete:tombstone", "delete:index", "delete:manifest", "delete:listeners"}

// lifecycleChild runs in a child process: it fills "old-0", then deletes and
// re-creates it, killing itself with SIGKILL at the step named.
func lifecycleChild(dir, step string) {
	dieAt(step)
	e, err := Open(testConfig(dir))
	if err == nil {
		err = e.DeleteShard(ctx, "old-0")
	}
	if err == nil {
		err = e.CreateShard(ctx, "old-0")
	}
	fmt.Fprintln(os.Stderr, "the child finished without reaching", step, err)
	os.Exit(3)
}

// Kill the process at every step of deleting a shard and creating one of
// the same name: after a restart the shard is either whole (the deletion
// never took) or gone, a shard created again is empty, and no byte of the
// old one is served.
func TestShardLifecycleCrashAtEveryStep(t *testing.T) {
	for _, step := range lifecycleSteps {
		t.Run(step, func(t *testing.T) {
			dir := t.TempDir()
			e := open(t, testConfig(dir))
			old := fill(t, e, "old-0", 50)
			e.Close()
			runKilled(t, "STRATA_LIFECYCLE_DIR="+dir, "STRATA_LIFECYCLE_STEP="+step)
			var told []string
			cfg := testConfig(dir)
			cfg.Events.ShardDeleted = func(_ context.Context, shard string, _ time.Time) error { told = append(told, shard); return nil }
			e = open(t, cfg)
			// A deletion the crash interrupted after the folder was buried is
			// finished at the start, listeners told once.
			if interrupted := strings.HasPrefix(step, "delete:") && step != "delete:closed"; interrupted != (len(told) == 1) || len(told) > 1 {
				t.Fatalf("after a crash at %s the listeners were told %v", step, told)
			}
			_, high, err := e.Watermarks(ctx, "old-0")
			switch {
			case errors.Is(err, store.ErrUnknownShard):
				if err := e.CreateShard(ctx, "old-0"); err != nil {
					t.Fatalf("creating the shard again: %v", err)
				}
			case err != nil:
				t.Fatal(err)
			case high == 50:
				storetest.Equal(t, storetest.ReadAll(t, e, "old-0", 0), old) // the deletion never took
				return
			case high != 0:
				t.Fatalf("after a crash at %s the shard has %d records: neither the old 50 nor empty", step, high)
			}
			if got := storetest.ReadAll(t, e, "old-0", 0); len(got) != 0 {
				t.Fatalf("after a crash at %s the re-created shard serves %d old records", step, len(got))
			}
			want := storetest.Records(3, 11)
			if base, err := e.Append(ctx, "old-0", want); err != nil || base != 0 {
				t.Fatalf("append to the re-created shard: base %d, %v", base, err)
			}
			e.Close()
			e = open(t, testConfig(dir))
			defer e.Close()
			storetest.Equal(t, storetest.ReadAll(t, e, "old-0", 0), want)
			if ents, _ := os.ReadDir(filepath.Join(dir, tombstones)); len(ents) != 0 {
				t.Fatalf("tombstones left after recovery: %v", ents)
			}
		})
	}
}

// An offset-index entry that points at no record (left by a write that
// failed after its entries were batched, in older versions) does not stop
// the start: the segment's entries are rebuilt from its data.
func TestStaleIndexEntryIsRebuilt(t *testing.T) {
	cfg := testConfig(t.TempDir())
	e := open(t, cfg)
	want := fill(t, e, "x-0", 50)
	var g index.OffsetGroup
	g.Add(30, 0, 7)
	if err := e.index.Set(index.OffsetKey("x-0", 30), g.Value(), pebble.Sync); err != nil {
		t.Fatal(err)
	}
	e.Close()
	e = open(t, cfg)
	defer e.Close()
	storetest.Equal(t, storetest.ReadAll(t, e, "x-0", 0), want)
	recs, err := e.Read(ctx, "x-0", 35, store.Budget{MaxRecords: 1})
	if err != nil || len(recs) != 1 || recs[0].Offset != 35 {
		t.Fatalf("read at 35 after the rebuild: %v, %v", recs, err)
	}
}

// An index of the first offset format (a key per point, docs/indexes.md)
// opens: its points are dropped and the offset index is rebuilt from the
// data, and reads at every offset find their record.
func TestOffsetIndexV1IsRebuilt(t *testing.T) {
	cfg := testConfig(t.TempDir())
	cfg.IndexInterval = 7
	cfg.MaxSegmentBytes = 4096
	cfg.RollCheckInterval = 5
	e := open(t, cfg)
	want := fill(t, e, "x-0", 300)
	if len(e.shards["x-0"].segments) < 3 {
		t.Fatalf("want several segments, have %d", len(e.shards["x-0"].segments))
	}
	// Rewrite the offset index as the first format had it: one key
	// ('o', shard, 0x00, offset u64) per point, valued uvarint segment
	// no and uvarint byte position.
	p := index.Prefix(index.KindOffset, "x-0")
	b := e.index.NewBatch()
	b.DeleteRange(p, index.UpperBound(p), nil)
	for _, s := range e.shards["x-0"].segments {
		var pos int64
		for off := s.start; off < s.next; off++ {
			if off == s.start || (off-s.start)%7 == 0 {
				k := binary.BigEndian.AppendUint64(index.Prefix(index.KindOffsetV1, "x-0"), off)
				v := binary.AppendUvarint(binary.AppendUvarint(nil, s.no), uint64(pos))
				b.Set(k, v, nil)
			}
			recs, err := e.Read(ctx, "x-0", off, store.Budget{MaxRecords: 1})
			if err != nil || len(recs) != 1 {
				t.Fatalf("read at %d: %v", off, err)
			}
			pos += int64(record.Size(&recs[0]))
		}
	}
	if err := b.Commit(pebble.Sync); err != nil {
		t.Fatal(err)
	}
	e.Close()
	e = open(t, cfg)
	defer e.Close()
	if v1, err := index.HasOffsetsV1(e.index, "x-0"); err != nil || v1 {
		t.Fatalf("first-format points left after the start: %v, %v", v1, err)
	}
	if _, _, _, ok, err := index.FloorOffset(e.index, "x-0", 299); err != nil || !ok {
		t.Fatalf("no offset index after the start: %v, %v", ok, err)
	}
	storetest.Equal(t, storetest.ReadAll(t, e, "x-0", 0), want)
	for off := uint64(0); off < 300; off++ {
		recs, err := e.Read(ctx, "x-0", off, store.Budget{MaxRecords: 1})
		if err != nil || len(recs) != 1 || recs[0].Offset != off {
			t.Fatalf("read at %d after the rebuild: %v, %v", off, recs, err)
		}
	}
}

// With many points to a segment (several full groups) and segments rolling,
// every offset's floor point is the last point at or below it in its own
// segment, and it locates that point's record; after a restart (the
// groups then begin afresh) and more appends too.
func TestOffsetGroupsLocateEveryRecord(t *testing.T) {
	cfg := testConfig(t.TempDir())
	cfg.IndexInterval = 2
	cfg.MaxSegmentBytes = 40 << 10
	cfg.RollCheckInterval = 10
	e := open(t, cfg)
	fill(t, e, "g-0", 900)
	check := func(e *Engine, n uint64) {
		t.Helper()
		v, err := e.view("g-0")
		if err != nil {
			t.Fatal(err)
		}
		if len(v.segments) < 3 {
			t.Fatalf("want several segments, have %d", len(v.segments))
		}
		for off := uint64(0); off < n; off++ {
			at, seg, pos, ok, err := index.FloorOffset(e.index, "g-0", off)
			if err != nil || !ok {
				t.Fatalf("floor of %d: %v, %v", off, ok, err)
			}
			i := sort.Search(len(v.segments), func(i int) bool { return v.segments[i].start > off }) - 1
			s := v.segments[i]
			if seg != s.no || at < s.start || at > off || off-at >= 2 {
				t.Fatalf("floor of %d: point %d in segment %d, want one of the last 2 offsets at or below it in segment %d (from %d)", off, at, seg, s.no, s.start)
			}
			data, err := os.ReadFile(s.path)
			if err != nil {
				t.Fatal(err)
			}
			if got, _, err := record.Check(data[pos:]); err != nil || got != at {
				t.Fatalf("floor of %d: the point (%d at byte %d) holds offset %d, %v", off, at, pos, got, err)
			}
		}
	}
	check(e, 900)
	if groups, segs := countGroups(t, e, "g-0"), len(e.shards["g-0"].segments); groups < 2*segs {
		t.Fatalf("%d groups over %d segments: want segments of several full groups", groups, segs)
	}
	e.Close()
	e = open(t, cfg)
	defer e.Close()
	fill(t, e, "g-0", 300)
	check(e, 1200)
}

func countGroups(t *testing.T, e *Engine, shard string) int {
	p := index.Prefix(index.KindOffset, shard)
	it, err := e.index.NewIter(&pebble.IterOptions{LowerBound: p, UpperBound: index.UpperBound(p)})
	if err != nil {
		t.Fatal(err)
	}
	defer it.Close()
	n := 0
	for ok := it.First(); ok; ok = it.Next() {
		n++
	}
	return n
}

// runKilled runs this test binary as a child with env added (the child
// finds its step there and dies by SIGKILL at it) and fails the test
// unless the child died so.
func runKilled(t *testing.T, env ...string) {
	t.Helper()
	cmd := exec.Command(os.Args[0], "-test.run=^$")
	cmd.Env = append(os.Environ(), env...)
	out, err := cmd.CombinedOutput()
	if cmd.ProcessState == nil {
		t.Fatalf("the child (%s) did not start: %v", strings.Join(env, " "), err)
	}
	if st, ok := cmd.ProcessState.Sys().(syscall.WaitStatus); !ok || !st.Signaled() || st.Signal() != syscall.SIGKILL {
		t.Fatalf("the child (%s) did not die by SIGKILL: %v\n%s", strings.Join(env, " "), err, out)
	}
}

// dieAt makes this (child) process kill itself with SIGKILL at the crash
// point named step.
func dieAt(step string) {
	crashPoint = func(at string) {
		if at == step {
			syscall.Kill(os.Getpid(), syscall.SIGKILL)
			select {}
		}
	}
}
