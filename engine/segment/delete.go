package segment

import (
	"context"
	"errors"
	"fmt"
	"hash/fnv"
	"io"
	"maps"
	"os"
	"path/filepath"
	"slices"
	"sort"
	"strconv"
	"strings"
	"time"

	"github.com/cockroachdb/pebble"
	"github.com/cockroachdb/pebble/vfs"

	"strata/engine/index"
	"strata/engine/store"
)

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
	// A cleaning of the shard finishes first: none writes its manifest
	// entries back after they go.
	sh.sealedMu.Lock()
	defer sh.sealedMu.Unlock()
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
	mb.Delete(cleanedKey(name), nil)
	if err := mb.Commit(pebble.Sync); err != nil {
		return err
	}
	crashPoint("delete:manifest")
	return e.finishForgotten(name, tomb, tombCreated(tomb))
}

// finishForgotten tells the listeners a shard the manifest no longer has is
// gone, then removes its tombstone. When a listener fails (the bucket
// refused the table's forget or the objects' removal), the tombstone keeps
// only the shard's name (its folder name keeps its creation time), the
// deletion is owed: retried every DeleteRetryInterval, and at the next
// start, and until it succeeds CreateShard refuses the name
// (store.ErrShardDeleting), as a cluster's controller keeps a deleted
// topic's name until the bucket is cleared. A shard made again before its
// old objects left would find them at its keys.
func (e *Engine) finishForgotten(name, tomb string, created time.Time) error {
	if f := e.cfg.Events.ShardDeleted; f != nil {
		e.events.sync() // what was queued about the shard goes first
		if err := f(context.Background(), name, created); err != nil {
			e.log.Error("a listener failed on a shard's deletion; retrying, and the name is taken till it succeeds",
				"shard", name, "retry_every", e.cfg.DeleteRetryInterval, "err", err)
			if err := e.removeAllBut(tomb, tombstoneFile); err != nil {
				e.log.Error("removing a deleted shard's files", "dir", tomb, "err", err)
			}
			e.mu.Lock()
			e.owed[name] = owedDeletion{tomb: tomb, created: created}
			e.mu.Unlock()
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

// owedDeletion is a deleted shard whose listeners still owe its deletion:
// its tombstone (the shard's name only) and the shard's creation time.
type owedDeletion struct {
	tomb    string
	created time.Time
}

// retryDeletions tells the listeners again, every DeleteRetryInterval, of
// the deletions they failed, until each succeeds; then its tombstone goes
// and its name is free. It stops when the engine closes.
func (e *Engine) retryDeletions() {
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	go func() {
		<-e.stop
		cancel() // a listener waiting on the bucket gives up at Close
	}()
	t := time.NewTicker(e.cfg.DeleteRetryInterval)
	defer t.Stop()
	for {
		select {
		case <-e.stop:
			return
		case <-t.C:
		}
		e.mu.RLock()
		todo := make(map[string]owedDeletion, len(e.owed))
		for name, o := range e.owed {
			todo[name] = o
		}
		e.mu.RUnlock()
		for _, name := range slices.Sorted(maps.Keys(todo)) {
			o := todo[name]
			if err := e.cfg.Events.ShardDeleted(ctx, name, o.created); err != nil {
				if ctx.Err() == nil {
					e.log.Warn("a listener failed again on a shard's deletion; retrying", "shard", name, "retry_every", e.cfg.DeleteRetryInterval, "err", err)
				}
				continue
			}
			if err := e.cfg.FS.RemoveAll(o.tomb); err != nil {
				// Only the name is left, which the next start tells again.
				e.log.Error("removing a deleted shard's tombstone", "dir", o.tomb, "err", err)
			}
			e.mu.Lock()
			if cur, ok := e.owed[name]; ok && cur.tomb == o.tomb {
				delete(e.owed, name)
			}
			e.mu.Unlock()
			e.log.Info("a shard's deletion finished after its listener failed; its name is free", "shard", name)
		}
	}
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
