// Package segment is the File Segment engine (docs/design.md): each shard
// is a series of append-only segment files written by a fixed pool of I/O
// workers that batch requests, fsync once per batch and write all index
// entries of the batch in one Pebble batch; reads find a position through
// the sparse offset index and scan the mmap'd file.
package segment

import (
	"context"
	"fmt"
	"hash/fnv"
	"log/slog"
	"os"
	"sort"
	"sync"
	"sync/atomic"
	"time"

	"github.com/cockroachdb/pebble"
	"github.com/cockroachdb/pebble/vfs"

	"strata/engine/index"
	"strata/engine/leaderepoch"
	"strata/engine/sharedfile"
	"strata/engine/store"
)

// FsyncPolicy says when appended bytes are forced to disk.
type FsyncPolicy string

const (
	// FsyncBatch: nothing is acknowledged before it is on disk (default).
	FsyncBatch FsyncPolicy = "batch"
	// FsyncInterval: fsync every FsyncInterval; a crash of the machine can
	// lose what was acknowledged since the last one.
	FsyncInterval FsyncPolicy = "interval"
	// FsyncNone: leave it to the OS; a machine crash can lose anything not
	// yet written back. A process crash loses nothing acknowledged.
	FsyncNone FsyncPolicy = "none"
)

// Config tunes the engine; zero values take the defaults in parentheses.
type Config struct {
	// Dir holds the segment folders and the Pebble database of the
	// indexes and the manifest.
	Dir string
	// Workers is the I/O pool size (16).
	Workers int
	Fsync   FsyncPolicy
	// FsyncInterval for FsyncInterval (100ms).
	FsyncInterval time.Duration
	// IndexInterval: one offset-index point per this many records (500).
	IndexInterval int
	// IndexMemoryBytes bounds the in-memory offset points of all segments
	// (points.go): about 8 bytes per 4 KiB of segment data written since
	// the engine opened, so the default (64 MiB) covers 32 GiB; past it
	// the oldest sealed segments' lookups go back to the durable index.
	IndexMemoryBytes int64
	// TimeIndexGranularity: one time-index entry per this much growth of
	// the shard's largest timestamp (1s).
	TimeIndexGranularity time.Duration
	// MaxSegmentBytes caps a segment file (1 GiB).
	MaxSegmentBytes int64
	// RollCheckInterval: the size gate is checked when the written offset
	// crosses a multiple of this (10,000), as in docs/design.md.
	RollCheckInterval uint64
	// MaxSegmentAge seals a segment this long after its first record, so a
	// quiet shard still tiers (0: never).
	MaxSegmentAge time.Duration
	// TopicSegments, if set, gives a topic's own segment size and age
	// (its segment.bytes and segment.ms; a zero field: the engine's). It is
	// asked when a shard opens and at every tick (at least once a second),
	// so a change applies from the shard's next roll check.
	TopicSegments func(topic string) SegmentPolicy
	// FileModel, if set, gives a topic's file model (its strata.file.model):
	// ModelShared puts a new shard of the topic in the shared files
	// (shared.go); anything else, the partition model. It is asked once,
	// when the shard is created: a shard keeps its model for life.
	FileModel func(topic string) string
	// SharedFileBytes seals a shared file once a batch takes it to this
	// size (MaxSegmentBytes).
	SharedFileBytes int64
	// MaxBatchRequests and MaxBatchBytes bound one worker batch (1024, 16 MiB).
	MaxBatchRequests int
	MaxBatchBytes    int
	// FS is where the engine writes: its segment files, folders,
	// tombstones and both Pebble databases (vfs.Default). Reads go to the
	// OS files at the same paths, so it must be backed by them; tests wrap
	// vfs.Default to record or fail operations (docs/engine.md).
	FS vfs.FS
	// Events are told what happens to shards and segments.
	Events EventListener
	// DeleteRetryInterval: a deleted shard whose ShardDeleted listener
	// failed (the bucket refused the table's forget or the objects'
	// removal) is told again this often (10s) until it succeeds, and its
	// name is refused to CreateShard till then (store.ErrShardDeleting).
	DeleteRetryInterval time.Duration
	Logger              *slog.Logger
	Now                 func() time.Time
}

