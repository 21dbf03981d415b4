package icetable

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"log/slog"
	"maps"
	"path"
	"slices"
	"strconv"
	"strings"
	"sync"
	"time"

	"github.com/apache/iceberg-go"
	icebergio "github.com/apache/iceberg-go/io"
	"github.com/apache/iceberg-go/table"
	"github.com/google/uuid"

	"strata/engine/store"
	"strata/tiering"
	"strata/tiering/objstore"
)

// Tables commits tiered objects to their topics' Iceberg tables, in the
// cold tier's bucket. It keeps no state between calls: every commit starts
// from the table's current metadata and the shards' manifests, so a process
// that died midway leaves nothing to recover but unreferenced files.
type Tables struct {
	Bucket objstore.Bucket
	// Prefix is tiering's (tiering.prefix): the topics' folders are under it.
	Prefix string
	// Location is the URI of the bucket's root as readers open it
	// ("s3://bucket/prefix", "hdfs://namenode:8020/root", "/data/cold"):
	// the tables' metadata and data files are named under it.
	Location string
	Log      *slog.Logger

	// Hadoop names the metadata files as Iceberg's Hadoop tables do
	// (iceberg.catalog: hadoop; hadoop.go), for Spark's HadoopCatalog and
	// path-based tables.
	Hadoop bool

	// The snapshot expiry policy (iceberg.snapshot_max_age,
	// iceberg.snapshot_min_keep): after each commit, snapshots older than
	// MaxSnapshotAge (24h) expire, but the last MinSnapshots (20) stay
	// whatever their age. The expired snapshots' manifest lists, and the
	// manifests and delete files only they named, are deleted once the
	// expiry lands; the metadata files past the last MinSnapshots go at
	// each commit. So the metadata stays bounded however many commits.
	MaxSnapshotAge time.Duration
	MinSnapshots   int
	// OrphanGrace: a file in a table's folder that no metadata names is
	// deleted once this old (1h; tiering.orphan_grace); younger ones may
	// be another writer's commit in flight.
	OrphanGrace time.Duration
	// FileDeleteDelay: the files a removal (retention, DeleteRecords)
	// takes from a table stay in the bucket this long after it, with the
	// snapshots that name them, for the scans begun before it (1m;
	// iceberg.file_delete_delay; negative: none); then they go
	// (retentionFloor).
	FileDeleteDelay time.Duration
	// MaintainEvery: a table's expiry and sweep follow its commits at
	// most this often (10m; iceberg.maintenance_interval; a deleted
	// topic's forget always); a negative value, after every commit.
	MaintainEvery time.Duration
	// Metrics, if set, counts the commits (NewMetrics).
	Metrics *Metrics
	// Lock, if set, is held around each commit of a topic's table: in a
	// cluster one node at a time commits a table (cluster.Member's
	// LockTable), instead of racing the pointer's swap.
	Lock func(ctx context.Context, topic string) (release func(), err error)

	cache      committedCache
	maintained sync.Map // topic -> time.Time of its last expiry and sweep
	reported   sync.Map // topic/fingerprint -> true: a schema changed outside, reported
	// external, if set (OpenCatalog), holds the tables' pointers in place
	// of the bucket's version-hint.text.
	external *external
}

func (t *Tables) maxSnapshotAge() time.Duration {
	if t.MaxSnapshotAge > 0 {
		return t.MaxSnapshotAge
	}
	return 24 * time.Hour
}

// maintenanceDue says whether the commit of topic's table just made is
// to be followed by its expiry and sweep (expireSnapshots), and if so
// marks it done now: at most once per MaintainEvery for each table in
// this process, the first commit after a start included. Each expiry and
// sweep reads every manifest and lists the table's folder, which after
// every commit cost more than the commit once the history was full.
func (t *Tables) maintenanceDue(topic string) bool {
	every := t.MaintainEvery
	if every == 0 {
		every = 10 * time.Minute
	}
	now := time.Now()
	if last, ok := t.maintained.Load(topic); ok && now.Sub(last.(time.Time)) < every {
		return false
	}
	t.maintained.Store(topic, now)
	return true
}

func (t *Tables) fileDeleteDelay() time.Duration {
	if t.FileDeleteDelay == 0 {
		return time.Minute
	}
	return max(t.FileDeleteDelay, 0)
}

func (t *Tables) minSnapshots() int {
	if t.MinSnapshots > 0 {
		return t.MinSnapshots
	}
	return 20
}

