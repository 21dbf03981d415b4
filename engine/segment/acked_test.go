package segment

import (
	"encoding/binary"
	"errors"
	"fmt"
	"log/slog"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/cockroachdb/pebble"

	"strata/engine/store/storetest"
)

// ackedChildRecords are the records the acknowledged-loss child appends,
// ten to an append, as a producer's batches.
func ackedChildRecords() [][]byte {
	var out [][]byte
	for i := range 300 {
		out = append(out, []byte(fmt.Sprintf("s-%d-%0100d", i, 0)))
	}
	return out
}

// ackedConfig is the engine of the acknowledged-loss test: the default
// configuration, in the given file model.
func ackedConfig(dir, model string) Config {
	cfg := testConfig(dir)
	if model == ModelShared {
		cfg.FileModel = func(string) string { return ModelShared }
	}
	return cfg
}

// ackedChild appends 300 records to one shard with the default
// configuration, each append acknowledged, then dies by SIGKILL: no
// Close, nothing flushed that was not already.
func ackedChild(dir, model string) {
	e, err := Open(ackedConfig(dir, model))
	if err != nil {
		fmt.Fprintln(os.Stderr, err)
		os.Exit(1)
	}
	if err := e.CreateShard(ctx, "solo-0"); err != nil {
		fmt.Fprintln(os.Stderr, err)
		os.Exit(1)
	}
	vals := ackedChildRecords()
	for i := 0; i < len(vals); i += 10 {
		recs := storetest.Records(10, i)
		for j := range recs {
			recs[j].Value = vals[i+j]
		}
		if _, err := e.Append(ctx, "solo-0", recs); err != nil {
			fmt.Fprintln(os.Stderr, err)
			os.Exit(1)
		}
	}
	syscall.Kill(os.Getpid(), syscall.SIGKILL)
	select {}
}

// A single node killed after its appends were acknowledged, whose active
// segment then loses its last 4 KiB (synced bytes gone: a disk fault, or
// a cut by hand), must not come back shorter without saying so: it serves
// every acknowledged record, or it reports the shard damaged, naming the
// shard and the offsets it can no longer serve, and refuses writes. It
// never cuts the loss as a torn tail and takes the next append at an
// acknowledged offset (issue #24: 28 of 300 records gone, no error).
func TestKilledNodeNeverDropsAcknowledgedRecordsSilently(t *testing.T) {
	dir := t.TempDir()
	runKilled(t, "STRATA_ACKED_DIR="+dir)
	path := segmentPath(filepath.Join(dir, "solo-0"), 0)
	cutAndCheck(t, dir, "", path, func(err error, served int) []string {
		var de *DamagedError
		if !errors.As(err, &de) {
			t.Fatalf("append to the damaged shard: %v; want a DamagedError", err)
		}
		return []string{"shard solo-0", fmt.Sprintf("before offset %d", served), fmt.Sprintf("from offset %d to offset 299", served)}
	})
}

// The same in the shared files: the last shared file loses its last 4
// KiB after the kill, and the shard's chunks there were acknowledged.
func TestKilledNodeNeverDropsAcknowledgedSharedRecordsSilently(t *testing.T) {
	dir := t.TempDir()
	runKilled(t, "STRATA_ACKED_DIR="+dir, "STRATA_ACKED_MODEL="+ModelShared)
	files, _ := filepath.Glob(filepath.Join(dir, "shared", "*.msg"))
	if len(files) == 0 {
		t.Fatal("no shared file")
	}
	cutAndCheck(t, dir, ModelShared, files[len(files)-1], func(err error, served int) []string {
		var de *SharedDamagedError
		if !errors.As(err, &de) {
			t.Fatalf("append to the damaged shard: %v; want a SharedDamagedError", err)
		}
		return []string{"shard solo-0", fmt.Sprintf("from offset %d on", served)}
	})
}

