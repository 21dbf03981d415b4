package icetable

import (
	"context"
	"errors"
	"fmt"
	"os"
	"path"
	"path/filepath"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/apache/iceberg-go/table"

	"strata/engine/record"
	"strata/tiering"
	"strata/tiering/objstore"
)

// watchDeletes fails the test when an object leaves the bucket while the
// topic's current table still names it: the table's delete must land
// first.
type watchDeletes struct {
	objstore.Bucket
	t      *testing.T
	tables *Tables
	topic  string

	mu      sync.Mutex
	deleted int // distinct objects
	gone    map[string]bool
}

func (w *watchDeletes) Delete(ctx context.Context, name string) error {
	if strings.HasSuffix(name, ".parquet") {
		if live := liveFiles(w.t, w.tables, w.topic); live[w.tables.uri(name)] {
			w.t.Errorf("%s is removed from the bucket while the table's current snapshot names it", name)
		}
		w.mu.Lock()
		if !w.gone[name] {
			// The table's expiry deletes a retention's object, and then
			// tiering lets go of it (a second delete, of nothing).
			w.deleted++
		}
		if w.gone == nil {
			w.gone = map[string]bool{}
		}
		w.gone[name] = true
		w.mu.Unlock()
	}
	return w.Bucket.Delete(ctx, name)
}

// liveFiles are the data files the current snapshot names (none before
// the first snapshot).
func liveFiles(t *testing.T, tables *Tables, topic string) map[string]bool {
	t.Helper()
	tbl, _, err := tables.load(context.Background(), topic)
	if err != nil {
		t.Fatalf("loading the table: %v", err)
	}
	out := map[string]bool{}
	if tbl.CurrentSnapshot() == nil {
		return out
	}
	tasks, err := tbl.Scan().PlanFiles(context.Background())
	if err != nil {
		t.Fatal(err)
	}
	for _, task := range tasks {
		out[task.File.FilePath()] = true
	}
	return out
}

// everyKeptSnapshotReads fails unless each data file of every kept
// snapshot is in the bucket: time travel to any of them reads, and so does
// a reader that loaded the table before the last commit.
func everyKeptSnapshotReads(t *testing.T, bucket objstore.Bucket, tables *Tables, topic string) {
	t.Helper()
	kept, err := tables.Referenced(context.Background(), []string{topic})
	if err != nil {
		t.Fatal(err)
	}
	for name := range kept {
		if _, err := bucket.Stat(context.Background(), name); err != nil {
			t.Errorf("a kept snapshot names %s: %v", name, err)
		}
	}
}

// onlyListedObjects fails unless the bucket's objects are the ones the
// partitions' manifests list: none lingers after it left the log.
func onlyListedObjects(t *testing.T, bucket objstore.Bucket, dir, what string) {
	t.Helper()
	listed := 0
	for p := range 2 {
		m, err := tiering.ReadManifest(context.Background(), bucket, fmt.Sprintf("data/topic=orders/partition=%d/_strata_manifest.json", p))
		if err != nil {
			t.Fatal(err)
		}
		listed += len(m.Objects)
	}
	if left := len(parquetObjects(t, dir)); left != listed {
		t.Fatalf("%s: %d objects in the bucket, %d in the manifests; want no other", what, left, listed)
	}
}

// tableOf is the topic's table as it stands.
func tableOf(t *testing.T, tables *Tables, topic string) *table.Table {
	t.Helper()
	tbl, _, err := tables.load(context.Background(), topic)
	if err != nil {
		t.Fatal(err)
	}
	return tbl
}

// everyFileExists fails unless each data and delete file of the current
// snapshot is in the bucket.
func everyFileExists(t *testing.T, bucket objstore.Bucket, tables *Tables, topic string) {
	t.Helper()
	tbl, _, err := tables.load(context.Background(), topic)
	if err != nil {
		t.Fatal(err)
	}
	if tbl.CurrentSnapshot() == nil {
		return
	}
	tasks, err := tbl.Scan().PlanFiles(context.Background())
	if err != nil {
		t.Fatal(err)
	}
	for _, task := range tasks {
		for _, f := range append([]string{task.File.FilePath()}, deletePaths(task)...) {
			name := strings.TrimPrefix(f, strings.TrimSuffix(tables.Location, "/")+"/")
			if _, err := bucket.Stat(context.Background(), name); err != nil {
				t.Errorf("the current snapshot names %s: %v", f, err)
			}
		}
	}
}

func deletePaths(task table.FileScanTask) []string {
	var out []string
	for _, d := range task.DeleteFiles {
		out = append(out, d.FilePath())
	}
	return out
}