// retention is the table properties that bound its metadata files:
// iceberg-go deletes a metadata file once it leaves the metadata log.
func (t *Tables) retention() iceberg.Properties {
	return iceberg.Properties{
		table.MetadataDeleteAfterCommitEnabledKey: "true",
		table.MetadataPreviousVersionsMaxKey:      strconv.Itoa(t.minSnapshots()),
		// Each append writes a manifest, and a snapshot's manifest list
		// names every live one: merged, their count stays bounded too.
		table.ManifestMergeEnabledKey:  "true",
		table.ManifestMinMergeCountKey: "10",
	}
}

// Where a table's files go: under its topic's folder, in a folder whose
// leading underscore makes Spark, Hive and DuckDB's Hive-style discovery
// skip it, as they skip the shards' _strata_manifest.json.
const (
	tableFolder = "_iceberg"
	// hintName is the table's pointer: it names the current metadata file
	// (its name without ".metadata.json"), and a commit is the conditional
	// write that swaps it. DuckDB's iceberg_scan of the table's folder
	// reads it the same way.
	hintName = "version-hint.text"
)

// Dir is the object-name folder of a topic's table.
func (t *Tables) Dir(topic string) string {
	return path.Join(t.Prefix, "topic="+topic, tableFolder)
}

func (t *Tables) hintKey(topic string) string { return t.Dir(topic) + "/metadata/" + hintName }

// TableLocation is the table's location (its URI), as in its metadata.
func (t *Tables) TableLocation(topic string) string { return t.uri(t.Dir(topic)) }

func (t *Tables) uri(name string) string { return strings.TrimSuffix(t.Location, "/") + "/" + name }

// fsF is the file system of topic's table: the bucket, within the
// topic's folder, so nothing a table's metadata names outside it is read,
// written or deleted.
func (t *Tables) fsF(topic string) table.FSysF {
	return func(ctx context.Context) (icebergio.IO, error) {
		return fileIO{ctx: ctx, bucket: t.Bucket, base: strings.TrimSuffix(t.Location, "/"),
			within: path.Join(t.Prefix, "topic="+topic) + "/"}, nil
	}
}

func (t *Tables) log() *slog.Logger {
	if t.Log != nil {
		return t.Log
	}
	return slog.Default()
}

// CommitTables commits, for every topic among shards, the objects their
// manifests list that its table does not hold yet, and applies each
// shard's log start (the value; 0: keep the table's) to the table
// (tiering.Job.Tables). Shards not named {topic}-{partition} have no place
// in the bucket and are passed over. One topic's failure does not stop the
// others.
func (t *Tables) CommitTables(ctx context.Context, shards map[string]uint64) error {
	parts := map[string]map[int32]uint64{}
	for s, start := range shards {
		if tp, ok := store.ParseShard(s); ok {
			if parts[tp.Topic] == nil {
				parts[tp.Topic] = map[int32]uint64{}
			}
			parts[tp.Topic][tp.Partition] = start
		}
	}
	var errs []error
	for _, topic := range slices.Sorted(maps.Keys(parts)) {
		if _, err := t.Commit(ctx, topic, parts[topic]); err != nil {
			errs = append(errs, fmt.Errorf("the Iceberg table of topic %s: %w", topic, err))
		}
	}
	return errors.Join(errs...)
}

// RemoveBelow commits to the shard's topic's table the shard's new log
// start, before tiering removes the objects below it (retention,
// DeleteRecords): their files leave the table first, so no reader of the
// current snapshot is handed a file that is gone. A crash after this
// commit and before the removal leaves unreferenced objects only, which
// the next run removes (or the orphan sweep).
func (t *Tables) RemoveBelow(ctx context.Context, shard string, logStart uint64) error {
	tp, ok := store.ParseShard(shard)
	if !ok {
		return nil
	}
	if _, err := t.Commit(ctx, tp.Topic, map[int32]uint64{tp.Partition: logStart}); err != nil {
		return fmt.Errorf("the Iceberg table of topic %s, before removing %s's objects below offset %d: %w", tp.Topic, shard, logStart, err)
	}
	return nil
}

// Forget removes a deleted shard's partition from its topic's table
// (DeleteTopics), before its objects leave the bucket.
func (t *Tables) Forget(ctx context.Context, shard string) error {
	tp, ok := store.ParseShard(shard)
	if !ok {
		return nil
	}
	return t.forget(ctx, tp.Topic, []int32{tp.Partition})
}

