package segment

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

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

// encodeAt encodes recs at offsets from first on, as the engine would
// have written them, and returns the bytes and the records so numbered.
func encodeAt(t testing.TB, recs []record.Record, first uint64) ([]byte, []record.Record) {
	t.Helper()
	var b []byte
	for i := range recs {
		recs[i].Offset = first + uint64(i)
		var err error
		if b, err = record.Append(b, &recs[i]); err != nil {
			t.Fatal(err)
		}
	}
	return b, recs
}

// A crash leaves bytes after the last fsync in any state: cut short,
// zeros, stale bytes, whole records, or (after a power cut, the pages of
// a write reaching the disk in any order) whole records after torn ones.
// None of it was acknowledged under fsync=batch, so recovery keeps the
// whole records up to the first bad one, cuts the rest, and appends go on
// from there, whatever the bytes after look like. Each case appends its
// tail to a segment whose 20 records were synced (a clean close).
func TestRecoveryCutsTornTail(t *testing.T) {
	for _, tc := range []struct {
		name string
		// tail is what a crash left after the synced bytes d, and how many
		// of the records it was written from (offsets 20 on) survive.
		tail func(t *testing.T, d []byte) ([]byte, []record.Record)
	}{
		{"clean", func(t *testing.T, d []byte) ([]byte, []record.Record) { return d, nil }},
		{"half a header", func(t *testing.T, d []byte) ([]byte, []record.Record) {
			return append(d, 0, 0, 0, 0, 0, 0, 0, 20, 0), nil
		}},
		{"zeros (a preallocated tail)", func(t *testing.T, d []byte) ([]byte, []record.Record) {
			return append(d, make([]byte, 4096)...), nil
		}},
		{"stale bytes that do not continue the log", func(t *testing.T, d []byte) ([]byte, []record.Record) {
			return append(d, d[:60]...), nil
		}},
		{"an unsynced record cut short", func(t *testing.T, d []byte) ([]byte, []record.Record) {
			b, _ := encodeAt(t, storetest.Records(1, 7), 20)
			return append(d, b[:len(b)-3]...), nil
		}},
		{"an unsynced record with a byte flipped", func(t *testing.T, d []byte) ([]byte, []record.Record) {
			b, _ := encodeAt(t, storetest.Records(1, 7), 20)
			b[len(b)-2] ^= 1
			return append(d, b...), nil
		}},
		{"unsynced whole records (a process killed after its write)", func(t *testing.T, d []byte) ([]byte, []record.Record) {
			b, recs := encodeAt(t, storetest.Records(5, 7), 20)
			return append(d, b...), recs
		}},
		{"a value holding a valid record, cut after it", func(t *testing.T, d []byte) ([]byte, []record.Record) {
			// A client may produce any bytes: here the next record's
			// encoding, as if the log went on after a torn record.
			inner, _ := encodeAt(t, storetest.Records(1, 8), 21)
			outer := storetest.Records(1, 7)
			outer[0].Value = append(append([]byte(nil), inner...), bytes.Repeat([]byte("p"), 100)...)
			b, _ := encodeAt(t, outer, 20)
			at := bytes.Index(b, inner)
			if _, _, err := record.Check(b[at:]); at < 0 || err != nil {
				t.Fatalf("the embedded record is not whole in the outer one: at %d, %v", at, err)
			}
			return append(d, b[:at+len(inner)+10]...), nil
		}},
		{"the unsynced write's second page lost, later pages kept", func(t *testing.T, d []byte) ([]byte, []record.Record) {
			recs := storetest.Records(80, 7)
			for i := range recs {
				recs[i].Value = bytes.Repeat([]byte{'v', byte(i)}, 100)
			}
			b, recs := encodeAt(t, recs, 20)
			out := append(append([]byte(nil), d...), b...)
			lost := (len(d)/4096 + 1) * 4096
			clear(out[lost : lost+4096])
			keep, end := 0, len(d)
			for _, r := range recs {
				if end += record.Size(&r); end > lost {
					break
				}
				keep++
			}
			if !hasRecordAt(out, lost+4096) {
				t.Fatal("no whole record after the lost page: the case shows nothing")
			}
			return out, recs[:keep]
		}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			cfg := testConfig(t.TempDir())
			e := open(t, cfg)
			want := fill(t, e, "c-0", 20)
			path := segmentPath(e.shards["c-0"].dir, 0)
			e.Close()
			data, _ := os.ReadFile(path)
			torn, kept := tc.tail(t, data)
			want = append(want, kept...)
			os.WriteFile(path, torn, 0o644)
			// The offline check, reading the synced mark, says the same.
			reps, err := VerifyDir(filepath.Dir(path), nil)
			if r := reps[0]; err != nil || r.Synced != int64(len(data)) || (r.Problem != nil && !r.TornTail) {
				t.Fatalf("verify: %v, synced mark %d, problem %v (torn tail: %v); want none or a torn tail past byte %d",
					err, r.Synced, r.Problem, r.TornTail, len(data))
			}

			e = open(t, cfg)
			defer e.Close()
			if n := e.Stats().Damaged.Load(); n != 0 {
				t.Fatalf("%d damaged shards after a torn tail, want 0", n)
			}
			var keptBytes int
			for _, r := range kept {
				keptBytes += record.Size(&r)
			}
			if cut, want := e.Stats().CutBytes.Load(), uint64(len(torn)-len(data)-keptBytes); cut != want {
				t.Fatalf("%d bytes counted cut, want %d", cut, want)
			}
			storetest.Equal(t, storetest.ReadAll(t, e, "c-0", 0), want)
			base, err := e.Append(ctx, "c-0", storetest.Records(1, 3))
			if err != nil || base != uint64(len(want)) {
				t.Fatalf("append after recovery: base %d, %v; want %d", base, err, len(want))
			}
			if got := storetest.ReadAll(t, e, "c-0", 0); len(got) != len(want)+1 {
				t.Fatalf("after recovery and one append: %d records, want %d", len(got), len(want)+1)
			}
		})
	}
}