// The lifecycle shows in the table, each step a snapshot committed before
// any object leaves the bucket: DeleteRecords inside a kept file hides
// the rows below the new log start (a position delete), retention removes
// whole files, and a deleted topic's partition leaves the table. After
// each, iceberg-go's reader gets exactly the records the log still holds
// of what was tiered, and a run with nothing new commits nothing. The
// objects a removal takes from the table leave the bucket with the
// snapshots that named them (retentionFloor; here with no delay):
// retention bounds the bucket's bytes as it does without a table.
func TestTheLifecycleShowsInTheTable(t *testing.T) {
	ctx := context.Background()
	raw, dir := localBucket(t)
	probe := &Tables{Bucket: raw, Prefix: "data", Location: dir, Log: quiet}
	watch := &watchDeletes{Bucket: raw, t: t, tables: probe, topic: "orders"}
	r := newRig(t, watch, dir)
	// The orphan sweep would delete at once what no catalog entry,
	// manifest or kept snapshot names.
	r.job.OrphanGrace = time.Nanosecond
	r.tables.FileDeleteDelay = -1 // TestRemovedFilesStayForTheDelay
	produced := map[string][]record.Record{
		"orders-0": produce(t, r.engine, "orders-0", 30, 0),
		"orders-1": produce(t, r.engine, "orders-1", 14, 100),
	}
	tiered := map[string]uint64{}
	r.run(t, tiered)
	snapshots := func() int {
		tbl, _, err := probe.load(ctx, "orders")
		if err != nil {
			t.Fatal(err)
		}
		return len(tbl.Metadata().Snapshots())
	}
	check := func(what string, from map[string]uint64) {
		t.Helper()
		rows, _ := scan(t, probe, "orders", 0, 1)
		for p, shard := range []string{"orders-0", "orders-1"} {
			sameRecords(t, what+": "+shard, rows[int32(p)], produced[shard][from[shard]:tiered[shard]])
		}
		everyFileExists(t, raw, probe, "orders")
		everyKeptSnapshotReads(t, raw, probe, "orders")
		// describe counts what a reader gets, not the rows the
		// position deletes hide.
		v, err := probe.Describe(ctx, "orders")
		if err != nil || v.Records != int64(len(rows[0])+len(rows[1])) {
			t.Fatalf("%s: describe says %d records (%v); a reader gets %d", what, v.Records, err, len(rows[0])+len(rows[1]))
		}
	}
	check("tiered", map[string]uint64{})
	objects := len(liveFiles(t, probe, "orders"))
	if objects < 4 {
		t.Fatalf("%d objects tiered; the test wants several per partition", objects)
	}

	// DeleteRecords at an offset inside partition 0's second object.
	m, err := tiering.ReadManifest(ctx, raw, "data/topic=orders/partition=0/_strata_manifest.json")
	if err != nil {
		t.Fatal(err)
	}
	cut := m.Objects[1].StartOffset + 7
	if err := r.engine.DeleteBefore(ctx, "orders-0", cut); err != nil {
		t.Fatal(err)
	}
	r.run(t, tiered)
	check("after DeleteRecords", map[string]uint64{"orders-0": cut})
	if watch.deleted != 1 {
		t.Fatalf("%d objects removed; want the one wholly below the new log start", watch.deleted)
	}
	if _, err := raw.Stat(ctx, m.Objects[0].Key); !errors.Is(err, objstore.ErrNotFound) {
		t.Fatalf("the object below the new log start: %v, want it gone from the bucket", err)
	}
	if n := snapshots(); n != 1 {
		t.Fatalf("%d snapshots after DeleteRecords, want 1: the delete, the history before it gone with the file it removed", n)
	}
	r.run(t, tiered)
	if n := snapshots(); n != 1 {
		t.Fatalf("a run with nothing new: %d snapshots, want 1", n)
	}

	// Retention by bytes: partition 1 keeps little. However many segments
	// a shard's retention expires in a run, the table gets one delete
	// snapshot for the shard, not one each.
	r.job.Policy.RetentionMaxBytes = 1
	deleted := watch.deleted
	sum, err := r.job.Run(ctx)
	if err != nil || len(sum.Errors) > 0 {
		t.Fatalf("tiering run: %v %+v", err, sum.Errors)
	}
	for _, u := range append(sum.Uploaded, sum.Adopted...) {
		tiered[u.Shard] += u.Records
	}
	if n := len(removals(tableOf(t, probe, "orders"))); sum.Expired <= 2 || n > 2 {
		t.Fatalf("retention expired %d segments of 2 shards in %d snapshots; want more than 2 segments in at most 2 snapshots", sum.Expired, n)
	}
	if watch.deleted == deleted {
		t.Fatal("retention removed no object from the bucket")
	}
	onlyListedObjects(t, raw, dir, "after retention")
	r.job.Policy.RetentionMaxBytes = 0
	start1, _, err := r.engine.Watermarks(ctx, "orders-1")
	if err != nil || start1 == 0 {
		t.Fatalf("retention moved orders-1's log start to %d (%v)", start1, err)
	}
	start0, _, _ := r.engine.Watermarks(ctx, "orders-0")
	check("after retention", map[string]uint64{"orders-0": min(start0, tiered["orders-0"]), "orders-1": min(start1, tiered["orders-1"])})

	// The history expires by age too, and takes nothing the table holds.
	r.tables.MinSnapshots, r.tables.MaxSnapshotAge, r.tables.MaintainEvery = 1, time.Nanosecond, -1
	produced["orders-0"] = append(produced["orders-0"], produce(t, r.engine, "orders-0", 14, 500)...)
	r.run(t, tiered)
	if n := snapshots(); n != 1 {
		t.Fatalf("%d snapshots after the expiry; want the current one", n)
	}
	check("after the history expired", map[string]uint64{"orders-0": min(start0, tiered["orders-0"]), "orders-1": min(start1, tiered["orders-1"])})
	onlyListedObjects(t, raw, dir, "after the expiry")

	// DeleteTopics, one partition's shard at a time.
	if err := r.engine.DeleteShard(ctx, "orders-1"); err != nil {
		t.Fatal(err)
	}
	for f := range liveFiles(t, probe, "orders") {
		if strings.Contains(f, "partition=1/") {
			t.Fatalf("after orders-1's deletion the table still names %s", f)
		}
	}
	everyFileExists(t, raw, probe, "orders")
}