// ForgetTopic removes every partition of a deleted topic from its table in
// one commit, before the topic's objects leave the bucket: in a cluster
// the controller clears a deleted topic's objects once, for every node
// (cluster.Config.ClearTopic), and no node's shard deletion forgets them.
func (t *Tables) ForgetTopic(ctx context.Context, topic string, partitions int32) error {
	all := make([]int32, partitions)
	for p := range all {
		all[p] = int32(p)
	}
	return t.forget(ctx, topic, all)
}

func (t *Tables) forget(ctx context.Context, topic string, partitions []int32) error {
	if _, _, err := t.load(ctx, topic); errors.Is(err, errNoTable) {
		return nil // a topic that never had a table gets none from its deletion
	}
	plan, err := t.plan(ctx, topic, func(committed map[int32]Range) Plan {
		return PlanForget(committed, partitions)
	})
	if err != nil {
		if ctx.Err() != nil {
			return err
		}
		// A table that cannot be read or committed (a file of it torn,
		// missing or outside the topic's folder, another topic's table in
		// its place, the bucket failing) must not keep a deleted topic's
		// name taken: every retry would fail alike. It goes with the
		// topic's folder (tiering), which removes the pointer first, and
		// nothing it names outside the folder is touched.
		t.log().Warn("a deleted topic's table could not commit its partitions' removal; it is left to the folder's removal",
			"topic", topic, "partitions", fmt.Sprint(partitions), "err", err)
		plan = Plan{}
	}
	if t.external != nil && len(plan.Offsets) == 0 {
		// The table's folder goes with the topic's last partition (tiering);
		// a row left in the catalog would name a metadata file that is gone,
		// and a topic made again under the name could not make its table.
		if err := t.external.drop(ctx, topic); err != nil {
			return fmt.Errorf("the Iceberg table of topic %s, dropping it from the catalog: %w", topic, err)
		}
	}
	return nil
}

// commitAttempts bounds how often one commit is planned again after another
// writer committed the table first.
const commitAttempts = 5

// Commit adds to the topic's table the objects the partitions' manifests
// list and the table does not hold, and removes the rows below each
// partition's log start (PlanCommit), creating the table first if there is
// none. partitions maps each partition to its log start (0: the table's
// floor stays). It returns the plan committed (Changes false: nothing to
// do).
//
// A commit that lost to another writer (the pointer changed since it was
// read) is planned again from the table as that writer left it. One whose
// result is unknown (an error after the pointer write was sent) is
// returned: the next call reloads the table, whose summary says whether it
// landed, so the objects are added once either way.
func (t *Tables) Commit(ctx context.Context, topic string, partitions map[int32]uint64) (Plan, error) {
	tiered := map[int32][]tiering.ManifestEntry{}
	starts := map[int32]uint64{}
	for _, p := range slices.Sorted(maps.Keys(partitions)) {
		loc := tiering.Location{Topic: topic, Partition: p}
		m, err := tiering.ReadManifest(ctx, t.Bucket, loc.ManifestKey(t.Prefix))
		if err != nil {
			return Plan{}, fmt.Errorf("reading partition %d's manifest: %w", p, err)
		}
		tiered[p] = m.Objects
		if s := partitions[p]; s > 0 {
			starts[p] = s
		}
	}
	plan, err := t.plan(ctx, topic, func(committed map[int32]Range) Plan {
		plan := PlanCommit(committed, tiered, starts)
		for _, f := range plan.Overlaps {
			t.log().Error("a tiered object overlaps the offsets the topic's table holds; it is not added",
				"topic", topic, "partition", f.Partition, "key", f.Key, "start_offset", f.StartOffset, "end_offset", f.EndOffset,
				"table_offsets", fmt.Sprint(committed[f.Partition]))
		}
		return plan
	})
	if err == nil && len(plan.Overlaps) > 0 {
		// The rest is committed; the run says the table is stuck there.
		f := plan.Overlaps[0]
		err = fmt.Errorf("%d tiered objects overlap the offsets the table holds and are not added, the first %s (offsets %d-%d of partition %d)",
			len(plan.Overlaps), f.Key, f.StartOffset, f.EndOffset, f.Partition)
	}
	return plan, err
}