// cutAndCheck cuts the last 4 KiB of path, reopens the engine and checks
// that it serves all 300 records, or reports the loss: the damage, from
// the first offset it no longer serves, and an append refused with an
// error (checked by refused, which lists what the error must name).
func cutAndCheck(t *testing.T, dir, model, path string, refused func(err error, served int) []string) {
	t.Helper()
	st, err := os.Stat(path)
	if err != nil {
		t.Fatal(err)
	}
	if err := os.Truncate(path, st.Size()-4096); err != nil {
		t.Fatal(err)
	}

	e := open(t, ackedConfig(dir, model))
	got := storetest.ReadAll(t, e, "solo-0", 0)
	if len(got) == 300 {
		return // the records came back (a replica's copy, say)
	}
	end, _ := e.LogEnd(ctx, "solo-0")
	d := e.Damage("solo-0")
	if d == nil {
		t.Fatalf("after a kill and a cut, %d of 300 acknowledged records are served (log end %d) and the shard reports no damage", len(got), end)
	}
	if d.From != uint64(len(got)) {
		t.Fatalf("the damage is reported from offset %d, but reads serve up to offset %d", d.From, len(got))
	}
	base, err := e.Append(ctx, "solo-0", storetest.Records(1, 9))
	if err == nil {
		t.Fatalf("after a kill and a cut, %d of 300 acknowledged records are served and an append was acknowledged at offset %d", len(got), base)
	}
	t.Log(err)
	for _, want := range refused(err, len(got)) {
		if !strings.Contains(err.Error(), want) {
			t.Fatalf("append to the damaged shard: %v; want it to name %q", err, want)
		}
	}
}

// ackedInProcess appends the acknowledged-loss child's 300 records in
// this process and closes the engine.
func ackedInProcess(t *testing.T, dir string) {
	t.Helper()
	e := open(t, ackedConfig(dir, ""))
	if err := e.CreateShard(ctx, "solo-0"); err != nil {
		t.Fatal(err)
	}
	vals := ackedChildRecords()
	for i := 0; i < len(vals); i += 10 {
		recs := storetest.Records(10, i)
		for j := range recs {
			recs[j].Value = vals[i+j]
		}
		if _, err := e.Append(ctx, "solo-0", recs); err != nil {
			t.Fatal(err)
		}
	}
	e.Close()
}

// Data written by the version that kept the synced mark in the index has
// no mark file: its mark is still read there, so a cut of its synced
// bytes is damage, not a torn tail.
func TestSyncedMarkOfTheIndexStillTellsDamage(t *testing.T) {
	dir := t.TempDir()
	ackedInProcess(t, dir)
	markFile := filepath.Join(dir, "solo-0", syncedFile)
	b, err := os.ReadFile(markFile)
	if err != nil {
		t.Fatal(err)
	}
	if _, ok := decodeMark(b); !ok {
		t.Fatalf("the mark file does not check out: %x", b)
	}
	db, err := pebble.Open(filepath.Join(dir, "index"), &pebble.Options{Logger: quietLogger{}})
	if err != nil {
		t.Fatal(err)
	}
	if err := db.Set(syncedKey("solo-0"), b[:32], pebble.Sync); err != nil { // the earlier version's value
		t.Fatal(err)
	}
	db.Close()
	if err := os.Remove(markFile); err != nil {
		t.Fatal(err)
	}
	cutAndCheck(t, dir, "", segmentPath(filepath.Join(dir, "solo-0"), 0), func(err error, served int) []string {
		var de *DamagedError
		if !errors.As(err, &de) {
			t.Fatalf("append to the damaged shard: %v; want a DamagedError", err)
		}
		return []string{"shard solo-0", fmt.Sprintf("from offset %d to offset 299", served)}
	})
}

// A mark file that does not check out (a power cut tore its write) is no
// mark: the shard starts, and what it cannot tell from a torn tail is cut
// as one, never refused as damage on a mark it cannot trust.
func TestTornSyncedMarkReadsAsNone(t *testing.T) {
	dir := t.TempDir()
	ackedInProcess(t, dir)
	markFile := filepath.Join(dir, "solo-0", syncedFile)
	b, err := os.ReadFile(markFile)
	if err != nil {
		t.Fatal(err)
	}
	b[20] ^= 0xff // in the position
	if err := os.WriteFile(markFile, b, 0o644); err != nil {
		t.Fatal(err)
	}
	path := segmentPath(filepath.Join(dir, "solo-0"), 0)
	st, err := os.Stat(path)
	if err != nil {
		t.Fatal(err)
	}
	if err := os.Truncate(path, st.Size()-4096); err != nil {
		t.Fatal(err)
	}
	e := open(t, ackedConfig(dir, ""))
	defer e.Close()
	got := storetest.ReadAll(t, e, "solo-0", 0)
	if d := e.Damage("solo-0"); d != nil || len(got) == 300 {
		t.Fatalf("with a torn mark, %d of 300 records served, damage %v; want a torn tail cut and no damage", len(got), d)
	}
	base, err := e.Append(ctx, "solo-0", storetest.Records(1, 9))
	if err != nil || base != uint64(len(got)) {
		t.Fatalf("append after the torn tail's cut: base %d, %v; want base %d", base, err, len(got))
	}
}