func (c *Config) defaults() {
	if c.Workers <= 0 {
		c.Workers = 16
	}
	if c.Fsync == "" {
		c.Fsync = FsyncBatch
	}
	if c.FsyncInterval <= 0 {
		c.FsyncInterval = 100 * time.Millisecond
	}
	if c.IndexInterval <= 0 {
		c.IndexInterval = 500
	}
	if c.IndexMemoryBytes <= 0 {
		c.IndexMemoryBytes = 64 << 20
	}
	if c.TimeIndexGranularity <= 0 {
		c.TimeIndexGranularity = time.Second
	}
	if c.MaxSegmentBytes <= 0 {
		c.MaxSegmentBytes = 1 << 30
	}
	if c.DeleteRetryInterval <= 0 {
		c.DeleteRetryInterval = 10 * time.Second
	}
	if c.RollCheckInterval == 0 {
		c.RollCheckInterval = 10_000
	}
	if c.SharedFileBytes <= 0 {
		c.SharedFileBytes = c.MaxSegmentBytes
	}
	if c.MaxBatchRequests <= 0 {
		c.MaxBatchRequests = 1024
	}
	if c.MaxBatchBytes <= 0 {
		c.MaxBatchBytes = 16 << 20
	}
	if c.FS == nil {
		c.FS = vfs.Default
	}
	if c.Logger == nil {
		c.Logger = slog.Default()
	}
	if c.Now == nil {
		c.Now = time.Now
	}
}

// SegmentPolicy is when a topic's active segments roll: at MaxBytes, or
// MaxAge after their first record (0: never by age).
type SegmentPolicy struct {
	MaxBytes int64
	MaxAge   time.Duration
}

// indexCacheBytes is the index database's block cache, memtables included
// (Pebble counts them against it): room for two 4 MiB memtables and 24 MiB
// of index blocks.
const indexCacheBytes = 32 << 20

// Engine is the File Segment engine. It implements store.Store.
type Engine struct {
	cfg      Config
	log      *slog.Logger
	lock     *os.File   // flock'd: one process per data folder
	index    *pebble.DB // derived from the segments: rebuilt when lost
	manifest *pebble.DB // what the engine holds (manifest.go)
	events   *events
	workers  []*worker
	// manifestMu orders the manifest writes that change a shard's entry.
	manifestMu sync.Mutex

	mu       sync.RWMutex
	shards   map[string]*shard
	deleting map[string]chan struct{} // closed when the shard's deletion ends
	// owed holds the deleted shards whose ShardDeleted listener failed:
	// retried every DeleteRetryInterval (retryDeletions), their names
	// refused to CreateShard till it succeeds.
	owed map[string]owedDeletion
	// creating holds the names of shards a create has recorded and not yet
	// served; building counts those creates, which Close waits for.
	creating map[string]struct{}
	building sync.WaitGroup
	closed   bool
	cold     ColdSource

	stats Stats
	// points bounds the segments' in-memory offset points (points.go).
	points pointBudget

	retiredMu sync.Mutex
	retired   []retiredSegment

	// shared is the shared files' folder (shared.go): nil until the first
	// shared-model shard, or a start that finds the folder.
	shared    atomic.Pointer[sharedfile.Dir]
	sharedMu  sync.Mutex                    // opens shared; orders file removal
	recovered map[uint64][]sharedfile.Chunk // Open's scan of unsealed files, for recovery
	// damagedFiles are the shared files Open found damaged inside.
	damagedFiles map[uint64][]*sharedfile.CorruptError
	// unmarkedFiles are the unsealed shared files Open found with chunks
	// and no synced mark under fsync=batch (why none, by file number):
	// their shards may have lost acknowledged chunks, reported per shard.
	unmarkedFiles map[uint64]string
	// cleanStart: the last Close left every chunk entry durable (markClean)
	// and the index is that one (indexKept).
	cleanStart, indexKept bool
	// oldMarks: the index holds synced marks of the earlier version
	// ('y' keys), which recovery moves to mark files (remark).
	oldMarks bool

	stop chan struct{}
	bg   sync.WaitGroup // workers
	tick sync.WaitGroup // the ticker, which sends to workers
	// marks takes the tick's fsyncs of the synced marks off the workers
	// (fsync=batch; nil under the other policies): synced.go.
	marks *markSyncer
}