// plan commits what planner makes of the table's current snapshot,
// planning again from the winner's table when another writer commits
// first.
func (t *Tables) plan(ctx context.Context, topic string, planner func(committed map[int32]Range) Plan) (Plan, error) {
	began := time.Now()
	if t.Lock != nil {
		release, err := t.Lock(ctx, topic)
		if err != nil {
			t.Metrics.done("failed", time.Since(began))
			return Plan{}, err
		}
		defer release()
	}
	plan, err := t.planAttempts(ctx, topic, planner)
	switch {
	case err != nil:
		t.Metrics.done("failed", time.Since(began))
	case plan.Changes():
		t.Metrics.done("committed", time.Since(began))
	default:
		t.Metrics.done("noop", time.Since(began))
	}
	return plan, err
}

func (t *Tables) planAttempts(ctx context.Context, topic string, planner func(committed map[int32]Range) Plan) (Plan, error) {
	for attempt := 1; ; attempt++ {
		tbl, _, err := t.load(ctx, topic)
		if err != nil && !errors.Is(err, errNoTable) {
			return Plan{}, err
		}
		committed := map[int32]Range{}
		if tbl != nil {
			if s := tbl.CurrentSnapshot(); s != nil && s.Summary != nil {
				if committed, err = Committed(s.Summary.Properties); err != nil {
					return Plan{}, fmt.Errorf("the current snapshot %d of %s: %w", s.SnapshotID, tbl.MetadataLocation(), err)
				}
			}
		}
		plan := planner(committed)
		if !plan.Changes() {
			// A topic gets its table with its first tiered object.
			t.cache.set(topic, committed)
			if tbl != nil {
				t.maintain(ctx, topic, tbl, false, false)
			}
			return plan, nil
		}
		if tbl == nil {
			if tbl, err = t.loadOrCreate(ctx, topic); err != nil {
				return Plan{}, err
			}
		}
		next, err := t.commit(ctx, tbl, plan)
		if err == nil {
			t.cache.set(topic, plan.Offsets)
			t.log().Info("the topic's table committed", "topic", topic, "files_added", len(plan.Add),
				"log_starts", fmt.Sprint(plan.Hide), "forgotten", fmt.Sprint(plan.Forget), "waiting", fmt.Sprint(plan.Waiting))
			t.maintain(ctx, topic, next, true, len(plan.Forget) > 0)
			return plan, nil
		}
		if !errors.Is(err, table.ErrCommitFailed) || attempt == commitAttempts {
			return Plan{}, err
		}
		t.Metrics.conflict()
		t.log().Info("another writer committed the topic's table first; planning again", "topic", topic, "err", err)
	}
}

// commit makes plan's snapshots in one transaction, so one pointer swap
// lands them all or none, in Plan.Steps' order: the rows below each new
// log start in the files the table holds, and forgotten partitions'
// files, deleted; plan's files appended; the rows below a log start inside
// an object just added deleted. The deletes are iceberg-go's merge-on-read
// ones: files wholly below a log start (by their offset bounds) are
// removed, and rows below it in a file that stays are hidden by a
// position-delete file. Each snapshot's summary carries the offsets that
// snapshot holds (Step.Offsets), so time travel to any of them reads what
// its summary says; the last one's are the plan's.
func (t *Tables) commit(ctx context.Context, tbl *table.Table, plan Plan) (*table.Table, error) {
	txn := tbl.NewTransaction()
	for k, v := range t.retention() {
		if tbl.Properties().Get(k, "") != v {
			// A table made before the expiry policy, or under another one.
			if err := txn.SetProperties(t.retention()); err != nil {
				return nil, err
			}
			break
		}
	}
	if topic := tbl.Properties()[propTopic]; tbl.Properties()[propSchema] != fingerprint(tbl.Schema()) {
		t.changedOutside(topic, tbl)
		if err := txn.SetProperties(iceberg.Properties{propSchema: fingerprint(tbl.Schema())}); err != nil {
			return nil, err
		}
	}
	mergeOnRead := false
	for _, step := range plan.Steps() {
		summary := step.Summary(plan)
		if step.Kind == StepAppend {
			files, err := t.dataFiles(tbl, plan.Add)
			if err != nil {
				return nil, err
			}
			// The plan is the duplicate check, from the summary: iceberg-go's own
			// reads every manifest of the table at each commit.
			if err := txn.AddDataFiles(ctx, files, summary, table.WithoutDuplicateCheck()); err != nil {
				return nil, err
			}
			continue
		}
		if !mergeOnRead && tbl.Properties().Get(table.WriteDeleteModeKey, "") != table.WriteModeMergeOnRead {
			// Position deletes, not a rewrite: the objects are tiering's,
			// and the Kafka cold reads read them.
			if err := txn.SetProperties(iceberg.Properties{table.WriteDeleteModeKey: table.WriteModeMergeOnRead}); err != nil {
				return nil, err
			}
		}
		mergeOnRead = true
		filter := step.deleteFilter()
		if err := txn.Delete(ctx, filter, summary); err != nil {
			return nil, fmt.Errorf("deleting %v: %w", filter, err)
		}
	}
	return txn.Commit(ctx)
}