// A shared files' marks file that is there but cannot be read refuses the
// start, naming it, as a shard's mark file does: read as "no mark", a cut
// of acknowledged chunks would pass for a torn tail and be cut (an outside
// tester's case: the marks file unreadable, then the last file cut, lost
// acknowledged records silently).
func TestUnreadableSharedMarksRefuseTheStart(t *testing.T) {
	dir := t.TempDir()
	runKilled(t, "STRATA_ACKED_DIR="+dir, "STRATA_ACKED_MODEL="+ModelShared)
	marks := filepath.Join(dir, "shared", syncedFile)
	if err := os.Remove(marks); err != nil {
		t.Fatal(err)
	}
	if err := os.Mkdir(marks, 0o755); err != nil { // unreadable as a file, even to root
		t.Fatal(err)
	}
	e, err := Open(ackedConfig(dir, ModelShared))
	if err == nil {
		e.Close()
		t.Fatal("the engine opened with an unreadable shared marks file")
	}
	if !strings.Contains(err.Error(), marks) {
		t.Fatalf("open: %v; want an error naming %s", err, marks)
	}
}

// syncBuffer is a log sink the engine's goroutines may write to at once.
type syncBuffer struct {
	mu sync.Mutex
	b  strings.Builder
}

func (s *syncBuffer) Write(p []byte) (int, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.b.Write(p)
}

func (s *syncBuffer) String() string {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.b.String()
}

