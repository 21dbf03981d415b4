// Package segment is the File Segment engine (docs/design.md): each shard
// is a series of append-only segment files written by a fixed pool of I/O
// workers that batch requests, fsync once per batch and write all index
// entries of the batch in one Pebble batch; reads find a position through
// the sparse offset index and scan the mmap'd file.
package segment

import (
	"context"
	"encoding/binary"
	"errors"
	"fmt"
	"hash/fnv"
	"io"
	"log/slog"
	"os"
	"path/filepath"
	"sort"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"syscall"
	"time"

	"github.com/cockroachdb/pebble"
	"github.com/cockroachdb/pebble/vfs"

	"strata/engine/index"
	"strata/engine/leaderepoch"
	"strata/engine/record"
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
	Logger *slog.Logger
	Now    func() time.Time
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
	// cleanStart: the last Close left every chunk entry durable (markClean)
	// and the index is that one (indexKept).
	cleanStart, indexKept bool

	stop chan struct{}
	bg   sync.WaitGroup // workers
	tick sync.WaitGroup // the ticker, which sends to workers
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

// Open opens or creates the engine in cfg.Dir and recovers every shard.
func Open(cfg Config) (*Engine, error) {
	cfg.defaults()
	if cfg.Dir == "" {
		return nil, errors.New("segment engine: no data folder")
	}
	if err := cfg.FS.MkdirAll(cfg.Dir, 0o755); err != nil {
		return nil, err
	}
	lock, err := lockDir(cfg.Dir)
	if err != nil {
		return nil, err
	}
	man, err := pebble.Open(filepath.Join(cfg.Dir, "manifest"), &pebble.Options{FS: cfg.FS, Logger: quietLogger{}})
	if err != nil {
		lock.Close()
		return nil, fmt.Errorf("manifest: %w", err)
	}
	// Pebble's memtables reserve their size out of the block cache: with
	// its default 8 MiB cache and 4 MiB memtables, a flushed memtable not
	// yet released beside the live one left no room at all, and every
	// lookup read and decompressed its index block from the file.
	// A lost index is rebuilt from the data: a shared shard's chunk
	// entries too, whatever the last Close said (markClean).
	_, statErr := cfg.FS.Stat(filepath.Join(cfg.Dir, "index"))
	idxCache := pebble.NewCache(indexCacheBytes)
	idx, err := pebble.Open(filepath.Join(cfg.Dir, "index"), &pebble.Options{FS: cfg.FS, Logger: quietLogger{}, Cache: idxCache})
	idxCache.Unref() // the database holds its own reference
	if err != nil {
		man.Close()
		lock.Close()
		return nil, fmt.Errorf("index: %w", err)
	}
	e := &Engine{cfg: cfg, log: cfg.Logger, lock: lock, index: idx, manifest: man, events: newEvents(cfg.Logger),
		shards: map[string]*shard{}, deleting: map[string]chan struct{}{}, creating: map[string]struct{}{}, stop: make(chan struct{}), indexKept: statErr == nil}
	e.points.limit = cfg.IndexMemoryBytes
	for i := 0; i < cfg.Workers; i++ {
		w := newWorker(e, i)
		e.workers = append(e.workers, w)
		e.bg.Add(1)
		go func() { defer e.bg.Done(); w.run() }()
	}
	shards, err := loadShards(man)
	if err == nil {
		shards, err = e.finishDeletes(shards)
	}
	if err == nil {
		err = e.openSharedAtStart(shards)
	}
	if err == nil {
		for _, s := range shards {
			if s.Model == ModelShared {
				continue
			}
			if err = e.recoverShard(s); err != nil {
				break
			}
		}
	}
	if err == nil {
		err = e.recoverShared(shards)
		e.recovered, e.damagedFiles = nil, nil
	}
	if err == nil {
		err = e.sweepShared()
	}
	if err != nil {
		e.Close()
		return nil, err
	}
	if f := cfg.Events.ShardRecovered; f != nil {
		for _, m := range shards {
			segs, err := loadSegments(man, m.Name)
			if err != nil {
				e.Close()
				return nil, err
			}
			m.LowWatermark = e.shards[m.Name].low
			e.events.post("shard recovered", func() error { return f(m, segs) })
		}
	}
	if cfg.MaxSegmentAge > 0 || cfg.Fsync == FsyncInterval || cfg.TopicSegments != nil {
		e.tick.Add(1)
		go func() { defer e.tick.Done(); e.ticker() }()
	}
	return e, nil
}

// ticker asks workers to seal old segments and, under the interval
// policy, to fsync.
func (e *Engine) ticker() {
	period := e.cfg.FsyncInterval
	if e.cfg.MaxSegmentAge > 0 && (e.cfg.Fsync != FsyncInterval || e.cfg.MaxSegmentAge/4 < period) {
		period = max(e.cfg.MaxSegmentAge/4, 10*time.Millisecond)
	}
	if e.cfg.TopicSegments != nil && (period > time.Second || (e.cfg.MaxSegmentAge == 0 && e.cfg.Fsync != FsyncInterval)) {
		period = time.Second // a topic's segment.ms may be shorter than the engine's
	}
	t := time.NewTicker(period)
	defer t.Stop()
	for {
		select {
		case <-e.stop:
			return
		case <-t.C:
			for _, w := range e.workers {
				select {
				case w.ch <- request{tick: true}:
				default: // busy: its own batches will catch up
				}
			}
		}
	}
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

// CreateShard makes a shard whose log begins at offset 0.
func (e *Engine) CreateShard(ctx context.Context, name string) error {
	return e.CreateShardAt(ctx, name, 0)
}

// CreateShardAt records the shard in the manifest, its low watermark and
// its first segment's start offset both start, and creates that segment.
// A shard of the same name still being deleted is waited for, and a folder
// an earlier shard of that name left behind is moved aside, so the new
// shard starts empty whatever happened before.
func (e *Engine) CreateShardAt(ctx context.Context, name string, start uint64) error {
	return e.createShards(ctx, []string{name}, start)
}

// CreateShards makes shards whose logs begin at offset 0, as CreateShard
// makes each, in one step (store.BatchCreator): one manifest commit for
// all of them, their folders and first segments made, each folder synced,
// then the data folder synced once. One by one, a topic of 10,000
// partitions paid 10,000 manifest commits and data-folder syncs, each
// waiting on the disk. All or none: if one exists, ErrShardExists naming
// it and none is made; a crash leaves all of them in the manifest (the
// next start makes what it left unmade, as for one shard) or none.
func (e *Engine) CreateShards(ctx context.Context, names []string) error {
	return e.createShards(ctx, names, 0)
}

func (e *Engine) createShards(ctx context.Context, names []string, start uint64) (err error) {
	if len(names) == 0 {
		return nil
	}
	// The shared files open before e.mu is taken: their sweep takes
	// sharedMu, then e.mu.
	var d *sharedfile.Dir
	models := make([]string, len(names)) // each shard's file model (model.go)
	seen := make(map[string]bool, len(names))
	for i, name := range names {
		if err := store.ValidateShard(name); err != nil {
			return err
		}
		if seen[name] {
			return fmt.Errorf("shard %q is named twice in one create", name)
		}
		seen[name] = true
		if e.cfg.FileModel == nil {
			continue
		}
		if tp, _ := store.ParseShard(name); e.cfg.FileModel(tp.Topic) == ModelShared {
			models[i] = ModelShared
			if d == nil {
				var err error
				if d, err = e.openShared(); err != nil {
					return fmt.Errorf("shard %s: %w", name, err)
				}
			}
		}
	}
	shs, segs, err := e.recordShards(ctx, names, models, d, start)
	if err != nil {
		return err
	}
	published := false
	defer func() {
		e.mu.Lock()
		// A create that failed is undone, so a topic reported as not
		// created does not come back whole at the next start; not when
		// the engine closed meanwhile (the next start makes the shards).
		undo := !published && !e.closed
		for _, sh := range shs {
			if !published {
				sh.worker.shards--
				for _, s := range sh.segments {
					if s.wf != nil {
						s.wf.Close()
					}
				}
			}
		}
		e.mu.Unlock()
		if undo {
			e.undoCreate(shs)
		}
		e.mu.Lock()
		for _, sh := range shs {
			delete(e.creating, sh.name)
		}
		e.mu.Unlock()
		e.building.Done()
	}()
	crashPoint("create:manifest")
	// From here a crash leaves the shards in the manifest, not served:
	// the next start recovers them, making what is missing. The folders,
	// the files and the folders' syncs are made without e.mu (appends to
	// other shards go on), by as many goroutines as there are workers: a
	// folder's sync waits on the disk (0.2-1 ms here), and concurrent ones
	// share its flushes (10,000 in series took 5-7 s, 16 at a time 3-10
	// times less).
	err = inParallel(len(shs), len(e.workers), func(i int) error {
		if err := e.clearStale(shs[i].dir); err != nil {
			return err
		}
		if err := e.cfg.FS.MkdirAll(shs[i].dir, 0o755); err != nil {
			return fmt.Errorf("shard %s: make its folder: %w", shs[i].name, err)
		}
		return nil
	})
	if err != nil {
		return err
	}
	crashPoint("create:mkdir")
	err = inParallel(len(shs), len(e.workers), func(i int) error {
		s, err := e.openActiveFile(shs[i], segs[i], true)
		if err != nil {
			return err
		}
		shs[i].segments = []*segment{s}
		return nil
	})
	if err != nil {
		return err
	}
	crashPoint("create:files")
	err = inParallel(len(shs), len(e.workers), func(i int) error {
		if err := shs[i].files.created(e, shs[i]); err != nil {
			return fmt.Errorf("shard %s: sync its folder after opening segment 0: %w", shs[i].name, err)
		}
		return nil
	})
	if err != nil {
		return err
	}
	crashPoint("create:segment")
	// Before the shards are served: nothing is acknowledged in a folder
	// a power cut could lose.
	if err := syncDir(e.cfg.FS, e.cfg.Dir); err != nil {
		return fmt.Errorf("sync the data folder after making the folders of %d shards (%s...): %w", len(names), names[0], err)
	}
	e.mu.Lock()
	defer e.mu.Unlock()
	if e.closed {
		return store.ErrClosed
	}
	for i, sh := range shs {
		sh.last.Store(sh.segments[0])
		sh.mu.Lock()
		sh.publishEnd(start)
		sh.mu.Unlock()
		e.shards[sh.name] = sh
		e.postShardCreated(sh.meta(start), segs[i])
	}
	published = true
	return nil
}

// undoCreate takes the shards of a failed create out of the manifest (one
// synced batch), then removes their folders. If that fails too, the
// shards stay for the next start to recover, as after a crash.
func (e *Engine) undoCreate(shs []*shard) {
	b := e.manifest.NewBatch()
	defer b.Close()
	for _, sh := range shs {
		p := index.Prefix(kindSegment, sh.name)
		b.DeleteRange(p, index.UpperBound(p), nil)
		b.Delete(shardKey(sh.name), nil)
	}
	if err := b.Commit(pebble.Sync); err != nil {
		e.log.Error("undoing a failed create; the next start recovers its shards", "shards", len(shs), "first", shs[0].name, "err", err)
		return
	}
	for _, sh := range shs {
		if err := e.cfg.FS.RemoveAll(sh.dir); err != nil {
			e.log.Warn("removing the folder of a shard whose create failed", "dir", sh.dir, "err", err)
		}
	}
}

// recordShards commits the shards of a create to the manifest, in one
// batch, under e.mu (which orders the shared shards' id counter), and
// reserves their names (e.creating) until the create ends; Close waits
// for it (e.building).
func (e *Engine) recordShards(ctx context.Context, names []string, models []string, d *sharedfile.Dir, start uint64) ([]*shard, []SegmentMeta, error) {
	e.mu.Lock()
	defer e.mu.Unlock()
	if err := e.awaitCreatable(ctx, names); err != nil {
		return nil, nil, err
	}
	now := e.cfg.Now().UTC()
	metas := make([]ShardMeta, len(names))
	segs := make([]SegmentMeta, len(names))
	b := e.manifest.NewBatch()
	defer b.Close()
	var id, from uint64
	if d != nil {
		var err error
		if id, err = readCounter(e.manifest, "shard-id"); err != nil {
			return nil, nil, err
		}
		// A shard's first chunk may go into a writer's file already open.
		from = d.FirstOpen()
	}
	for i, name := range names {
		metas[i] = ShardMeta{Name: name, Created: now, LowWatermark: start}
		if models[i] == ModelShared {
			id++ // ids start at 1
			metas[i].Model, metas[i].ID, metas[i].FromFile = ModelShared, id, from
		}
		segs[i] = SegmentMeta{Shard: name, No: 0, State: SegmentActive, StartOffset: start, Created: now}
		if err := putShard(b, metas[i]); err != nil {
			return nil, nil, err
		}
		if err := putSegment(b, segs[i]); err != nil {
			return nil, nil, err
		}
	}
	if d != nil { // the counter moves in the shards' own batch
		if err := b.Set(counterKey("shard-id"), binary.BigEndian.AppendUint64(nil, id), nil); err != nil {
			return nil, nil, err
		}
	}
	if err := b.Commit(pebble.Sync); err != nil {
		return nil, nil, err
	}
	shs := make([]*shard, len(names))
	for i, cs := range metas {
		shs[i] = e.newShard(cs)
		shs[i].worker.shards++ // so the next shard's worker is chosen knowing this one
		e.creating[cs.Name] = struct{}{}
	}
	e.building.Add(1)
	return shs, segs, nil
}

// inParallel calls f(0) to f(n-1) from up to k goroutines and returns the
// first error; after one, the calls not yet begun are skipped.
func inParallel(n, k int, f func(i int) error) error {
	if n <= 1 || k <= 1 {
		for i := 0; i < n; i++ {
			if err := f(i); err != nil {
				return err
			}
		}
		return nil
	}
	var next atomic.Int64
	var first error
	var once sync.Once
	var failed atomic.Bool
	var wg sync.WaitGroup
	for g := 0; g < min(n, k); g++ {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for !failed.Load() {
				i := int(next.Add(1) - 1)
				if i >= n {
					return
				}
				if err := f(i); err != nil {
					once.Do(func() { first = err })
					failed.Store(true)
				}
			}
		}()
	}
	wg.Wait()
	return first
}

// awaitCreatable returns once no shard of names exists or is being deleted
// (waiting for those being deleted), or ErrShardExists naming the first
// that exists or is being created. The caller holds e.mu, which the wait
// releases.
func (e *Engine) awaitCreatable(ctx context.Context, names []string) error {
	for {
		if e.closed {
			return store.ErrClosed
		}
		var gone chan struct{}
		for _, name := range names {
			if _, ok := e.shards[name]; ok {
				return fmt.Errorf("shard %q: %w", name, store.ErrShardExists)
			}
			if _, ok := e.creating[name]; ok {
				return fmt.Errorf("shard %q (being created): %w", name, store.ErrShardExists)
			}
			if g, deleting := e.deleting[name]; deleting && gone == nil {
				gone = g
			}
		}
		if gone == nil {
			return nil
		}
		e.mu.Unlock()
		select {
		case <-gone:
			e.mu.Lock()
		case <-ctx.Done():
			e.mu.Lock()
			return ctx.Err()
		}
	}
}

// clearStale moves a folder that no shard in the manifest owns out of the way (an
// earlier shard's whose removal failed) and removes it.
func (e *Engine) clearStale(dir string) error {
	if _, err := e.cfg.FS.Stat(dir); errors.Is(err, os.ErrNotExist) {
		return nil
	} else if err != nil {
		return err
	}
	e.log.Warn("removing a shard folder left by an earlier shard of the same name", "dir", dir)
	tomb, err := e.bury(filepath.Base(dir), time.Time{})
	if err != nil {
		return err
	}
	return e.cfg.FS.RemoveAll(tomb)
}

func (e *Engine) newShard(cs ShardMeta) *shard {
	sh := &shard{name: cs.Name, dir: filepath.Join(e.cfg.Dir, cs.Name), worker: e.workerFor(cs.Name), low: cs.LowWatermark,
		created: cs.Created, files: modelOf(cs)}
	sh.maxBytes, sh.maxAge = e.segmentPolicy(cs.Name)
	return sh
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

// openActive opens the active segment's file for writing: a new file when
// fresh, else the existing one (created if a crash came between the
// manifest recording the segment and its file being made). Writes go at
// the segment's tracked size (WriteAt), which recovery sets for an existing
// file.
func (e *Engine) openActive(sh *shard, seg SegmentMeta, fresh bool) (*segment, error) {
	s, err := e.openActiveFile(sh, seg, fresh)
	if err != nil || s.wf == nil {
		return s, err
	}
	if err := syncDir(e.cfg.FS, sh.dir); err != nil {
		s.wf.Close()
		return nil, fmt.Errorf("shard %s: sync its folder after opening segment %d: %w", sh.name, seg.No, err)
	}
	return s, nil
}

// openActiveFile is openActive without the sync of the shard's folder,
// which the caller owes before anything in the file is acknowledged.
func (e *Engine) openActiveFile(sh *shard, seg SegmentMeta, fresh bool) (*segment, error) {
	return sh.files.openActive(e, sh, seg, fresh)
}

func (partitionFiles) openActive(e *Engine, sh *shard, seg SegmentMeta, fresh bool) (*segment, error) {
	s := &segment{no: seg.No, start: seg.StartOffset, next: seg.StartOffset, path: segmentPath(sh.dir, seg.No), created: seg.Created}
	var wf vfs.File
	var err error
	if !fresh {
		if _, err = e.cfg.FS.Stat(s.path); err == nil {
			wf, err = e.cfg.FS.OpenReadWrite(s.path)
		} else if errors.Is(err, os.ErrNotExist) {
			e.log.Warn("the active segment's file is missing: a crash came before it was created; creating it", "shard", sh.name, "segment", seg.No)
			fresh = true
		}
	}
	if fresh {
		wf, err = createSegmentFile(e.cfg.FS, s.path)
	}
	if err != nil {
		return nil, fmt.Errorf("shard %s: open segment %d: %w", sh.name, seg.No, err)
	}
	s.wf = wf
	return s, nil
}

// Append hands the records to the shard's I/O worker and waits until they
// are written (and, under FsyncBatch, on disk).
func (e *Engine) Append(ctx context.Context, name string, recs []record.Record) (uint64, error) {
	return e.append(ctx, name, recs, false)
}

func (e *Engine) append(ctx context.Context, name string, recs []record.Record, at bool) (uint64, error) {
	if len(recs) == 0 {
		return 0, errors.New("append: no records")
	}
	// Hold the read lock while queueing so Close cannot close the queue
	// underneath; the worker keeps draining, so this never waits long.
	e.mu.RLock()
	sh, ok := e.shards[name]
	switch {
	case e.closed:
		e.mu.RUnlock()
		return 0, store.ErrClosed
	case !ok:
		e.mu.RUnlock()
		return 0, fmt.Errorf("shard %q: %w", name, store.ErrUnknownShard)
	}
	req := request{shard: sh, recs: recs, at: at, done: make(chan result, 1)}
	select {
	case sh.worker.ch <- req:
		e.mu.RUnlock()
	case <-ctx.Done():
		e.mu.RUnlock()
		return 0, ctx.Err()
	}
	// Once queued, the append completes whether or not the caller waits:
	// a record is either stored and acknowledged or refused, never half.
	select {
	case r := <-req.done:
		return r.base, r.err
	case <-ctx.Done():
		return 0, ctx.Err()
	}
}

// Watermarks returns the readable range [low, high).
func (e *Engine) Watermarks(ctx context.Context, name string) (uint64, uint64, error) {
	sh, err := e.shard(name)
	if err != nil {
		return 0, 0, err
	}
	sh.mu.RLock()
	defer sh.mu.RUnlock()
	return sh.low, sh.high, nil
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

// DeleteBefore raises the low watermark, durably.
func (e *Engine) DeleteBefore(ctx context.Context, name string, offset uint64) error {
	sh, err := e.shard(name)
	if err != nil {
		return err
	}
	sh.mu.RLock()
	low, high := sh.low, sh.high
	sh.mu.RUnlock()
	if offset > high {
		return &store.OutOfRangeError{Shard: name, Offset: offset, Low: low, High: high}
	}
	if offset <= low {
		return nil
	}
	if err := e.raiseLow(sh, offset, nil); err != nil {
		return err
	}
	e.postLowWatermark(name, offset)
	return nil
}

// raiseLow records a higher low watermark in the manifest, with what else
// the batch holds (a dropped segment), then publishes it to readers.
// Tiered segments wholly below it leave the manifest.
func (e *Engine) raiseLow(sh *shard, low uint64, b *pebble.Batch) error {
	if b == nil {
		b = e.manifest.NewBatch()
		defer b.Close()
	}
	e.manifestMu.Lock()
	defer e.manifestMu.Unlock()
	sh.mu.RLock()
	low = max(low, sh.low)
	sh.mu.RUnlock()
	if err := putShard(b, sh.meta(low)); err != nil {
		return err
	}
	segs, err := loadSegments(e.manifest, sh.name)
	if err != nil {
		return err
	}
	for _, s := range segs {
		if s.State == SegmentRemote && s.EndOffset < low {
			if err := b.Delete(segmentKey(sh.name, s.No), nil); err != nil {
				return err
			}
		}
	}
	if err := b.Commit(pebble.Sync); err != nil {
		return err
	}
	sh.mu.Lock()
	sh.low = max(sh.low, low)
	sh.mu.Unlock()
	return nil
}

// DeleteShard removes a shard. Appends queued before it finish, later ones
// fail, and a CreateShard of the same name waits until it is done. The
// shard's folder is first renamed to a tombstone (and the rename synced),
// then its index entries and its manifest go, then the tombstone: a
// crash at any step leaves a tombstone that the next start finishes
// deleting, so no byte of the shard can reappear under a new shard of the
// same name.
func (e *Engine) DeleteShard(ctx context.Context, name string) error {
	e.mu.Lock()
	sh, ok := e.shards[name]
	if e.closed || !ok {
		e.mu.Unlock()
		if !ok {
			return fmt.Errorf("shard %q: %w", name, store.ErrUnknownShard)
		}
		return store.ErrClosed
	}
	delete(e.shards, name)
	sh.worker.shards--
	gone := make(chan struct{})
	e.deleting[name] = gone
	req := request{shard: sh, drop: true, done: make(chan result, 1)}
	sh.worker.ch <- req
	e.mu.Unlock()
	defer func() {
		e.mu.Lock()
		delete(e.deleting, name)
		e.mu.Unlock()
		close(gone)
	}()
	<-req.done
	crashPoint("delete:closed")
	tomb, err := e.bury(name, sh.created)
	if err != nil {
		return err
	}
	crashPoint("delete:tombstone")
	for _, s := range sh.segments {
		e.retire(s)
	}
	if err := e.forget(name, tomb); err != nil {
		return err
	}
	sh.files.deleted(e)
	e.log.Info("shard deleted", "shard", name)
	return nil
}

// tombstones is the folder of shard folders being deleted, each named
// "{created, unix ns}-{hash of the name}" so recovery can tell which shard
// it was (a shard name may already fill a folder name's 255 bytes).
const tombstones = ".deleted"

func tombstoneName(name string, created time.Time) string {
	h := fnv.New32a()
	h.Write([]byte(name))
	return fmt.Sprintf("%d-%08x", created.UnixNano(), h.Sum32())
}

// bury renames a shard's folder into the tombstone folder and syncs both.
func (e *Engine) bury(name string, created time.Time) (string, error) {
	dir := filepath.Join(e.cfg.Dir, tombstones)
	if err := e.cfg.FS.MkdirAll(dir, 0o755); err != nil {
		return "", err
	}
	tomb := filepath.Join(dir, tombstoneName(name, created))
	if err := e.cfg.FS.RemoveAll(tomb); err != nil {
		return "", err
	}
	if err := e.writeTombstoneName(filepath.Join(e.cfg.Dir, name), name); err != nil {
		return "", fmt.Errorf("shard %s: marking its folder for deletion: %w", name, err)
	}
	if err := e.cfg.FS.Rename(filepath.Join(e.cfg.Dir, name), tomb); err != nil && !errors.Is(err, os.ErrNotExist) {
		return "", fmt.Errorf("shard %s: moving its folder to %s: %w", name, tomb, err)
	}
	if err := syncDir(e.cfg.FS, dir); err != nil {
		return "", err
	}
	return tomb, syncDir(e.cfg.FS, e.cfg.Dir)
}

// forget drops a buried shard's index entries, then its manifest, tells
// the listeners, then removes its files.
func (e *Engine) forget(name, tomb string) error {
	ib := e.index.NewBatch()
	defer ib.Close()
	for _, kind := range []byte{index.KindOffset, index.KindOffsetV1, index.KindTime, index.KindKey, index.KindTag, index.KindChunk, kindSynced} {
		p := index.Prefix(kind, name)
		ib.DeleteRange(p, index.UpperBound(p), nil)
	}
	if err := ib.Commit(pebble.Sync); err != nil {
		return err
	}
	crashPoint("delete:index")
	mb := e.manifest.NewBatch()
	defer mb.Close()
	p := index.Prefix(kindSegment, name)
	mb.DeleteRange(p, index.UpperBound(p), nil)
	c := index.Prefix(kindCut, name)
	mb.DeleteRange(c, index.UpperBound(c), nil)
	mb.Delete(shardKey(name), nil)
	if err := mb.Commit(pebble.Sync); err != nil {
		return err
	}
	crashPoint("delete:manifest")
	return e.finishForgotten(name, tomb, tombCreated(tomb))
}

// finishForgotten tells the listeners a shard the manifest no longer has is
// gone, then removes its tombstone. When a listener fails, the tombstone
// keeps only the shard's name (its folder name keeps its creation time),
// so the next start tells them again.
func (e *Engine) finishForgotten(name, tomb string, created time.Time) error {
	if f := e.cfg.Events.ShardDeleted; f != nil {
		e.events.sync() // what was queued about the shard goes first
		if err := f(context.Background(), name, created); err != nil {
			e.log.Error("a listener failed on a shard's deletion; the next start tries again", "shard", name, "err", err)
			if err := e.removeAllBut(tomb, tombstoneFile); err != nil {
				e.log.Error("removing a deleted shard's files", "dir", tomb, "err", err)
			}
			return nil
		}
	}
	crashPoint("delete:listeners")
	if err := e.cfg.FS.RemoveAll(tomb); err != nil {
		// The shard is gone for good; only disk space is left behind, and
		// the next start tries again.
		e.log.Error("removing a deleted shard's files", "dir", tomb, "err", err)
	}
	return nil
}

// tombstoneFile, inside a shard's folder once it is buried, holds the
// shard's name.
const tombstoneFile = ".shard"

func (e *Engine) writeTombstoneName(dir, name string) error {
	fs := e.cfg.FS
	if err := fs.MkdirAll(dir, 0o755); err != nil {
		return err
	}
	f, err := fs.Create(filepath.Join(dir, tombstoneFile))
	if err != nil {
		return err
	}
	if _, err := f.Write([]byte(name)); err != nil {
		f.Close()
		return err
	}
	if err := f.Sync(); err != nil {
		f.Close()
		return err
	}
	if err := f.Close(); err != nil {
		return err
	}
	return syncDir(fs, dir)
}

// tombCreated is the creation time of the shard a tombstone buried, from
// its folder's name ("{created, unix ns}-{hash}"); zero if it has none.
func tombCreated(tomb string) time.Time {
	ns, _, _ := strings.Cut(filepath.Base(tomb), "-")
	n, err := strconv.ParseInt(ns, 10, 64)
	if err != nil {
		return time.Time{}
	}
	return time.Unix(0, n).UTC()
}

// removeAllBut removes everything in dir but the file keep, so a tombstone
// whose listeners still owe a deletion keeps the name that says so.
func (e *Engine) removeAllBut(dir, keep string) error {
	names, err := e.cfg.FS.List(dir)
	if err != nil {
		return err
	}
	for _, n := range names {
		if n != keep {
			if err := e.cfg.FS.RemoveAll(filepath.Join(dir, n)); err != nil {
				return err
			}
		}
	}
	return nil
}

// readTombstoneName reads the shard name a tombstone holds.
func (e *Engine) readTombstoneName(tomb string) (string, error) {
	name, err := readFile(e.cfg.FS, filepath.Join(tomb, tombstoneFile))
	return string(name), err
}

// readFile reads a small file of the engine's own (a tombstone's name, a
// high watermark) through fs.
func readFile(fs vfs.FS, path string) ([]byte, error) {
	f, err := fs.Open(path)
	if err != nil {
		return nil, err
	}
	defer f.Close()
	return io.ReadAll(f)
}

// finishDeletes completes the deletions a crash interrupted: a tombstone
// whose shard the manifest still lists (same creation time) is forgotten;
// any other tombstone is only files left to remove.
func (e *Engine) finishDeletes(shards []ShardMeta) ([]ShardMeta, error) {
	dir := filepath.Join(e.cfg.Dir, tombstones)
	entries, err := e.cfg.FS.List(dir)
	if errors.Is(err, os.ErrNotExist) {
		return shards, nil
	}
	if err != nil {
		return nil, err
	}
	live := map[string]ShardMeta{}
	for _, s := range shards {
		live[tombstoneName(s.Name, s.Created)] = s
	}
	sort.Strings(entries)
	for _, ent := range entries {
		tomb := filepath.Join(dir, ent)
		if s, ok := live[ent]; ok {
			e.log.Warn("finishing the deletion of a shard a crash interrupted", "shard", s.Name)
			if err := e.forget(s.Name, tomb); err != nil {
				return nil, err
			}
			delete(live, ent)
			continue
		}
		if name, err := e.readTombstoneName(tomb); err == nil {
			e.finishForgotten(name, tomb, tombCreated(tomb))
			continue
		}
		if err := e.cfg.FS.RemoveAll(tomb); err != nil {
			e.log.Error("removing a deleted shard's files", "dir", tomb, "err", err)
		}
	}
	keep := map[string]bool{}
	for _, s := range live {
		keep[s.Name] = true
	}
	out := shards[:0]
	for _, s := range shards {
		if keep[s.Name] {
			out = append(out, s)
		}
	}
	return out, nil
}

// Close stops the workers, fsyncs and closes everything.
func (e *Engine) Close() error {
	e.mu.Lock()
	if e.closed {
		e.mu.Unlock()
		return nil
	}
	e.closed = true
	e.mu.Unlock()
	e.building.Wait() // a create in its files: it then finds the engine closed
	close(e.stop)
	e.tick.Wait()
	for _, w := range e.workers {
		close(w.ch)
	}
	e.bg.Wait()
	e.events.close()
	var errs []error
	// Sealed writers leave files the next start trusts without a scan.
	for _, w := range e.workers {
		if w.sw != nil {
			if _, err := w.sw.Seal(); err != nil {
				errs = append(errs, err)
			}
		}
	}
	if d := e.shared.Load(); d != nil {
		errs = append(errs, d.Close())
	}
	var synced []*shard
	for _, sh := range e.shards {
		for _, s := range sh.segments {
			if s.wf != nil {
				if sh.failed == nil {
					err := s.wf.Sync()
					errs = append(errs, err)
					if err == nil && s == sh.active() {
						synced = append(synced, sh)
					}
				}
				errs = append(errs, s.wf.Close())
			}
			s.closeRead()
		}
	}
	// Pebble syncs its log on Close: no synced commit of its own.
	b := e.index.NewBatch()
	for _, sh := range synced {
		markSynced(b, sh)
	}
	errs = append(errs, b.Commit(pebble.NoSync))
	b.Close()
	e.retiredMu.Lock()
	for _, r := range e.retired { // a read still holding a view keeps its mapping
		r.s.closeRead()
	}
	e.retired = nil
	e.retiredMu.Unlock()
	if e.shared.Load() != nil && errors.Join(errs...) == nil {
		errs = append(errs, e.markClean())
	}
	errs = append(errs, e.index.Close(), e.manifest.Close())
	errs = append(errs, e.lock.Close())
	return errors.Join(errs...)
}

// crashPoint marks a step of shard creation and deletion; the crash test
// sets it to kill the process there.
var crashPoint = func(step string) {}

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
}

// DamagedError is why a shard refuses writes: its active segment is
// damaged in bytes that were on disk (before its synced mark), so records
// that were acknowledged may lie past the damage.
type DamagedError struct {
	Shard   string
	Segment uint64
	Pos     int64  // byte position of the damage
	Synced  int64  // the file was on disk up to this byte
	From    uint64 // the offset at the damage: reads stop before it
	// SyncedEnd is the offset after the records on disk up to Synced (0
	// when the mark is from before it was kept): the records from From
	// to it were acknowledged under fsync=batch.
	SyncedEnd uint64
	Cause     error // the *CorruptError
	// NextValid is the byte position of the first whole record after the
	// damage, -1 when none was found before Synced.
	NextValid int64
}

func (e *DamagedError) Error() string {
	after := "no whole record was found after it"
	if e.NextValid >= 0 {
		after = fmt.Sprintf("a whole record follows at byte %d", e.NextValid)
	}
	lost := fmt.Sprintf("offset %d on", e.From)
	if e.SyncedEnd > e.From {
		lost = fmt.Sprintf("offset %d to offset %d", e.From, e.SyncedEnd-1)
	}
	return fmt.Sprintf("shard %s refuses writes: segment %d is damaged at byte %d, in bytes that were on disk (up to byte %d): %v; %s; "+
		"reads stop at the damage, before offset %d; the records on disk from %s are not served; "+
		"`strata segment repair --shard %s` (service stopped) cuts the segment there, losing what follows",
		e.Shard, e.Segment, e.Pos, e.Synced, e.Cause, after, e.From, lost, e.Shard)
}

func (e *DamagedError) Unwrap() error { return e.Cause }

// Stats returns the engine's counters.
func (e *Engine) Stats() *Stats { return &e.stats }

// lockDir takes an exclusive lock on dir's LOCK file, held until the file
// is closed (or the process dies), so a second process on the same data
// folder is refused with a clear message instead of corrupting it.
func lockDir(dir string) (*os.File, error) {
	f, err := os.OpenFile(filepath.Join(dir, "LOCK"), os.O_RDWR|os.O_CREATE, 0o644)
	if err != nil {
		return nil, err
	}
	if err := syscall.Flock(int(f.Fd()), syscall.LOCK_EX|syscall.LOCK_NB); err != nil {
		f.Close()
		if errors.Is(err, syscall.EWOULDBLOCK) {
			return nil, fmt.Errorf("data folder %s is in use by another strata process (its LOCK file is locked)", dir)
		}
		return nil, fmt.Errorf("locking data folder %s: %w", dir, err)
	}
	return f, nil
}

type quietLogger struct{}

func (quietLogger) Infof(string, ...any)  {}
func (quietLogger) Errorf(string, ...any) {}
func (quietLogger) Fatalf(format string, args ...any) {
	panic(fmt.Sprintf(format, args...))
}

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