// maintain follows a commit of the topic's table (committed), or a run
// that found nothing to commit, with the table's expiry and sweep when
// they are due: after a commit at most once per MaintainEvery; at once
// after a deleted partition's (forgot), with the whole history, since a
// deleted topic's objects leave the bucket now and a topic made again
// under the name uploads to the same keys, which no older snapshot's
// expiry may delete; and once a removal's FileDeleteDelay has passed
// (retentionFloor). An expiry that fails is left to the next call.
func (t *Tables) maintain(ctx context.Context, topic string, tbl *table.Table, committed, forgot bool) {
	keep, age := t.minSnapshots(), t.maxSnapshotAge()
	_, floor := retentionFloor(history(tbl), time.Now(), t.fileDeleteDelay())
	switch {
	case forgot:
		keep, age = 1, 0
	case floor: // expireSnapshots applies it
	case committed && t.maintenanceDue(topic):
	default:
		return
	}
	if err := t.expireSnapshots(ctx, tbl, keep, age); err != nil {
		t.log().Warn("expiring the topic's table's snapshots", "topic", topic, "err", err)
		t.maintained.Delete(topic)
	}
}

// expireSnapshots applies the expiry policy to the table as a commit
// left it: a commit of its own, whose pointer swap is the expiry (a crash
// before it leaves the snapshots; one after it, before the deletes, leaves
// unreferenced files for SweepOrphans). The current snapshot always
// stays, so what the table holds and its summary do not change.
func (t *Tables) expireSnapshots(ctx context.Context, tbl *table.Table, keep int, age time.Duration) error {
	if age > 0 { // the policy's expiry, not a deleted topic's whole history
		h, now, delay := history(tbl), time.Now(), t.fileDeleteDelay()
		if n, ok := retentionFloor(h, now, delay); ok {
			keep, age = n, 0
		} else if n := removedSince(h, now, delay); n > keep {
			keep = n
		}
	}
	if len(tbl.Metadata().Snapshots()) <= keep {
		return nil
	}
	txn := tbl.NewTransaction()
	if err := txn.ExpireSnapshots(table.WithRetainLast(keep), table.WithOlderThan(age),
		table.WithPostCommit(true)); err != nil {
		return err
	}
	next, err := txn.Commit(ctx)
	if err != nil {
		return err
	}
	return t.sweepOrphans(ctx, next)
}

// retentionFloor is how many snapshots of a table's history (history:
// the current one first) reach back to the newest that removed data files
// (retention, DeleteRecords, a deleted partition) at least delay ago: the
// table keeps no snapshot older than that one. So retention's objects
// leave the bucket with the retention, delay later (the scans begun
// before it finish, as Kafka's file.delete.delay.ms lets a fetch finish),
// and retention.ms and retention.bytes bound the bucket's bytes as they do
// without a table: time travel reaches back to the last removal, as a
// Kafka consumer's reach does. ok is false when there is nothing older to
// expire.
func retentionFloor(history []table.Snapshot, now time.Time, delay time.Duration) (n int, ok bool) {
	for i, s := range history[:max(len(history)-1, 0)] {
		if removesFiles(s) && now.Sub(time.UnixMilli(s.TimestampMs)) >= delay {
			return i + 1, true
		}
	}
	return 0, false
}

// removedSince is how many snapshots of a table's history (the current
// one first) reach back to the parent of its oldest removal of data files
// less than delay ago: those name the files the removal took, which stay
// for the delay whatever the expiry policy's count (0: no such removal).
func removedSince(history []table.Snapshot, now time.Time, delay time.Duration) int {
	n := 0
	for i, s := range history {
		if removesFiles(s) && now.Sub(time.UnixMilli(s.TimestampMs)) < delay {
			n = min(i+2, len(history))
		}
	}
	return n
}

// history is the table's snapshots from the current one back through its
// parents.
func history(tbl *table.Table) []table.Snapshot {
	cur := tbl.CurrentSnapshot()
	if cur == nil {
		return nil
	}
	meta := tbl.Metadata()
	return table.AncestorsOf(cur.SnapshotID, func(id int64) *table.Snapshot { return meta.SnapshotByID(id) })
}