// An active segment with bytes and no synced mark that checks out, under
// fsync=batch, lost its mark: a cut of acknowledged records then reads as
// a torn tail, and nothing tells how many went (issue #24's adversarial
// pass: the mark removed or garbled, the file cut, and the start logged a
// warning, the records' offsets given out again). The start goes on, but
// logs an error naming the shard, the segment and where its log now ends,
// and counts it; a fresh shard, a clean restart and the policies that
// write no mark per batch stay quiet, and so does the start after the
// loud one (the mark is written again).
func TestMissingSyncedMarkIsReported(t *testing.T) {
	const cut = 4096
	for _, tc := range []struct {
		name  string
		fsync FsyncPolicy
		fill  int  // records appended (0: a fresh shard)
		kill  bool // the data folder copied while the engine runs, not closed
		mark  string
		cut   bool
		loud  bool
	}{
		{name: "mark removed, file cut", fsync: FsyncBatch, fill: 300, kill: true, mark: "remove", cut: true, loud: true},
		{name: "mark garbled, file cut", fsync: FsyncBatch, fill: 300, kill: true, mark: "garble", cut: true, loud: true},
		{name: "mark of another segment, file cut", fsync: FsyncBatch, fill: 300, kill: true, mark: "other segment", cut: true, loud: true},
		{name: "mark removed, file whole", fsync: FsyncBatch, fill: 300, kill: true, mark: "remove", loud: true},
		{name: "mark removed after a clean close, file cut", fsync: FsyncBatch, fill: 300, mark: "remove", cut: true, loud: true},
		{name: "clean restart", fsync: FsyncBatch, fill: 300},
		{name: "killed", fsync: FsyncBatch, fill: 300, kill: true},
		{name: "fresh shard killed", fsync: FsyncBatch, kill: true},
		{name: "interval, mark removed, file cut", fsync: FsyncInterval, fill: 300, kill: true, mark: "remove", cut: true},
		{name: "none, mark removed, file cut", fsync: FsyncNone, fill: 300, kill: true, mark: "remove", cut: true},
	} {
		t.Run(tc.name, func(t *testing.T) {
			cfg := testConfig(t.TempDir())
			cfg.Fsync, cfg.FsyncInterval = tc.fsync, time.Hour
			e := open(t, cfg)
			if err := e.CreateShard(ctx, "solo-0"); err != nil {
				t.Fatal(err)
			}
			vals := ackedChildRecords()
			for i := 0; i < tc.fill; i += 10 {
				recs := storetest.Records(10, i)
				for j := range recs {
					recs[j].Value = vals[i+j]
				}
				if _, err := e.Append(ctx, "solo-0", recs); err != nil {
					t.Fatal(err)
				}
			}
			dir := cfg.Dir
			if tc.kill {
				dir = copyDir(t, cfg.Dir)
			} else if err := e.Close(); err != nil {
				t.Fatal(err)
			}
			markFile := filepath.Join(dir, "solo-0", syncedFile)
			switch tc.mark {
			case "remove":
				if err := os.Remove(markFile); err != nil {
					t.Fatal(err)
				}
			case "garble":
				if err := os.WriteFile(markFile, make([]byte, markSize), 0o644); err != nil {
					t.Fatal(err)
				}
			case "other segment":
				b, err := os.ReadFile(markFile)
				if err != nil {
					t.Fatal(err)
				}
				m, ok := decodeMark(b)
				if !ok {
					t.Fatalf("the mark file does not check out: %x", b)
				}
				m.seg = 7
				if err := os.WriteFile(markFile, encodeMark(nil, m), 0o644); err != nil {
					t.Fatal(err)
				}
			}
			path := segmentPath(filepath.Join(dir, "solo-0"), 0)
			if tc.cut {
				st, err := os.Stat(path)
				if err != nil {
					t.Fatal(err)
				}
				if err := os.Truncate(path, st.Size()-cut); err != nil {
					t.Fatal(err)
				}
			}

			var logs syncBuffer
			cfg.Dir, cfg.Logger = dir, slog.New(slog.NewTextHandler(&logs, nil))
			e2 := open(t, cfg)
			got := storetest.ReadAll(t, e2, "solo-0", 0)
			if tc.cut && len(got) >= tc.fill {
				t.Fatalf("%d records served after a cut of %d bytes of %d records", len(got), cut, tc.fill)
			}
			var errLine string
			for _, l := range strings.Split(logs.String(), "\n") {
				if strings.Contains(l, "level=ERROR") {
					errLine = l
				}
			}
			if n := e2.Stats().Unmarked.Load(); (n == 1) != tc.loud || n > 1 {
				t.Errorf("%d active segments counted unmarked; want loud: %v", n, tc.loud)
			}
			if !tc.loud {
				if errLine != "" {
					t.Fatalf("an error was logged at a start that should be quiet:\n%s", logs.String())
				}
			} else {
				for _, want := range []string{"shard=solo-0", "segment=0", fmt.Sprintf("log_end=%d", len(got)), "acknowledged records"} {
					if !strings.Contains(errLine, want) {
						t.Fatalf("the error %q does not name %q; the log:\n%s", errLine, want, logs.String())
					}
				}
			}
			// It starts and serves: the shard takes writes after what reads.
			if base, err := e2.Append(ctx, "solo-0", storetest.Records(1, 9)); err != nil || base != uint64(len(got)) {
				t.Fatalf("append after the start: base %d, %v; want base %d", base, err, len(got))
			}
			// The next start, after a kill, has nothing new to report.
			again := copyDir(t, dir)
			var logs2 syncBuffer
			cfg.Dir, cfg.Logger = again, slog.New(slog.NewTextHandler(&logs2, nil))
			e3 := open(t, cfg)
			if n := e3.Stats().Unmarked.Load(); n != 0 && tc.fsync == FsyncBatch {
				t.Fatalf("the start after the reported one counts %d unmarked segments again:\n%s", n, logs2.String())
			}
			storetest.Equal(t, storetest.ReadAll(t, e3, "solo-0", 0)[:len(got)], got)
		})
	}
}