// The objects retention takes from the table stay in the bucket, with the
// snapshots that name them, for iceberg.file_delete_delay after the
// removal, so a scan begun before it finishes; the first run after the
// delay, with nothing new to commit, lets them go.
func TestRemovedFilesStayForTheDelay(t *testing.T) {
	ctx := context.Background()
	raw, dir := localBucket(t)
	r := newRig(t, raw, dir)
	r.tables.FileDeleteDelay = 2 * time.Second
	produce(t, r.engine, "orders-0", 30, 0)
	tiered := map[string]uint64{}
	r.run(t, tiered)
	m, err := tiering.ReadManifest(ctx, raw, "data/topic=orders/partition=0/_strata_manifest.json")
	if err != nil || len(m.Objects) < 3 {
		t.Fatalf("manifest: %v, %d objects; want 3 or more", err, len(m.Objects))
	}
	first := m.Objects[0].Key
	held := tableOf(t, r.tables, "orders") // a scan that began before

	if err := r.engine.DeleteBefore(ctx, "orders-0", m.Objects[1].StartOffset); err != nil {
		t.Fatal(err)
	}
	r.run(t, tiered)
	if live := liveFiles(t, r.tables, "orders"); live[r.tables.uri(first)] {
		t.Fatalf("the table still names %s below the new log start", first)
	}
	if _, err := raw.Stat(ctx, first); err != nil {
		t.Fatalf("within the delay, %s left the bucket: %v", first, err)
	}
	if _, err := readOffsets(ctx, held, held.CurrentSnapshot()); err != nil {
		t.Fatalf("the scan begun before the removal: %v", err)
	}

	time.Sleep(r.tables.FileDeleteDelay)
	r.run(t, tiered)
	if _, err := raw.Stat(ctx, first); !errors.Is(err, objstore.ErrNotFound) {
		t.Fatalf("after the delay, %s: %v; want it gone from the bucket", first, err)
	}
	tbl := tableOf(t, r.tables, "orders")
	if n := len(tbl.Metadata().Snapshots()); n != 1 {
		t.Fatalf("%d snapshots after the delay; want 1, the removal", n)
	}
	everyFileExists(t, raw, r.tables, "orders")
}

