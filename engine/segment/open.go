package segment

import (
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"syscall"
	"time"

	"github.com/cockroachdb/pebble"
)

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
		shards: map[string]*shard{}, deleting: map[string]chan struct{}{}, owed: map[string]owedDeletion{}, creating: map[string]struct{}{}, stop: make(chan struct{}), indexKept: statErr == nil}
	e.points.limit = cfg.IndexMemoryBytes
	if cfg.Fsync == FsyncBatch {
		e.marks = newMarkSyncer(cfg.FS, cfg.Workers, cfg.Logger)
	}
	for i := 0; i < cfg.Workers; i++ {
		w := newWorker(e, i)
		e.workers = append(e.workers, w)
		e.bg.Add(1)
		go func() { defer e.bg.Done(); w.run() }()
	}
	shards, err := loadShards(man)
	if err == nil {
		e.oldMarks, err = e.anyKey(kindSynced)
	}
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
		e.recovered, e.damagedFiles, e.unmarkedFiles = nil, nil, nil
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
	if cfg.Events.ShardDeleted != nil {
		e.tick.Add(1)
		go func() { defer e.tick.Done(); e.retryDeletions() }()
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
	e.marks.stop() // the marks' fsyncs handed over are done before they are closed
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
	for _, sh := range synced {
		if s := sh.active(); s.synced != s.size {
			errs = append(errs, e.writeMark(sh, s.size, s.next))
			s.synced = s.size
		}
	}
	for _, sh := range e.shards {
		errs = append(errs, e.syncMark(sh))
	}
	for _, w := range e.workers {
		errs = append(errs, w.closeSharedMark())
	}
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

func (quietLogger) Infof(string, ...any) {}

func (quietLogger) Errorf(string, ...any) {}

func (quietLogger) Fatalf(format string, args ...any) {
	panic(fmt.Sprintf(format, args...))
}
