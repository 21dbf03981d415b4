package segment

import (
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"syscall"
	"testing"

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