// A deleted topic leaves its table in one commit, every partition at once
// (a cluster's controller, which clears the topic's objects for every
// node), with its history; a topic that never had a table gets none.
func TestForgetTopicLeavesTheTableEmptyInOneCommit(t *testing.T) {
	ctx := context.Background()
	raw, dir := localBucket(t)
	probe := &Tables{Bucket: raw, Prefix: "data", Location: dir, Log: quiet}
	r := newRig(t, raw, dir)
	produce(t, r.engine, "orders-0", 30, 0)
	produce(t, r.engine, "orders-1", 14, 100)
	r.run(t, map[string]uint64{})
	tbl, _, err := probe.load(ctx, "orders")
	if err != nil || len(liveFiles(t, probe, "orders")) == 0 {
		t.Fatalf("after tiering: %v, %d files in the table; want some", err, len(liveFiles(t, probe, "orders")))
	}
	version := func(metadata string) (n int) {
		fmt.Sscanf(path.Base(metadata), "%05d-", &n)
		return n
	}
	before := version(tbl.MetadataLocation())
	if err := probe.ForgetTopic(ctx, "orders", 2); err != nil {
		t.Fatal(err)
	}
	if live := liveFiles(t, probe, "orders"); len(live) != 0 {
		t.Fatalf("the deleted topic's table still names %d files", len(live))
	}
	v, err := probe.Describe(ctx, "orders")
	// One commit forgets every partition, and one expiry commit drops the
	// history, so no older snapshot names a key the topic made again
	// would upload to.
	if err != nil || len(v.Partitions) != 0 || v.Records != 0 || version(v.Metadata) != before+2 || v.Snapshots != 1 || v.Operation != "delete" {
		t.Fatalf("describe after the topic's deletion: %+v, %v; want no partitions, no records, one delete snapshot, two commits after metadata version %d", v, err, before)
	}
	if err := probe.ForgetTopic(ctx, "never", 3); err != nil {
		t.Fatal(err)
	}
	if _, _, err := probe.load(ctx, "never"); !errors.Is(err, errNoTable) {
		t.Fatalf("forgetting a topic with no table: %v; want no table made", err)
	}
}

// parquetObjects are the tiered objects of topic orders in the local
// bucket at dir (the table's own files apart).
func parquetObjects(t *testing.T, dir string) []string {
	t.Helper()
	var out []string
	err := filepath.WalkDir(filepath.Join(dir, "data", "topic=orders"), func(path string, d os.DirEntry, err error) error {
		switch {
		case err != nil:
			return err
		case d.IsDir() && d.Name() == "_iceberg":
			return filepath.SkipDir
		case strings.HasSuffix(path, ".parquet"):
			out = append(out, path)
		}
		return nil
	})
	if err != nil {
		t.Fatal(err)
	}
	return out
}

// A topic deleted and made again under its name starts a new table: the
// old one's files leave the bucket with its last partition, its position
// deletes too. Kept, they named the new topic's objects (which reuse the
// old keys, by offsets) and DuckDB applied them, hiding new records.
func TestATopicMadeAgainHasNoneOfTheOldTable(t *testing.T) {
	ctx := context.Background()
	raw, dir := localBucket(t)
	r := newRig(t, raw, dir)
	produce(t, r.engine, "orders-0", 30, 0)
	r.run(t, map[string]uint64{})
	m, err := tiering.ReadManifest(ctx, raw, "data/topic=orders/partition=0/_strata_manifest.json")
	if err != nil || len(m.Objects) < 2 {
		t.Fatalf("manifest: %v, %d objects; want several", err, len(m.Objects))
	}
	if err := r.engine.DeleteBefore(ctx, "orders-0", m.Objects[1].StartOffset+7); err != nil {
		t.Fatal(err)
	}
	r.run(t, map[string]uint64{})
	if v, err := r.tables.Describe(ctx, "orders"); err != nil || v.DeleteFiles == 0 {
		t.Fatalf("after DeleteRecords inside an object: %+v, %v; want a position delete", v, err)
	}
	if err := r.engine.DeleteShard(ctx, "orders-0"); err != nil {
		t.Fatal(err)
	}
	r.engine.SyncEvents()
	if left := parquetObjects(t, dir); len(left) != 0 {
		t.Fatalf("the deleted topic left %d objects", len(left))
	}
	if _, err := r.tables.Describe(ctx, "orders"); !errors.Is(err, ErrNoTable) {
		t.Fatalf("the deleted topic's table: %v; want none", err)
	}
	produced := produce(t, r.engine, "orders-0", 30, 0)
	tiered := map[string]uint64{}
	r.run(t, tiered)
	v, err := r.tables.Describe(ctx, "orders")
	if err != nil || v.DeleteFiles != 0 || v.HiddenRecords != 0 || v.Records != int64(tiered["orders-0"]) {
		t.Fatalf("the table of the topic made again: %+v, %v; want %d records and no delete file", v, err, tiered["orders-0"])
	}
	rows, _ := scan(t, r.tables, "orders", 0)
	sameRecords(t, "the topic made again", rows[0], produced[:tiered["orders-0"]])
}
