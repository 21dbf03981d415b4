package segment

import (
	"bytes"
	"context"
	"errors"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"syscall"
	"testing"

	"github.com/cockroachdb/pebble/vfs"
	"github.com/cockroachdb/pebble/vfs/errorfs"

	"strata/engine/record"
	"strata/engine/store"
	"strata/engine/store/storetest"
)

var ctx = context.Background()

func fill(t *testing.T, e *Engine, shard string, n int) []record.Record {
	t.Helper()
	return fillAt(t, e, shard, 0, n)
}

// fillAt appends n records to shard, made (if it is not there) beginning
// at offset start, and returns them with the offsets they were given.
func fillAt(t *testing.T, e *Engine, shard string, start uint64, n int) []record.Record {
	t.Helper()
	if err := e.CreateShardAt(ctx, shard, start); err != nil && !errors.Is(err, store.ErrShardExists) {
		t.Fatal(err)
	}
	_, end, err := e.Watermarks(ctx, shard)
	if err != nil {
		t.Fatal(err)
	}
	recs := storetest.Records(n, 9)
	for i := 0; i < n; i += 5 { // several appends, so small segments roll
		if _, err := e.Append(ctx, shard, append([]record.Record(nil), recs[i:min(i+5, n)]...)); err != nil {
			t.Fatal(err)
		}
	}
	for i := range recs {
		recs[i].Offset = end + uint64(i)
	}
	return recs
}

// A crash mid-write leaves a damaged tail; recovery keeps every whole
// record before it, drops the rest, and appends continue from there.
func TestRecoveryTruncatesDamagedTail(t *testing.T) {
	for _, tc := range []struct {
		name   string
		damage func(data []byte) []byte
		keep   int // records that survive of 20
	}{
		{"clean", func(d []byte) []byte { return d }, 20},
		{"half a header appended", func(d []byte) []byte { return append(d, 0, 0, 0, 0, 0, 0, 0, 20, 0) }, 20},
		{"zeros appended (preallocated tail)", func(d []byte) []byte { return append(d, make([]byte, 4096)...) }, 20},
		{"last record cut short", func(d []byte) []byte { return d[:len(d)-3] }, 19},
		{"byte flipped in the last record", func(d []byte) []byte { d[len(d)-2] ^= 1; return d }, 19},
		{"a whole stale record repeated", func(d []byte) []byte { return append(d, d[:60]...) }, 20},
	} {
		t.Run(tc.name, func(t *testing.T) {
			cfg := testConfig(t.TempDir())
			e := open(t, cfg)
			want := fill(t, e, "c-0", 20)
			path := segmentPath(e.shards["c-0"].dir, 0)
			e.Close()
			data, _ := os.ReadFile(path)
			os.WriteFile(path, tc.damage(data), 0o644)

			e = open(t, cfg)
			defer e.Close()
			storetest.Equal(t, storetest.ReadAll(t, e, "c-0", 0), want[:tc.keep])
			base, err := e.Append(ctx, "c-0", storetest.Records(1, 3))
			if err != nil || base != uint64(tc.keep) {
				t.Fatalf("append after recovery: base %d, %v; want %d", base, err, tc.keep)
			}
			if got := storetest.ReadAll(t, e, "c-0", 0); len(got) != tc.keep+1 {
				t.Fatalf("after recovery and one append: %d records, want %d", len(got), tc.keep+1)
			}
		})
	}
}

// With the whole index gone, recovery rebuilds it from the segment files.
func TestIndexRebuiltFromData(t *testing.T) {
	cfg := testConfig(t.TempDir())
	cfg.MaxSegmentBytes, cfg.RollCheckInterval, cfg.IndexInterval = 4096, 10, 10
	e := open(t, cfg)
	var want []record.Record
	e.CreateShard(ctx, "i-0")
	for i := 0; i < 10; i++ {
		recs := storetest.Records(30, i)
		base, _ := e.Append(ctx, "i-0", append([]record.Record(nil), recs...))
		for j := range recs {
			recs[j].Offset = base + uint64(j)
		}
		want = append(want, recs...)
	}
	byKey, _ := e.ReadByKey(ctx, "i-0", []byte("key-4"), 0, store.Budget{})
	ts, _ := e.OffsetForTime(ctx, "i-0", want[150].Timestamp)
	e.Close()
	if err := os.RemoveAll(filepath.Join(cfg.Dir, "index")); err != nil {
		t.Fatal(err)
	}
	e = open(t, cfg)
	defer e.Close()
	storetest.Equal(t, storetest.ReadAll(t, e, "i-0", 0), want)
	storetest.Equal(t, storetest.ReadAll(t, e, "i-0", 137), want[137:])
	again, _ := e.ReadByKey(ctx, "i-0", []byte("key-4"), 0, store.Budget{})
	storetest.Equal(t, again, byKey)
	if got, _ := e.OffsetForTime(ctx, "i-0", want[150].Timestamp); got != ts {
		t.Fatalf("OffsetForTime after rebuild = %d, before %d", got, ts)
	}
}

// faults fails writes or fsyncs of segment files on demand, through
// errorfs on top of the real files. A failed write first appends a few
// bytes to the file, as a write the disk ran out of room in the middle of
// leaves part of its bytes behind.
type faults struct {
	mu        sync.Mutex
	failSync  bool
	failWrite error
}

func (f *faults) set(failSync bool, failWrite error) {
	f.mu.Lock()
	defer f.mu.Unlock()
	f.failSync, f.failWrite = failSync, failWrite
}