var (
	_ store.Store   = (*Engine)(nil)
	_ store.Replica = (*Engine)(nil)
	_ store.Viewer  = (*Engine)(nil)
	_ store.Starter = (*Engine)(nil)
	_ store.Epochs  = (*Engine)(nil)
)

// shard is one log. Readers take mu.RLock for a consistent view of the
// segments and watermarks; the worker takes mu.Lock to publish.
type shard struct {
	name    string
	dir     string
	created time.Time // tells incarnations of one name apart
	// files is where its records live: segment files of its own or
	// chunks in the shared files (model.go).
	files    fileModel
	worker   *worker
	maxBytes int64         // segment size cap (worker-owned once open)
	maxAge   time.Duration // seal this long after the first record (0: never)

	// sealedMu is held while a sealed segment is replaced or dropped (a
	// cleaning, DropLocal, retention), so none drops or replaces what
	// another just changed.
	sealedMu sync.Mutex

	mu       sync.RWMutex
	segments []*segment // ascending; the last is active
	// last is the active segment, for the worker to reach without the
	// lock: tiering and retention drop segments from the front of the
	// slice under it, never the active one.
	last      atomic.Pointer[segment]
	low, high uint64 // readable [low, high): high is the high watermark
	// end is the log end: the next offset to be written, published once
	// durable. high follows it until managed (replica.go).
	end     uint64
	managed bool
	// activeLen is the durable length of the active segment: readers never
	// look past it, so they never see a batch still being written.
	activeLen int64
	// activeMaxTS is the active segment's largest timestamp, if it has records.
	activeMaxTS   int64
	activeHasRecs bool

	// Worker-owned.
	sinceIndex int   // records since the last offset-index entry
	tsBucket   int64 // running-max timestamp bucket of the last time entry
	tsIndexed  bool  // a time entry exists
	failed     error // a failed fsync: refuse writes until restart
	dirty      bool  // written since the last fsync (interval policy)
	dictated   bool  // a copy of a leader's log: rolls only by RollAt
	// markDirty: the synced mark (synced.go) was written since its last
	// fsync.
	markBuf   []byte
	markDirty bool
	// offsets is the offset-index group the next point joins; reset where
	// the index is cut or rebuilt, so a new group starts past its last point.
	offsets index.OffsetGroup

	// hwMu orders SetHighWatermark with TruncateTo; hwSaved: the high
	// watermark file exists (replica.go).
	hwMu    sync.Mutex
	hwSaved bool

	// damage is the first damage found in the local copy (damage.go).
	damage atomic.Pointer[LocalDamage]

	// epochMu guards epochs, the leader-epoch history (epochs.go), and
	// orders AssignEpoch with TruncateTo (taken after hwMu).
	epochMu sync.Mutex
	epochs  leaderepoch.History
}

// workerFor picks the worker of a new shard: the one with the fewest
// shards, so as many files are written and fsynced at once as there are
// workers. A hash of the name put the 16 partitions "a-0".."a-15" on only 9
// of 16 workers (two shards' fsyncs in series on 7 of them). Ties go to the
// worker the name hashes to, so one shard on an idle pool keeps its place.
// The caller holds e.mu (or is Open, before any other goroutine runs), and
// counts the shard in (worker.shards) before it picks the next shard's.
func (e *Engine) workerFor(name string) *worker {
	h := fnv.New32a()
	h.Write([]byte(name))
	n := len(e.workers)
	first := int(h.Sum32() % uint32(n))
	best := e.workers[first]
	for i := 1; i < n; i++ {
		if w := e.workers[(first+i)%n]; w.shards < best.shards {
			best = w
		}
	}
	return best
}

func (e *Engine) shard(name string) (*shard, error) {
	e.mu.RLock()
	defer e.mu.RUnlock()
	if e.closed {
		return nil, store.ErrClosed
	}
	sh, ok := e.shards[name]
	if !ok {
		return nil, fmt.Errorf("shard %q: %w", name, store.ErrUnknownShard)
	}
	return sh, nil
}

