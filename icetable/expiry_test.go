package icetable

import (
	"context"
	"strings"
	"testing"
	"time"

	"github.com/apache/iceberg-go"
	"github.com/apache/iceberg-go/table"

	"strata/tiering/objstore"
)

// metadataBytes is what the table's folder holds: its metadata files,
// manifest lists, manifests, delete files and pointer.
func metadataBytes(t testing.TB, b objstore.Bucket, tables *Tables, topic string) (n int64, files int) {
	t.Helper()
	if err := b.List(context.Background(), tables.Dir(topic)+"/", func(a objstore.Attrs) error {
		n += a.Size
		files++
		return nil
	}); err != nil {
		t.Fatal(err)
	}
	return n, files
}

// commitOne adds one small object of partition 0 right after what the
// table holds: a commit as a tiering run of one small segment makes it.
func commitOne(t testing.TB, tables *Tables, topic string) { commitRolling(t, tables, topic, 0) }

// With the expiry policy the table's metadata stays bounded however many
// commits: after the first few dozen commits its files do not grow in
// number, and its bytes only by the live data files' manifest entries. (Without it each commit adds a metadata file, a manifest
// list and a manifest, and the manifest list names every manifest.)
func TestMetadataStaysBoundedUnderExpiry(t *testing.T) {
	// 0.1 s a commit here (each one's expiry and sweep read the table):
	// 300 is well past the point the size is taken first.
	commits := 300
	if testing.Short() {
		commits = 200
	}
	b, dir := localBucket(t)
	// Every snapshot is older than the age limit at once: only the last
	// MinSnapshots stay.
	tables := &Tables{Bucket: b, Prefix: "data", Location: dir, Log: quiet, MaxSnapshotAge: time.Nanosecond, MinSnapshots: 5, OrphanGrace: time.Nanosecond,
		MaintainEvery: -1}
	// The size is taken first once manifest merging has gone round.
	const early0 = 120
	var early int64
	var earlyFiles int
	for i := 1; i <= commits; i++ {
		commitOne(t, tables, "orders")
		if i == early0 {
			early, earlyFiles = metadataBytes(t, b, tables, "orders")
		}
	}
	late, lateFiles := metadataBytes(t, b, tables, "orders")
	t.Logf("after 120 commits: %d bytes in %d files; after %d: %d bytes in %d files", early, earlyFiles, commits, late, lateFiles)
	// What still grows is the live files' entries in the merged manifest
	// (each commit adds a data file the table holds: about 190 bytes),
	// not the history: a commit without expiry adds some 8 KB of
	// metadata, manifest list and manifest that stay.
	if perCommit := (late - early) / int64(commits-early0); lateFiles > earlyFiles*3/2 || perCommit > 400 {
		t.Fatalf("after %d commits the metadata is %d bytes in %d files; after 120 it was %d in %d (%d bytes a commit since): it grows with commits",
			commits, late, lateFiles, early, earlyFiles, perCommit)
	}
	tbl, _, err := tables.load(context.Background(), "orders")
	if err != nil {
		t.Fatal(err)
	}
	if n := len(tbl.Metadata().Snapshots()); n > 6 {
		t.Fatalf("%d snapshots kept, want the last 5 (and the expiry's parent)", n)
	}
	got, _ := Committed(tbl.CurrentSnapshot().Summary.Properties)
	if want := (Range{0, uint64(commits*10 - 1)}); got[0] != want {
		t.Fatalf("the current snapshot holds %v, want %v", got[0], want)
	}
	if !strings.Contains(tbl.Properties()["write.metadata.delete-after-commit.enabled"], "true") {
		t.Fatalf("properties: %v", tbl.Properties())
	}
}

// A table's expiry and sweep follow its commits at most once per
// MaintainEvery (the first commit in a process does them): between, the
// snapshots pile up past the policy, and the next due commit expires them.
func TestMaintenanceFollowsItsOwnCadence(t *testing.T) {
	b, dir := localBucket(t)
	tables := &Tables{Bucket: b, Prefix: "data", Location: dir, Log: quiet, MaxSnapshotAge: time.Nanosecond, MinSnapshots: 5, OrphanGrace: time.Nanosecond,
		MaintainEvery: time.Hour}
	snapshots := func() int {
		tbl, _, err := tables.load(context.Background(), "orders")
		if err != nil {
			t.Fatal(err)
		}
		return len(tbl.Metadata().Snapshots())
	}
	for range 12 {
		commitOne(t, tables, "orders")
	}
	if n := snapshots(); n != 12 {
		t.Fatalf("%d snapshots after 12 commits within the hour; want all 12 (the first commit's expiry had nothing to expire)", n)
	}
	tables.MaintainEvery = -1
	commitOne(t, tables, "orders")
	if n := snapshots(); n > 6 {
		t.Fatalf("%d snapshots after a commit with its maintenance due; want the last 5 (and the expiry's parent)", n)
	}
}