func (f *faults) fs() vfs.FS {
	return errorfs.Wrap(vfs.Default, errorfs.InjectorFunc(func(op errorfs.Op, path string) error {
		if !strings.HasSuffix(path, ".msg") {
			return nil
		}
		f.mu.Lock()
		defer f.mu.Unlock()
		switch {
		case op == errorfs.OpFileSync && f.failSync:
			return syscall.EIO
		case op == errorfs.OpFileWriteAt && f.failWrite != nil:
			if file, err := os.OpenFile(path, os.O_WRONLY|os.O_APPEND, 0); err == nil {
				file.Write([]byte("half a record"))
				file.Close()
			}
			return f.failWrite
		}
		return nil
	}))
}

// A full disk refuses the append, leaves no half record behind, and the
// shard takes writes again once there is room.
func TestFullDiskRefusesAndRecovers(t *testing.T) {
	var fs faults
	cfg := testConfig(t.TempDir())
	cfg.FS = fs.fs()
	e := open(t, cfg)
	defer e.Close()
	want := fill(t, e, "f-0", 10)
	size, _ := e.ActiveBytes("f-0")
	fs.set(false, syscall.ENOSPC)
	_, err := e.Append(ctx, "f-0", storetest.Records(5, 1))
	if !errors.Is(err, syscall.ENOSPC) || !strings.Contains(err.Error(), "f-0") {
		t.Fatalf("append on a full disk: %v; want ENOSPC naming the shard", err)
	}
	if st, err := os.Stat(segmentPath(e.shards["f-0"].dir, 0)); err != nil || st.Size() != size {
		t.Fatalf("after the refused append the file has %d bytes (%v), want %d: part of it is left", st.Size(), err, size)
	}
	fs.set(false, nil)
	more := storetest.Records(2, 2)
	base, err := e.Append(ctx, "f-0", append([]record.Record(nil), more...))
	if err != nil || base != 10 {
		t.Fatalf("append after room came back: base %d, %v; want 10", base, err)
	}
	for i := range more {
		more[i].Offset = 10 + uint64(i)
	}
	storetest.Equal(t, storetest.ReadAll(t, e, "f-0", 0), append(want, more...))
}

// A failed fsync is never acknowledged, and the shard refuses writes until
// a restart recovers it from what is on disk: nothing acknowledged is lost.
func TestFailedFsyncIsNeverAcknowledged(t *testing.T) {
	var fs faults
	cfg := testConfig(t.TempDir())
	cfg.FS = fs.fs()
	e := open(t, cfg)
	want := fill(t, e, "y-0", 10)
	fs.set(true, nil)
	if _, err := e.Append(ctx, "y-0", storetest.Records(5, 1)); !errors.Is(err, syscall.EIO) {
		t.Fatalf("append whose fsync failed: %v; want EIO", err)
	}
	fs.set(false, nil)
	if _, err := e.Append(ctx, "y-0", storetest.Records(1, 2)); err == nil || !strings.Contains(err.Error(), "refuses writes until restart") {
		t.Fatalf("append after a failed fsync: %v; want a refusal", err)
	}
	if _, high, _ := e.Watermarks(ctx, "y-0"); high != 10 {
		t.Fatalf("high watermark %d after a failed fsync, want 10 (nothing unacknowledged visible)", high)
	}
	e.Close()
	e = open(t, testConfig(cfg.Dir))
	defer e.Close()
	got := storetest.ReadAll(t, e, "y-0", 0)
	storetest.Equal(t, got[:10], want)
	if _, err := e.Append(ctx, "y-0", storetest.Records(1, 3)); err != nil {
		t.Fatalf("append after restart: %v", err)
	}
}

// Damage inside the active segment with whole records after it is not cut
// off at start: that would lose acknowledged records. The shard serves what
// comes before the damage, refuses writes with an error naming the repair,
// keeps the file as it was, and takes writes again once repaired.
func TestDamageInsideIsKeptForRepair(t *testing.T) {
	cfg := testConfig(t.TempDir())
	e := open(t, cfg)
	want := fill(t, e, "m-0", 20)
	path := segmentPath(e.shards["m-0"].dir, 0)
	e.Close()
	data, _ := os.ReadFile(path)
	var starts []int64
	for sc := NewScanner(path, bytes.NewReader(data), 0, int64(len(data)), nil); sc.Next(); {
		_, pos, _ := sc.Record()
		starts = append(starts, pos)
	}
	data[starts[8]+20] ^= 0xff // inside record 8, whole records after it
	os.WriteFile(path, data, 0o644)

	e = open(t, cfg)
	if got := e.Stats().Damaged.Load(); got != 1 {
		t.Fatalf("%d damaged shards counted, want 1", got)
	}
	storetest.Equal(t, storetest.ReadAll(t, e, "m-0", 0), want[:8])
	_, err := e.Append(ctx, "m-0", storetest.Records(1, 9))
	var d *DamagedError
	if !errors.As(err, &d) || !errors.Is(err, record.ErrCorrupt) || !strings.Contains(err.Error(), "strata segment repair") {
		t.Fatalf("append to a damaged shard: %v", err)
	}
	e.Close()
	if after, _ := os.ReadFile(path); !bytes.Equal(after, data) {
		t.Fatal("the damaged file was changed before an operator chose to repair it")
	}

	e = open(t, cfg)
	defer e.Close()
	if err := e.Repair(ctx, "m-0"); err != nil {
		t.Fatal(err)
	}
	base, err := e.Append(ctx, "m-0", storetest.Records(1, 9))
	if err != nil || base != 8 {
		t.Fatalf("append after the repair: base %d, %v; want 8", base, err)
	}
	if got := storetest.ReadAll(t, e, "m-0", 0); len(got) != 9 {
		t.Fatalf("after the repair and one append: %d records, want 9", len(got))
	}
}