// segmentPolicies is segmentPolicy asking TopicSegments once a topic: a
// tick asks for every shard of a worker, and resolving a topic's configs
// for each of 10,000 partitions every second was 2.5% of the server's CPU
// while producing to them.
func (e *Engine) segmentPolicies() func(shard string) (int64, time.Duration) {
	type policy struct {
		maxBytes int64
		maxAge   time.Duration
	}
	byTopic := map[string]policy{}
	return func(shard string) (int64, time.Duration) {
		tp, _ := store.ParseShard(shard)
		p, ok := byTopic[tp.Topic]
		if !ok {
			p.maxBytes, p.maxAge = e.segmentPolicy(shard)
			byTopic[tp.Topic] = p
		}
		return p.maxBytes, p.maxAge
	}
}

// segmentPolicy is a shard's segment size cap and maximum age: its topic's,
// else the engine's.
func (e *Engine) segmentPolicy(shard string) (int64, time.Duration) {
	maxBytes, maxAge := e.cfg.MaxSegmentBytes, e.cfg.MaxSegmentAge
	if e.cfg.TopicSegments != nil {
		tp, _ := store.ParseShard(shard)
		p := e.cfg.TopicSegments(tp.Topic)
		if p.MaxBytes > 0 {
			maxBytes = p.MaxBytes
		}
		if p.MaxAge > 0 {
			maxAge = p.MaxAge
		}
	}
	return maxBytes, maxAge
}

// Shards lists the shards in name order.
func (e *Engine) Shards(ctx context.Context) ([]string, error) {
	e.mu.RLock()
	defer e.mu.RUnlock()
	names := make([]string, 0, len(e.shards))
	for n := range e.shards {
		names = append(names, n)
	}
	sort.Strings(names)
	return names, nil
}

// Stats counts the engine's work since it opened.
type Stats struct {
	Batches atomic.Uint64 // worker batches with at least one append
	Fsyncs  atomic.Uint64
	Records atomic.Uint64
	Bytes   atomic.Uint64
	// Damaged counts shards found at start with damage in their active
	// segment's synced bytes (DamagedError): they serve reads and refuse
	// writes.
	Damaged atomic.Uint64
	// CutBytes counts the bytes of torn tails (past the synced mark)
	// recovery cut off active segments at start.
	CutBytes atomic.Uint64
	// Unmarked counts active segments (and shared files) found at start
	// under fsync=batch holding bytes but no synced mark that checks out:
	// what recovery cut, or a cut before it, may have held acknowledged
	// records, and nothing tells (docs/engine.md, "Recovery").
	Unmarked atomic.Uint64
}

// Stats returns the engine's counters.
func (e *Engine) Stats() *Stats { return &e.stats }

// MaxTimestamp returns the largest record timestamp of a shard's readable
// segments (Kafka's ListOffsets MAX_TIMESTAMP); ok is false if none has one.
func (e *Engine) MaxTimestamp(ctx context.Context, name string) (ts int64, ok bool, err error) {
	sh, err := e.shard(name)
	if err != nil {
		return 0, false, err
	}
	sh.mu.RLock()
	low, ts, ok := sh.low, sh.activeMaxTS, sh.activeHasRecs
	sh.mu.RUnlock()
	segs, err := loadSegments(e.manifest, name)
	if err != nil {
		return 0, false, err
	}
	for _, s := range segs {
		if s.State == SegmentActive || s.Records == 0 || s.EndOffset < low {
			continue
		}
		if !ok || s.MaxTimestamp > ts {
			ts, ok = s.MaxTimestamp, true
		}
	}
	return ts, ok, nil
}

// ActiveBytes is the durable size of a shard's active segment.
func (e *Engine) ActiveBytes(name string) (int64, error) {
	v, err := e.view(name)
	if err != nil {
		return 0, err
	}
	return v.activeLen, nil
}

// LocalBytes is the bytes of a shard's segments on this node's disk: the
// sealed segments not yet dropped after tiering, and the active one's
// durable length (Kafka's DescribeLogDirs size; the cluster's load). It
// is what the manifest says (its sealed segments' sizes), from the
// shard's segments in memory, which change with it (rolls, tiering's
// drops, retention, truncation): reading the manifest took 60-190 us a
// shard, and the cluster's load sweep asks for every shard.
func (e *Engine) LocalBytes(name string) (int64, error) {
	sh, err := e.shard(name)
	if err != nil {
		return 0, err
	}
	sh.mu.RLock()
	defer sh.mu.RUnlock()
	n := sh.activeLen
	for _, s := range sh.segments[:len(sh.segments)-1] { // the last is the active one
		n += s.size
	}
	return n, nil
}