// hasRecordAt reports whether a whole record starts somewhere in b from
// byte from on.
func hasRecordAt(b []byte, from int) bool {
	for i := from; i+record.HeaderSize <= len(b); i++ {
		if _, _, err := record.Check(b[i:]); err == nil {
			return true
		}
	}
	return false
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

// Damage to bytes that were on disk (before the synced mark) is not cut
// off at start, whether or not whole records follow it: the records it
// would cut were acknowledged. The shard serves what comes before the
// damage, refuses writes with an error naming where and the repair, keeps
// the file as it was (start after start), `strata segment verify` names
// the byte, and once repaired the shard takes writes again and stays
// healthy across a restart.
func TestDamageInSyncedDataIsKept(t *testing.T) {
	for _, tc := range []struct {
		name   string
		damage func(d []byte, starts []int64) []byte
		keep   int  // records before the damage
		next   bool // a whole record follows the damage
	}{
		{"a byte flipped inside record 8", func(d []byte, s []int64) []byte { d[s[8]+20] ^= 0xff; return d }, 8, true},
		{"the offset field of record 8 changed", func(d []byte, s []int64) []byte { d[s[8]+7] ^= 1; return d }, 8, true},
		{"a byte flipped in the last record", func(d []byte, s []int64) []byte { d[len(d)-2] ^= 1; return d }, 19, false},
		{"the last record cut short", func(d []byte, s []int64) []byte { return d[:len(d)-3] }, 19, false},
		// A whole file: only the synced mark shows the records missing.
		{"the last two records missing", func(d []byte, s []int64) []byte { return d[:s[18]] }, 18, false},
	} {
		t.Run(tc.name, func(t *testing.T) {
			cfg := testConfig(t.TempDir())
			e := open(t, cfg)
			want := fill(t, e, "m-0", 20)
			dir := e.shards["m-0"].dir
			path := segmentPath(dir, 0)
			e.Close()
			starts := recordStarts(t, path)
			data, _ := os.ReadFile(path)
			synced := int64(len(data))
			data = tc.damage(data, starts)
			os.WriteFile(path, data, 0o644)
			at := starts[tc.keep]

			for range 2 { // a second start finds the same
				e = open(t, cfg)
				if got := e.Stats().Damaged.Load(); got != 1 {
					t.Fatalf("%d damaged shards counted, want 1", got)
				}
				storetest.Equal(t, storetest.ReadAll(t, e, "m-0", 0), want[:tc.keep])
				_, err := e.Append(ctx, "m-0", storetest.Records(1, 9))
				var d *DamagedError
				if !errors.As(err, &d) || !errors.Is(err, record.ErrCorrupt) || d.Pos != at || (d.NextValid >= 0) != tc.next ||
					!strings.Contains(err.Error(), fmt.Sprintf("damaged at byte %d", at)) || !strings.Contains(err.Error(), "strata segment repair") {
					t.Fatalf("append to a damaged shard: %v; want a DamagedError at byte %d naming the repair", err, at)
				}
				e.Close()
				if after, _ := os.ReadFile(path); !bytes.Equal(after, data) {
					t.Fatal("the damaged file was changed before an operator chose to repair it")
				}
			}
			reps, err := VerifyDir(dir, nil)
			if err != nil {
				t.Fatal(err)
			}
			if r := reps[0]; r.Problem == nil || r.ProblemAt != at || r.TornTail || r.Synced != synced {
				t.Fatalf("verify: problem %v at byte %d (torn tail: %v, synced mark %d); want damage at byte %d before the mark at %d",
					r.Problem, r.ProblemAt, r.TornTail, r.Synced, at, synced)
			}

			e = open(t, cfg)
			if err := e.Repair(ctx, "m-0"); err != nil {
				t.Fatal(err)
			}
			base, err := e.Append(ctx, "m-0", storetest.Records(1, 9))
			if err != nil || base != uint64(tc.keep) {
				t.Fatalf("append after the repair: base %d, %v; want %d", base, err, tc.keep)
			}
			e.Close()
			e = open(t, cfg)
			defer e.Close()
			if got := e.Stats().Damaged.Load(); got != 0 {
				t.Fatalf("%d damaged shards after the repair and a restart, want 0", got)
			}
			if got := storetest.ReadAll(t, e, "m-0", 0); len(got) != tc.keep+1 {
				t.Fatalf("after the repair and one append: %d records, want %d", len(got), tc.keep+1)
			}
		})
	}
}

// copyDir copies a data folder as it is on disk now, the engine still
// running: what a process killed at this moment leaves.
func copyDir(t *testing.T, src string) string {
	t.Helper()
	dst := t.TempDir()
	err := filepath.WalkDir(src, func(p string, d os.DirEntry, err error) error {
		if err != nil {
			return err
		}
		rel, _ := filepath.Rel(src, p)
		if d.IsDir() {
			return os.MkdirAll(filepath.Join(dst, rel), 0o755)
		}
		b, err := os.ReadFile(p)
		if err != nil {
			return err
		}
		return os.WriteFile(filepath.Join(dst, rel), b, 0o644)
	})
	if err != nil {
		t.Fatal(err)
	}
	return dst
}

// Each policy's fsync sets the synced mark: a write once fsynced (each
// batch under fsync=batch, the tick's under fsync=interval) is on disk,
// and damage to it is kept; under fsync=none nothing is known to be on
// disk until a clean close, and the same damage is cut as a torn tail.
// The data folder is copied while the engine runs, as a crash leaves it:
// the marks' commits are synced, so none is lost with Pebble's buffer.
func TestSyncedMarkPerPolicy(t *testing.T) {
	for _, tc := range []struct {
		fsync   FsyncPolicy
		damaged bool
	}{
		{FsyncBatch, true},
		{FsyncInterval, true},
		{FsyncNone, false},
	} {
		t.Run(string(tc.fsync), func(t *testing.T) {
			cfg := testConfig(t.TempDir())
			cfg.Fsync, cfg.FsyncInterval = tc.fsync, time.Hour
			e := open(t, cfg)
			defer e.Close()
			want := fill(t, e, "p-0", 20)
			if tc.fsync == FsyncInterval {
				tickNow(t, e, "p-0") // the policy's fsync and mark
			}
			crashed := copyDir(t, cfg.Dir)
			path := segmentPath(filepath.Join(crashed, "p-0"), 0)
			data, _ := os.ReadFile(path)
			data[len(data)-2] ^= 1
			os.WriteFile(path, data, 0o644)

			cfg.Dir = crashed
			e2 := open(t, cfg)
			defer e2.Close()
			storetest.Equal(t, storetest.ReadAll(t, e2, "p-0", 0), want[:19])
			_, err := e2.Append(ctx, "p-0", storetest.Records(1, 9))
			var d *DamagedError
			if damaged := errors.As(err, &d); damaged != tc.damaged || (!damaged && err != nil) {
				t.Fatalf("append after the crash: %v; want damage kept: %v", err, tc.damaged)
			}
		})
	}
}

// A replica's truncation lowers the synced mark before it cuts the file:
// bytes a crash leaves past the cut, where the mark once was, are a torn
// tail, not synced records gone missing.
func TestTruncationLowersSyncedMark(t *testing.T) {
	cfg := testConfig(t.TempDir())
	e := open(t, cfg)
	defer e.Close()
	if err := e.CreateShard(ctx, "t-0"); err != nil {
		t.Fatal(err)
	}
	if err := e.SetHighWatermark(ctx, "t-0", 0); err != nil { // a replica's: the leader's high watermark
		t.Fatal(err)
	}
	want := fill(t, e, "t-0", 20)
	if err := e.SetHighWatermark(ctx, "t-0", 10); err != nil {
		t.Fatal(err)
	}
	if err := e.TruncateTo(ctx, "t-0", 12); err != nil {
		t.Fatal(err)
	}
	crashed := copyDir(t, cfg.Dir) // the truncation's index commit is synced
	path := segmentPath(filepath.Join(crashed, "t-0"), 0)
	data, _ := os.ReadFile(path)
	tail, _ := encodeAt(t, storetest.Records(1, 5), 12)
	os.WriteFile(path, append(data, tail[:len(tail)-4]...), 0o644)

	cfg.Dir = crashed
	e2 := open(t, cfg)
	defer e2.Close()
	if n := e2.Stats().Damaged.Load(); n != 0 {
		t.Fatalf("%d damaged shards after a torn tail past a truncation, want 0", n)
	}
	storetest.Equal(t, storetest.ReadAll(t, e2, "t-0", 0), want[:10]) // up to the high watermark
	if base, err := e2.Append(ctx, "t-0", storetest.Records(1, 9)); err != nil || base != 12 {
		t.Fatalf("append after the crash: base %d, %v; want 12", base, err)
	}
}
