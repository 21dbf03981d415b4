package segment

import (
	"context"
	"encoding/binary"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"sync"
	"sync/atomic"
	"time"

	"github.com/cockroachdb/pebble"

	"strata/engine/index"
	"strata/engine/sharedfile"
	"strata/engine/store"
)

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
			if _, ok := e.owed[name]; ok {
				return fmt.Errorf("shard %q: %w", name, store.ErrShardDeleting)
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

// crashPoint marks a step of shard creation and deletion; the crash test
// sets it to kill the process there.
var crashPoint = func(step string) {}
