package segment

import (
	"context"
	"errors"
	"fmt"
	"os"
	"path/filepath"

	"github.com/cockroachdb/pebble/vfs"

	"strata/engine/leaderepoch"
	"strata/engine/store"
)

// The leader-epoch history (store.Epochs, docs/engine.md "Leader epochs") is
// kept in the shard's folder, in the file epochsFile, in leaderepoch's
// "SLEH" encoding. Every change rewrites it whole and atomically: a temp
// file, written and synced, renamed over it, and the folder synced, so a
// crash leaves either the old history or the new one, never a torn one.
// It changes rarely (once per leader change, and on truncations), so the
// cost of a rename and two syncs is paid rarely.
//
// Retention (DeleteBefore, dropped segments) does not rewrite it: the entries
// wholly below the low watermark are trimmed whenever it is read or written,
// which answers the same.

const (
	epochsFile    = "leader-epochs"
	epochsTmpFile = "leader-epochs.tmp"
)

// AssignEpoch durably records that the records from start on are written
// under epoch.
func (e *Engine) AssignEpoch(ctx context.Context, name string, epoch int32, start uint64) error {
	sh, err := e.shard(name)
	if err != nil {
		return err
	}
	sh.epochMu.Lock()
	defer sh.epochMu.Unlock()
	sh.mu.RLock()
	end, low, failed := sh.end, sh.low, sh.failed
	sh.mu.RUnlock()
	if start > end {
		return store.EpochPastLogEndError(name, epoch, start, end)
	}
	h, changed, err := sh.epochs.TruncateFromStart(low).Assign(epoch, start)
	if err != nil {
		return fmt.Errorf("shard %s: %w", name, err)
	}
	if !changed {
		return nil
	}
	if failed != nil {
		return failed
	}
	if err := saveEpochs(e.cfg.FS, sh.dir, h); err != nil {
		return fmt.Errorf("shard %s: saving the leader epochs: %w", name, err)
	}
	sh.epochs = h
	e.log.Info("leader epoch assigned", "shard", name, "epoch", epoch, "start_offset", start)
	return nil
}

// LeaderEpochs returns the shard's leader-epoch history, oldest first.
func (e *Engine) LeaderEpochs(ctx context.Context, name string) ([]store.EpochEntry, error) {
	sh, err := e.shard(name)
	if err != nil {
		return nil, err
	}
	sh.epochMu.Lock()
	defer sh.epochMu.Unlock()
	sh.mu.RLock()
	low := sh.low
	sh.mu.RUnlock()
	return append([]store.EpochEntry(nil), sh.epochs.TruncateFromStart(low)...), nil
}

// cutEpochs drops the entries starting at or after end, durably, before the
// log itself is cut: a crash in between leaves records the history no
// longer names an epoch for past the latest entry, which the repeated
// truncation removes, never an entry naming records that are gone. The
// caller holds sh.epochMu.
func (e *Engine) cutEpochs(sh *shard, end uint64) error {
	h := sh.epochs.TruncateFromEnd(end)
	if len(h) == len(sh.epochs) {
		return nil
	}
	if err := saveEpochs(e.cfg.FS, sh.dir, h); err != nil {
		return fmt.Errorf("shard %s: saving the leader epochs: %w", sh.name, err)
	}
	sh.epochs = h
	return nil
}

func saveEpochs(fs vfs.FS, dir string, h leaderepoch.History) error {
	tmp := filepath.Join(dir, epochsTmpFile)
	f, err := fs.Create(tmp)
	if err != nil {
		return err
	}
	if _, err := f.Write(h.Encode()); err != nil {
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
	crashPoint("epochs:synced")
	if err := fs.Rename(tmp, filepath.Join(dir, epochsFile)); err != nil {
		return err
	}
	crashPoint("epochs:renamed")
	return syncDir(fs, dir)
}

// loadEpochs reads a recovering shard's leader-epoch history, after its log
// end is known. Entries past the log end are dropped: the records they
// were assigned for were lost with the machine (an fsync interval), as
// Kafka's recovery drops them. A damaged file, which the atomic rename
// should make impossible, reads as an empty history with a warning: the
// next AssignEpoch writes it again, and a follower without one truncates
// to its high watermark, as Kafka does.
func (e *Engine) loadEpochs(sh *shard) error {
	if tmp := filepath.Join(sh.dir, epochsTmpFile); fileExists(e.cfg.FS, tmp) {
		if err := e.cfg.FS.Remove(tmp); err != nil {
			return fmt.Errorf("shard %s: removing a leftover %s: %w", sh.name, epochsTmpFile, err)
		}
	}
	b, err := readFile(e.cfg.FS, filepath.Join(sh.dir, epochsFile))
	if errors.Is(err, os.ErrNotExist) {
		return nil
	}
	if err != nil {
		return fmt.Errorf("shard %s: reading the leader epochs: %w", sh.name, err)
	}
	h, err := leaderepoch.Decode(b)
	if err != nil {
		e.log.Warn("the leader-epoch file is damaged: starting with no history", "shard", sh.name, "err", err)
		return nil
	}
	for len(h) > 0 && h[len(h)-1].Start > sh.end {
		e.log.Warn("dropping a leader epoch past the recovered log end", "shard", sh.name,
			"epoch", h[len(h)-1].Epoch, "start_offset", h[len(h)-1].Start, "log_end", sh.end)
		h = h[:len(h)-1]
	}
	sh.epochs = h
	return nil
}

func fileExists(fs vfs.FS, path string) bool {
	_, err := fs.Stat(path)
	return err == nil
}