// removesFiles says whether snapshot s removed data files: its summary's
// deleted-data-files, as Iceberg's spec names the count.
func removesFiles(s table.Snapshot) bool {
	if s.Summary == nil {
		return false
	}
	n, _ := strconv.Atoi(s.Summary.Properties["deleted-data-files"])
	return n > 0
}

// sweepOrphans deletes the files in the table's folder that no metadata
// names, once older than the grace: what a crashed commit or expiry left,
// and the manifests a commit wrote and merged away in the same commit.
// The data files (tiering's objects) are outside the folder and never
// swept here.
func (t *Tables) sweepOrphans(ctx context.Context, tbl *table.Table) error {
	grace := t.OrphanGrace
	if grace <= 0 {
		grace = time.Hour
	}
	res, err := tbl.DeleteOrphanFiles(ctx, table.WithFilesOlderThan(grace))
	if err != nil {
		return fmt.Errorf("sweeping %s: %w", tbl.Location(), err)
	}
	if n := len(res.DeletedFiles); n > 0 {
		t.log().Debug("unreferenced table files deleted", "table", tbl.Location(), "files", n)
	}
	return nil
}

// deleteFilter is the rows a delete step removes, of one partition:
// iceberg-go evaluates a delete's filter on the rows of the files it
// keeps, and those rows have no partition column (its value is the data
// file's): there "partition IS NULL" stands for the file's own partition,
// which the file's bounds and partition value select. One partition per
// filter, so a file of one partition never takes another's log start.
func (s Step) deleteFilter() iceberg.BooleanExpression {
	part := iceberg.Reference(ColPartition)
	if s.Kind == StepForget {
		return iceberg.EqualTo(part, s.Partition)
	}
	return iceberg.NewAnd(iceberg.NewOr(iceberg.EqualTo(part, s.Partition), iceberg.IsNull(part)),
		iceberg.LessThan(iceberg.Reference(ColOffset), int64(s.Below)))
}

func (t *Tables) dataFiles(tbl *table.Table, add []File) ([]iceberg.DataFile, error) {
	spec := tbl.Spec()
	id, err := fieldIDs(tbl.Schema(), spec)
	if err != nil {
		return nil, err
	}
	files := make([]iceberg.DataFile, 0, len(add))
	for _, f := range add {
		b, err := iceberg.NewDataFileBuilder(spec, iceberg.EntryContentData, t.uri(f.Key), iceberg.ParquetFile,
			map[int]any{id.partitionField: f.Partition}, nil, nil, int64(f.Records), f.ObjectBytes)
		if err != nil {
			return nil, fmt.Errorf("data file %s: %w", f.Key, err)
		}
		// Bounds from the manifest entry, so a reader prunes files by
		// offset, time and partition without opening them.
		rows := int64(f.Records)
		b.ValueCounts(map[int]int64{id.offset: rows, id.timestamp: rows, id.partition: rows}).
			NullValueCounts(map[int]int64{id.offset: 0, id.timestamp: 0, id.partition: 0}).
			LowerBoundValues(map[int][]byte{id.offset: longBound(int64(f.StartOffset)),
				id.timestamp: longBound(f.MinTimestamp * 1000), id.partition: intBound(f.Partition)}).
			UpperBoundValues(map[int][]byte{id.offset: longBound(int64(f.EndOffset)),
				id.timestamp: longBound(f.MaxTimestamp * 1000), id.partition: intBound(f.Partition)})
		files = append(files, b.Build())
	}
	return files, nil
}

func (t *Tables) ident(topic string) table.Identifier { return table.Identifier{"strata", topic} }