// The same in the shared files: the last shared file, unsealed at the
// kill, whose writer's slot of shared/synced is gone or garbled, is cut.
// Each shard with chunks there is reported (shard, segment, log end), and
// the file once; a plain kill and a clean restart stay quiet.
func TestMissingSharedSyncedMarkIsReported(t *testing.T) {
	for _, tc := range []struct {
		name  string
		fsync FsyncPolicy
		kill  bool
		marks string
		cut   bool
		loud  bool
	}{
		{name: "marks removed, file cut", fsync: FsyncBatch, kill: true, marks: "remove", cut: true, loud: true},
		{name: "marks garbled, file cut", fsync: FsyncBatch, kill: true, marks: "garble", cut: true, loud: true},
		{name: "marks removed, file whole", fsync: FsyncBatch, kill: true, marks: "remove", loud: true},
		{name: "killed", fsync: FsyncBatch, kill: true},
		{name: "clean restart", fsync: FsyncBatch},
		{name: "interval, marks removed, file cut", fsync: FsyncInterval, kill: true, marks: "remove", cut: true},
	} {
		t.Run(tc.name, func(t *testing.T) {
			cfg := ackedConfig(t.TempDir(), ModelShared)
			cfg.Fsync, cfg.FsyncInterval = tc.fsync, time.Hour
			e := open(t, cfg)
			if err := e.CreateShard(ctx, "solo-0"); err != nil {
				t.Fatal(err)
			}
			vals := ackedChildRecords()
			for i := 0; i < len(vals); i += 10 {
				recs := storetest.Records(10, i)
				for j := range recs {
					recs[j].Value = vals[i+j]
				}
				if _, err := e.Append(ctx, "solo-0", recs); err != nil {
					t.Fatal(err)
				}
			}
			dir := cfg.Dir
			if tc.kill {
				dir = copyDir(t, cfg.Dir)
			} else if err := e.Close(); err != nil {
				t.Fatal(err)
			}
			marks := filepath.Join(dir, "shared", syncedFile)
			switch tc.marks {
			case "remove":
				if err := os.Remove(marks); err != nil {
					t.Fatal(err)
				}
			case "garble":
				if err := os.WriteFile(marks, make([]byte, 4*sharedMarkSize), 0o644); err != nil {
					t.Fatal(err)
				}
			}
			if tc.cut {
				files, _ := filepath.Glob(filepath.Join(dir, "shared", "*.msg"))
				if len(files) == 0 {
					t.Fatal("no shared file")
				}
				st, err := os.Stat(files[len(files)-1])
				if err != nil {
					t.Fatal(err)
				}
				if err := os.Truncate(files[len(files)-1], st.Size()-4096); err != nil {
					t.Fatal(err)
				}
			}
			var logs syncBuffer
			cfg.Dir, cfg.Logger = dir, slog.New(slog.NewTextHandler(&logs, nil))
			e2 := open(t, cfg)
			got := storetest.ReadAll(t, e2, "solo-0", 0)
			if tc.cut && len(got) >= 300 {
				t.Fatalf("%d records served after a cut of 4096 bytes", len(got))
			}
			if n := e2.Stats().Unmarked.Load(); (n == 1) != tc.loud || n > 1 {
				t.Errorf("%d shared files counted unmarked; want loud: %v", n, tc.loud)
			}
			var shardErr string
			errs := 0
			for _, l := range strings.Split(logs.String(), "\n") {
				if strings.Contains(l, "level=ERROR") {
					errs++
					if strings.Contains(l, "shard=solo-0") {
						shardErr = l
					}
				}
			}
			if !tc.loud {
				if errs > 0 {
					t.Fatalf("an error was logged at a start that should be quiet:\n%s", logs.String())
				}
			} else {
				for _, want := range []string{"segment=0", fmt.Sprintf("log_end=%d", len(got)), "acknowledged records"} {
					if !strings.Contains(shardErr, want) {
						t.Fatalf("no error names the shard and %q; the log:\n%s", want, logs.String())
					}
				}
			}
			if base, err := e2.Append(ctx, "solo-0", storetest.Records(1, 9)); err != nil || base != uint64(len(got)) {
				t.Fatalf("append after the start: base %d, %v; want base %d", base, err, len(got))
			}
		})
	}
}

// tickNow runs the tick of shard's worker (the interval policy's fsyncs,
// the marks after them) and waits for it, instead of for the ticker.
func tickNow(t *testing.T, e *Engine, shard string) {
	t.Helper()
	if err := e.ask(ctx, shard, request{tick: true}); err != nil {
		t.Fatal(err)
	}
}