// snapshotAt is a snapshot agoMs before now whose summary says it removed
// that many data files ("": none said).
func snapshotAt(now time.Time, agoMs int64, removed string) table.Snapshot {
	props := iceberg.Properties{}
	if removed != "" {
		props["deleted-data-files"] = removed
	}
	return table.Snapshot{TimestampMs: now.UnixMilli() - agoMs, Summary: &table.Summary{Properties: props}}
}

// The snapshots a table keeps reach back to its newest removal of data
// files that is at least the delay old; a history with none, or whose
// removal is its oldest snapshot, expires nothing by it.
func TestRetentionFloor(t *testing.T) {
	now := time.UnixMilli(1_000_000)
	snap := func(agoMs int64, removed string) table.Snapshot { return snapshotAt(now, agoMs, removed) }
	for _, tc := range []struct {
		name    string
		history []table.Snapshot // the current one first
		delay   time.Duration
		n       int
		ok      bool
	}{
		{"no snapshot", nil, 0, 0, false},
		{"appends only", []table.Snapshot{snap(0, ""), snap(10, ""), snap(20, "")}, 0, 0, false},
		{"the current one removed files", []table.Snapshot{snap(0, "2"), snap(10, ""), snap(20, "")}, 0, 1, true},
		{"a removal, then appends", []table.Snapshot{snap(0, ""), snap(10, "1"), snap(20, "")}, 0, 2, true},
		{"the newest removal counts", []table.Snapshot{snap(0, ""), snap(10, "1"), snap(20, "3"), snap(30, "")}, 0, 2, true},
		{"the oldest snapshot's removal", []table.Snapshot{snap(0, ""), snap(10, "1")}, 0, 0, false},
		{"deleted-data-files 0", []table.Snapshot{snap(0, "0"), snap(10, "")}, 0, 0, false},
		{"within the delay", []table.Snapshot{snap(0, ""), snap(10, "1"), snap(20, "")}, time.Second, 0, false},
		{"an older removal past the delay", []table.Snapshot{snap(0, "1"), snap(2000, "1"), snap(3000, "")}, time.Second, 2, true},
		{"exactly the delay old", []table.Snapshot{snap(1000, "1"), snap(2000, "")}, time.Second, 1, true},
	} {
		t.Run(tc.name, func(t *testing.T) {
			n, ok := retentionFloor(tc.history, now, tc.delay)
			if n != tc.n || ok != tc.ok {
				t.Fatalf("retentionFloor = %d, %v; want %d, %v", n, ok, tc.n, tc.ok)
			}
		})
	}
}

// Within the delay, a removal's parent and every snapshot since stay,
// however few the policy keeps: they name the files it took.
func TestRemovedSince(t *testing.T) {
	now := time.UnixMilli(1_000_000)
	snap := func(agoMs int64, removed string) table.Snapshot { return snapshotAt(now, agoMs, removed) }
	for _, tc := range []struct {
		name    string
		history []table.Snapshot
		want    int
	}{
		{"no removal", []table.Snapshot{snap(0, ""), snap(10, "")}, 0},
		{"the current one removed files", []table.Snapshot{snap(0, "1"), snap(10, ""), snap(20, "")}, 2},
		{"the oldest recent removal counts", []table.Snapshot{snap(0, "1"), snap(10, ""), snap(20, "2"), snap(30, ""), snap(40, "")}, 4},
		{"a removal past the delay", []table.Snapshot{snap(0, ""), snap(5000, "1"), snap(6000, "")}, 0},
		{"the oldest snapshot removed files", []table.Snapshot{snap(0, ""), snap(10, "1")}, 2},
	} {
		if got := removedSince(tc.history, now, time.Second); got != tc.want {
			t.Errorf("%s: removedSince = %d, want %d", tc.name, got, tc.want)
		}
	}
}