// load reads the topic's table as its pointer names it; errNoTable if
// there is none yet.
func (t *Tables) load(ctx context.Context, topic string) (*table.Table, objstore.Version, error) {
	if t.external != nil {
		tbl, err := t.external.load(ctx, topic)
		if err == nil {
			if err = t.own(topic, tbl.MetadataLocation(), tbl.Metadata()); err != nil {
				tbl = nil
			}
		}
		return tbl, "", err
	}
	raw, v, err := t.Bucket.ReadVersioned(ctx, t.hintKey(topic))
	switch {
	case errors.Is(err, objstore.ErrNotFound) && t.Hadoop:
		raw, v = nil, objstore.Absent // the folder's listing says
	case errors.Is(err, objstore.ErrNotFound):
		return nil, objstore.Absent, errNoTable
	case err != nil:
		return nil, "", err
	}
	stem := strings.TrimSpace(string(raw))
	if _, err := strconv.Atoi(stem); err == nil || t.Hadoop {
		// A Hadoop-style table's, or one that was before iceberg.catalog
		// changed: the next commit carries on from its version.
		if stem, err = t.hadoopCurrent(ctx, topic, stem); err != nil {
			return nil, "", err
		}
	} else if _, err := metadataVersion(stem); err != nil {
		return nil, "", fmt.Errorf("%s: %w: %w", t.hintKey(topic), errBadMetadata, err)
	}
	name := t.Dir(topic) + "/metadata/" + stem + ".metadata.json"
	b, err := objstore.ReadAll(ctx, t.Bucket, name)
	if err != nil {
		return nil, "", fmt.Errorf("the metadata %s names: %w", t.hintKey(topic), err)
	}
	meta, err := table.ParseMetadataBytes(b)
	if err != nil {
		return nil, "", fmt.Errorf("%s: %w: %w", name, errBadMetadata, err)
	}
	if err := t.own(topic, name, meta); err != nil {
		return nil, "", err
	}
	return table.New(t.ident(topic), meta, t.uri(name), t.fsF(topic), &bucketCatalog{t, topic}), v, nil
}

var errNoTable = errors.New("no table yet")

// errBadMetadata is wrapped when a table's pointer names metadata strata
// cannot take for the topic's table: not Iceberg metadata (a torn or
// foreign file: strata's own commits write each file whole), or another
// topic's table. Nothing is committed over it, and nothing it names is
// deleted; moving the file aside lets the next commit carry on from the
// one before.
var errBadMetadata = errors.New("unusable as this topic's table: strata commits over none of it (move the file aside, or point the catalog's row back)")

// own refuses metadata that is not the topic's table: another topic's
// (copied, restored or registered in its place), whose files hold that
// topic's records and whose expiry would delete them, or a table located
// outside the topic's folder.
func (t *Tables) own(topic, name string, meta table.Metadata) error {
	if of := meta.Properties().Get(propTopic, topic); of != topic {
		return fmt.Errorf("%s is the table of topic %q, not %q: %w", name, of, topic, errBadMetadata)
	}
	if loc := strings.TrimSuffix(meta.Location(), "/"); !strings.HasSuffix(loc, "/"+t.Dir(topic)) {
		return fmt.Errorf("%s is a table at %s, not in topic %s's folder (%s): %w", name, loc, topic, t.Dir(topic), errBadMetadata)
	}
	return nil
}

// propTopic is the table property naming the topic it is the table of.
const propTopic = "strata.topic"

// loadOrCreate loads the topic's table, creating it (with no snapshot) if
// there is none: its first metadata file, then the pointer, written only
// if still absent, so of two nodes creating it at once one table wins.
func (t *Tables) loadOrCreate(ctx context.Context, topic string) (*table.Table, error) {
	tbl, _, err := t.load(ctx, topic)
	if !errors.Is(err, errNoTable) {
		return tbl, err
	}
	spec := Spec()
	props := t.retention()
	maps.Copy(props, iceberg.Properties{
		table.PropertyFormatVersion: "2",
		// iceberg-go's own retry rebases a lost commit's files onto the
		// winner's snapshot without asking the planner, which could add an
		// object twice: Commit plans again instead.
		table.CommitNumRetriesKey: "0",
		propTopic:                 topic,
		propSchema:                fingerprint(Schema()),
	})
	if t.external != nil {
		tbl, err := t.external.create(ctx, topic, t.TableLocation(topic), props)
		if err != nil {
			return nil, fmt.Errorf("creating the table in the catalog: %w", err)
		}
		if _, err := fieldIDs(tbl.Schema(), tbl.Spec()); err != nil {
			return nil, err
		}
		return tbl, nil
	}
	meta, err := table.NewMetadata(Schema(), &spec, table.UnsortedSortOrder, t.TableLocation(topic), props)
	if err != nil {
		return nil, err
	}
	if _, err := fieldIDs(meta.CurrentSchema(), meta.PartitionSpec()); err != nil {
		return nil, err
	}
	if t.Hadoop {
		_, err = t.hadoopCommit(ctx, topic, 1, meta)
		if errors.Is(err, table.ErrCommitFailed) {
			err = objstore.ErrPreconditionFailed // another node made it
		}
	} else {
		stem := fmt.Sprintf("%05d-%s", 0, meta.TableUUID())
		if err := t.writeMetadata(ctx, topic, stem, meta); err != nil {
			return nil, err
		}
		err = t.Bucket.UploadIf(ctx, t.hintKey(topic), strings.NewReader(stem), objstore.Absent)
	}
	if err != nil && !errors.Is(err, objstore.ErrPreconditionFailed) {
		return nil, fmt.Errorf("creating the table: %w", err)
	}
	if err == nil {
		t.log().Info("the topic's Iceberg table created", "topic", topic, "location", t.TableLocation(topic))
	}
	tbl, _, err = t.load(ctx, topic) // ours, or the one another node made first
	return tbl, err
}