// Each policy's fsync sets the shared files' synced mark, as it sets a
// partition shard's (TestSyncedMarkPerPolicy): under fsync=interval the
// tick's fsync moves the worker's slot, so a cut of chunks it synced is
// damage kept, not a torn tail cut; under fsync=none nothing is known to
// be on disk before a clean close, and the cut is a torn tail. (Before,
// only fsync=batch moved the slot: under interval the same cut was cut.)
func TestSharedSyncedMarkPerPolicy(t *testing.T) {
	for _, tc := range []struct {
		fsync   FsyncPolicy
		damaged bool
	}{
		{FsyncBatch, true},
		{FsyncInterval, true},
		{FsyncNone, false},
	} {
		t.Run(string(tc.fsync), func(t *testing.T) {
			cfg := ackedConfig(t.TempDir(), ModelShared)
			cfg.Fsync, cfg.FsyncInterval = tc.fsync, time.Hour
			e := open(t, cfg)
			want := fill(t, e, "p-0", 100)
			if tc.fsync == FsyncInterval {
				tickNow(t, e, "p-0") // the policy's fsync and mark
			}
			crashed := copyDir(t, cfg.Dir)
			files, _ := filepath.Glob(filepath.Join(crashed, "shared", "*.msg"))
			if len(files) == 0 {
				t.Fatal("no shared file")
			}
			last := files[len(files)-1]
			st, err := os.Stat(last)
			if err != nil {
				t.Fatal(err)
			}
			if err := os.Truncate(last, st.Size()-100); err != nil {
				t.Fatal(err)
			}
			cfg.Dir = crashed
			e2 := open(t, cfg)
			got := storetest.ReadAll(t, e2, "p-0", 0)
			storetest.Equal(t, got, want[:len(got)])
			_, err = e2.Append(ctx, "p-0", storetest.Records(1, 9))
			var d *SharedDamagedError
			if damaged := errors.As(err, &d); damaged != tc.damaged || (!damaged && err != nil) {
				t.Fatalf("append after the crash and the cut: %v; want the damage kept: %v", err, tc.damaged)
			}
		})
	}
}

// The earlier version's marks (index keys) go once a mark file says as
// much: a shard's 'y' key at the start that finds its shard whole (the
// mark file written and fsynced first, so a crash between the two still
// reads one), a shared file's 'Y' key at the start that sealed its file.
// A damaged shard keeps its key: it is what tells the damage. Before,
// the keys stayed for good, read again wherever a mark file went missing.
func TestEarlierVersionsMarksAreDeleted(t *testing.T) {
	for _, tc := range []struct {
		name     string
		model    string
		markFile bool // the mark file kept beside the key
	}{
		{name: "key only", markFile: false},
		{name: "key and mark file", markFile: true},
		{name: "shared file's key", model: ModelShared},
	} {
		t.Run(tc.name, func(t *testing.T) {
			dir := t.TempDir()
			cfg := ackedConfig(dir, tc.model)
			e := open(t, cfg)
			want := fill(t, e, "solo-0", 300)
			if err := e.Close(); err != nil {
				t.Fatal(err)
			}
			markFile := filepath.Join(dir, "solo-0", syncedFile)
			var key []byte
			db, err := pebble.Open(filepath.Join(dir, "index"), &pebble.Options{Logger: quietLogger{}})
			if err != nil {
				t.Fatal(err)
			}
			if tc.model == ModelShared {
				files, _ := filepath.Glob(filepath.Join(dir, "shared", "*.msg"))
				var no uint64
				fmt.Sscanf(filepath.Base(files[len(files)-1]), "%d.msg", &no)
				key = sharedSyncedKey(no)
				err = db.Set(key, binary.BigEndian.AppendUint64(nil, 100), pebble.Sync)
			} else {
				b, rerr := os.ReadFile(markFile)
				if rerr != nil {
					t.Fatal(rerr)
				}
				key = syncedKey("solo-0")
				err = db.Set(key, b[:32], pebble.Sync) // the earlier version's value
			}
			if err != nil {
				t.Fatal(err)
			}
			db.Close()
			if tc.model == "" && !tc.markFile {
				if err := os.Remove(markFile); err != nil {
					t.Fatal(err)
				}
			}

			e2 := open(t, cfg)
			storetest.Equal(t, storetest.ReadAll(t, e2, "solo-0", 0), want)
			if _, closer, err := e2.index.Get(key); err == nil {
				closer.Close()
				t.Fatalf("the earlier version's mark %x is still in the index after the start", key)
			} else if !errors.Is(err, pebble.ErrNotFound) {
				t.Fatal(err)
			}
			if tc.model == ModelShared {
				return
			}
			// The mark file took over: a kill, then a cut, is still damage.
			crashed := copyDir(t, dir)
			path := segmentPath(filepath.Join(crashed, "solo-0"), 0)
			st, err := os.Stat(path)
			if err != nil {
				t.Fatal(err)
			}
			if err := os.Truncate(path, st.Size()-4096); err != nil {
				t.Fatal(err)
			}
			cfg.Dir = crashed
			e3 := open(t, cfg)
			var de *DamagedError
			if _, err := e3.Append(ctx, "solo-0", storetest.Records(1, 9)); !errors.As(err, &de) {
				t.Fatalf("append after a kill and a cut, the key gone: %v; want a DamagedError", err)
			}
		})
	}
}