func (t *Tables) writeMetadata(ctx context.Context, topic, stem string, meta table.Metadata) error {
	raw, err := json.Marshal(meta)
	if err != nil {
		return err
	}
	name := t.Dir(topic) + "/metadata/" + stem + ".metadata.json"
	if err := t.Bucket.Upload(ctx, name, bytes.NewReader(raw)); err != nil {
		return fmt.Errorf("writing %s: %w", name, err)
	}
	return nil
}

// metadataVersion is the version a metadata file's stem starts with
// ("00003-{uuid}": 3).
func metadataVersion(stem string) (int, error) {
	if m := hadoopName.FindStringSubmatch(stem + ".metadata.json"); m != nil {
		return strconv.Atoi(m[1]) // v{N}: a Hadoop-style table's
	}
	n, _, ok := strings.Cut(stem, "-")
	v, err := strconv.Atoi(n)
	if !ok || err != nil || v < 0 {
		return 0, fmt.Errorf("%q does not name a metadata file ({version}-{uuid})", stem)
	}
	return v, nil
}

// bucketCatalog is the table's catalog for iceberg-go's transactions: the
// pointer in the bucket. A commit writes the new metadata file, then swaps
// the pointer to it if it still names the metadata the commit was based
// on; otherwise the commit failed cleanly (table.ErrCommitFailed) and the
// file written is unreferenced.
type bucketCatalog struct {
	t     *Tables
	topic string
}

func (c *bucketCatalog) LoadTable(ctx context.Context, _ table.Identifier) (*table.Table, error) {
	tbl, _, err := c.t.load(ctx, c.topic)
	return tbl, err
}

func (c *bucketCatalog) CommitTable(ctx context.Context, _ table.Identifier, reqs []table.Requirement, updates []table.Update) (table.Metadata, string, error) {
	cur, v, err := c.t.load(ctx, c.topic)
	if err != nil {
		return nil, "", err
	}
	for _, r := range reqs {
		if err := r.Validate(cur.Metadata()); err != nil {
			return nil, "", fmt.Errorf("%w: %w", table.ErrCommitFailed, err)
		}
	}
	updated, err := table.UpdateTableMetadata(cur.Metadata(), updates, cur.MetadataLocation())
	if err != nil {
		return nil, "", err
	}
	version, err := metadataVersion(strings.TrimSuffix(path.Base(cur.MetadataLocation()), ".metadata.json"))
	if err != nil {
		return nil, "", err
	}
	if c.t.Hadoop {
		stem, err := c.t.hadoopCommit(ctx, c.topic, version+1, updated)
		if err != nil {
			return nil, "", err
		}
		return updated, c.t.uri(c.t.Dir(c.topic) + "/metadata/" + stem + ".metadata.json"), nil
	}
	// A new name every time: a commit that loses the pointer race leaves
	// its file unreferenced rather than over the winner's.
	stem := fmt.Sprintf("%05d-%s", version+1, uuid.NewString())
	if err := c.t.writeMetadata(ctx, c.topic, stem, updated); err != nil {
		return nil, "", err
	}
	err = c.t.Bucket.UploadIf(ctx, c.t.hintKey(c.topic), strings.NewReader(stem), v)
	if errors.Is(err, objstore.ErrPreconditionFailed) {
		return nil, "", fmt.Errorf("%w: the table's pointer changed since it was read: %w", table.ErrCommitFailed, err)
	}
	if err != nil {
		return nil, "", fmt.Errorf("swapping the table's pointer (the commit may or may not have landed): %w", err)
	}
	return updated, c.t.uri(c.t.Dir(c.topic) + "/metadata/" + stem + ".metadata.json"), nil
}
