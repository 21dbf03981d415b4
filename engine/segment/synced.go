package segment

import (
	"encoding/binary"
	"errors"
	"fmt"
	"hash/crc32"
	"io"
	"log/slog"
	"os"
	"path/filepath"

	"github.com/cockroachdb/pebble"
	"github.com/cockroachdb/pebble/vfs"

	"strata/engine/index"
	"strata/engine/store"
)

// The synced mark of a file-per-partition shard is how far its active
// segment was on disk at its last fsync: recovery tells a torn tail (bytes
// written after the last fsync, nothing of it acknowledged under
// fsync=batch) from damage to bytes that were on disk (docs/engine.md,
// "Recovery"). Nothing in a segment's bytes can tell the two apart: a
// record's value may hold any bytes, a valid-looking record among them,
// and after a power cut the pages of the last write reach the disk in any
// order, so whole records can follow torn ones.
//
// The mark is a file of the shard's folder, {dir}/synced, of one record
// written in place with one pwrite:
//
//	created (unix ns) i64 | segment no u64 | position i64 | next offset u64 | crc32c u32
//
// It is written only after the fsync it follows returns, so it never says
// more than was synced, and before the appends are answered; and at byte
// 0 before a segment's first byte (markBeforeFirstByte), so a segment with
// bytes and no mark lost it. It is not
// fsynced per batch: the page cache keeps a pwrite through a kill of the
// process, which is what the mark must survive (a kill cuts nothing that
// was fsynced, but a later fault may, and the mark tells that cut from a
// torn tail). A power cut may lose the pwrites since the mark's last
// fsync (at Close, when it is lowered, and under fsync=batch at the
// engine's tick), and a torn or stale
// record only says less than was synced, or names another segment: that
// widens the span recovery treats as a torn tail, and with a disk that
// keeps its fsyncs a power cut cuts nothing synced. The mark is fsynced
// before anything lowers it (a truncation, a repair), so an older, higher
// mark never comes back. created tells incarnations of a shard's name
// apart, and a mark of another segment than the active one counts as 0.
//
// Before the file, the mark was a key of the index database, committed
// synced per worker batch (a second fsync after the data's, issue #24):
//
//	'y' shard 0x00 -> created (unix ns) i64 | segment no u64 | position i64 [| next offset u64]
//
// Recovery still reads it where a shard has no mark file (data written by
// that version); a lowered mark deletes it.
const (
	kindSynced = 'y'
	syncedFile = "synced"
	markSize   = 36
)

func syncedKey(shard string) []byte { return index.Prefix(kindSynced, shard) }

// syncedMark is a decoded mark.
type syncedMark struct {
	created int64
	seg     uint64
	pos     int64
	next    uint64 // the offset after the records before pos
	hasNext bool   // a mark of 24 bytes has no next offset
}

// decodeSynced decodes an index key's mark (the earlier version's).
func decodeSynced(v []byte) (syncedMark, bool) {
	if len(v) != 24 && len(v) != 32 {
		return syncedMark{}, false
	}
	m := syncedMark{created: int64(binary.BigEndian.Uint64(v)), seg: binary.BigEndian.Uint64(v[8:]), pos: int64(binary.BigEndian.Uint64(v[16:]))}
	if len(v) == 32 {
		m.next, m.hasNext = binary.BigEndian.Uint64(v[24:]), true
	}
	return m, m.pos >= 0
}

func encodeMark(b []byte, m syncedMark) []byte {
	b = binary.BigEndian.AppendUint64(b[:0], uint64(m.created))
	b = binary.BigEndian.AppendUint64(b, m.seg)
	b = binary.BigEndian.AppendUint64(b, uint64(m.pos))
	b = binary.BigEndian.AppendUint64(b, m.next)
	return binary.BigEndian.AppendUint32(b, crc32.Checksum(b, castagnoli))
}

// decodeMark decodes a mark file's record; a short or torn one is none.
func decodeMark(b []byte) (syncedMark, bool) {
	if len(b) < markSize || crc32.Checksum(b[:markSize-4], castagnoli) != binary.BigEndian.Uint32(b[markSize-4:]) {
		return syncedMark{}, false
	}
	m, ok := decodeSynced(b[:32])
	return m, ok
}

// writeMark writes sh's mark file: its active segment is on disk up to
// pos, where offset next begins. The caller has seen that fsync return.
func (e *Engine) writeMark(sh *shard, pos int64, next uint64) error {
	return e.writeMarkOf(sh, sh.active(), pos, next)
}

// writeMarkOf is writeMark for segment s, the active one (recovery's,
// before the shard publishes it). The mark's file is opened for each
// write and closed after it, as for each fsync (syncMark): kept open, a
// node with 10,000 partitions held 20,000 descriptors, and a node's limit
// (often 20,000 or less) refused every produce. An open and a close cost
// microseconds beside the fsync each mark follows.
func (e *Engine) writeMarkOf(sh *shard, s *segment, pos int64, next uint64) error {
	f, err := e.cfg.FS.OpenReadWrite(sh.markPath())
	if err != nil {
		return fmt.Errorf("shard %s: opening the synced mark: %w: %w", sh.name, store.ErrStorage, err)
	}
	m := syncedMark{created: sh.created.UnixNano(), seg: s.no, pos: pos, next: next}
	sh.markBuf = encodeMark(sh.markBuf, m)
	_, err = f.WriteAt(sh.markBuf, 0)
	if err = errors.Join(err, f.Close()); err != nil {
		return fmt.Errorf("shard %s: writing the synced mark: %w: %w", sh.name, store.ErrStorage, err)
	}
	sh.markDirty = true
	s.marked = true
	return nil
}

func (sh *shard) markPath() string { return filepath.Join(sh.dir, syncedFile) }

// markBeforeFirstByte writes the mark of sh's active segment at byte 0
// before anything is written to it, under every policy: then a segment
// that holds bytes and has no mark lost it (a disk, a hand, a power cut
// before the mark's fsync), and recovery says so (recoverActive) instead
// of taking what a cut removed for a torn tail. Without it a kill between
// a segment's first fsync and its mark's pwrite would leave the same
// state innocently. One pwrite per segment.
func (e *Engine) markBeforeFirstByte(sh *shard) error {
	s := sh.active()
	if s.marked {
		return nil
	}
	if s.synced != 0 {
		return fmt.Errorf("shard %s: segment %d has a synced mark at byte %d but its mark file does not name it", sh.name, s.no, s.synced)
	}
	return e.writeMark(sh, 0, s.start)
}

// syncMark fsyncs sh's mark file if written since its last fsync.
func (e *Engine) syncMark(sh *shard) error {
	if !sh.markDirty {
		return nil
	}
	if err := syncFile(e.cfg.FS, sh.markPath()); err != nil {
		return fmt.Errorf("shard %s: fsync of the synced mark: %w", sh.name, err)
	}
	sh.markDirty = false
	return nil
}

// syncFile fsyncs the file at path through a descriptor of its own: an
// fsync writes back the file's pages whichever descriptor wrote them.
func syncFile(fs vfs.FS, path string) error {
	f, err := fs.Open(path)
	if err != nil {
		return err
	}
	return errors.Join(f.Sync(), f.Close())
}

// lowerSynced lowers sh's mark to byte pos of its active segment, before
// offset next, ahead of a cut there: written, fsynced, and the earlier
// version's key deleted in b (which the caller commits synced before the
// cut), so no higher mark can come back after a crash. The caller sets
// the segment's synced to pos once b is committed (before, a failed
// commit would claim the mark lowered, and a retry would skip lowering
// it).
func (e *Engine) lowerSynced(sh *shard, b *pebble.Batch, pos int64, next uint64) error {
	if err := e.writeMark(sh, pos, next); err != nil {
		return err
	}
	if err := e.syncMark(sh); err != nil {
		return err
	}
	return b.Delete(syncedKey(sh.name), nil)
}

// markSynced writes the synced mark of a file-per-partition shard whose
// active segment was just fsynced whole (a failed shard's file is not
// known to be on disk, and a damaged one's length is not the file's). It
// runs after every worker batch under fsync=batch; a failed write fails
// the shard: its records are on disk, but answered without their mark, a
// later cut of them would pass for a torn tail.
func (w *worker) markSynced(sh *shard) {
	s := sh.active()
	if sh.failed != nil || s.synced == s.size {
		return
	}
	if err := w.e.writeMark(sh, s.size, s.next); err != nil {
		w.fail(sh, err)
		return
	}
	s.synced = s.size
}

// loadSynced reads the synced mark of segment no of sh. missing is empty
// when a mark that checks out names the segment; else it says what there
// was instead (no mark, one that does not check out, another segment's,
// a shard of the name before this one), and the mark is 0.
func (e *Engine) loadSynced(sh *shard, no uint64) (m syncedMark, missing string, err error) {
	m, found, err := readMarkFile(e.cfg.FS, sh.dir)
	if err != nil {
		return syncedMark{}, "", fmt.Errorf("shard %s: reading the synced mark: %w", sh.name, err)
	}
	if !found {
		var there bool
		if _, err := e.cfg.FS.Stat(filepath.Join(sh.dir, syncedFile)); err == nil {
			there = true
		}
		if m, found, err = e.loadSyncedKey(sh); err != nil {
			return syncedMark{}, "", err
		}
		if !found {
			if there {
				return syncedMark{}, "the mark file does not check out", nil
			}
			return syncedMark{}, "no mark file", nil
		}
	}
	switch {
	case m.created != sh.created.UnixNano():
		return syncedMark{}, "the mark is of an earlier shard of the name", nil
	case m.seg != no:
		return syncedMark{}, fmt.Sprintf("the mark names segment %d", m.seg), nil
	}
	return m, "", nil
}

// readMarkFile reads the mark file of the shard folder dir: found is
// false when there is none or it does not check out.
func readMarkFile(fs vfs.FS, dir string) (m syncedMark, found bool, err error) {
	f, err := fs.Open(filepath.Join(dir, syncedFile))
	if errors.Is(err, os.ErrNotExist) {
		return syncedMark{}, false, nil
	}
	if err != nil {
		return syncedMark{}, false, err
	}
	defer f.Close()
	b := make([]byte, markSize)
	if _, err := f.ReadAt(b, 0); err != nil && !errors.Is(err, io.EOF) {
		return syncedMark{}, false, err
	}
	m, found = decodeMark(b)
	return m, found, nil
}

// loadSyncedKey reads the earlier version's mark from the index.
func (e *Engine) loadSyncedKey(sh *shard) (syncedMark, bool, error) {
	v, closer, err := e.index.Get(syncedKey(sh.name))
	if errors.Is(err, pebble.ErrNotFound) {
		return syncedMark{}, false, nil
	}
	if err != nil {
		return syncedMark{}, false, fmt.Errorf("shard %s: reading the synced mark: %w", sh.name, err)
	}
	defer closer.Close()
	m, ok := decodeSynced(v)
	if !ok {
		e.log.Warn("ignoring a synced mark of the wrong size", "shard", sh.name, "bytes", len(v))
	}
	return m, ok, nil
}

// anyKey tells whether the index holds a key of kind: the earlier
// version's marks are looked for shard by shard only when it does.
func (e *Engine) anyKey(kind byte) (bool, error) {
	it, err := e.index.NewIter(&pebble.IterOptions{LowerBound: []byte{kind}, UpperBound: []byte{kind + 1}})
	if err != nil {
		return false, err
	}
	found := it.First()
	return found, errors.Join(it.Error(), it.Close())
}

// remark raises the mark of a recovered shard's active segment to its
// whole file, durably: the file fsynced, then the mark written and
// fsynced, and the folder (the mark file may be new). Recovery does it
// where the mark was missing (so the next start does not report the same
// loss again) or where the earlier version's key is still there, which it
// then deletes: at every step a crash leaves a mark that checks out, the
// key or the file.
func (e *Engine) remark(sh *shard, s *segment, key bool) error {
	if err := s.wf.Sync(); err != nil {
		return fmt.Errorf("fsync %s: %w", s.path, err)
	}
	if err := e.writeMarkOf(sh, s, s.size, s.next); err != nil {
		return err
	}
	if err := e.syncMark(sh); err != nil {
		return err
	}
	if err := syncDir(e.cfg.FS, sh.dir); err != nil {
		return fmt.Errorf("shard %s: syncing its folder after the synced mark: %w", sh.name, err)
	}
	s.synced = s.size
	if !key {
		return nil
	}
	if err := e.index.Delete(syncedKey(sh.name), pebble.Sync); err != nil {
		return fmt.Errorf("shard %s: deleting the earlier version's synced mark: %w", sh.name, err)
	}
	return nil
}

// commitSynced writes the synced marks of shards just fsynced outside a
// worker batch (the interval policy's tick). Under fsync=batch the marks
// written since the last tick are fsynced, which bounds what a power cut
// takes from them at no cost per append; not under interval, whose tick
// is its fsyncs, which it would double. The worker hands those fsyncs to
// the engine's markSyncer instead of making them: made here, each tick
// held every append queued behind it for one fsync per mark written since
// the last (a journal commit each, as the pwrite moved the file's mtime),
// which was the p99 tail the marks as files added (docs/bench.md).
func (w *worker) commitSynced(synced []*shard) {
	for _, sh := range synced {
		w.markSynced(sh)
	}
	if w.e.cfg.Fsync != FsyncBatch {
		return
	}
	var due []*shard
	for _, sh := range w.e.shardsOf(w) {
		if sh.markDirty {
			due = append(due, sh)
		}
	}
	if !w.e.marks.take(due) {
		return // the syncer is behind: they stay dirty, for the next tick
	}
	for _, sh := range due {
		sh.markDirty = false
	}
}

// markSyncer fsyncs, apart from the workers, the synced marks their ticks
// hand it, each through a descriptor of its own (syncFile). A worker may
// write a mark again meanwhile (the fsync then takes the newer record,
// never an older one over it, since both are the page cache's one page)
// or delete its shard (the mark is gone, and a deleted shard needs no
// fsync). Close stops it after the workers, so every mark handed over is
// fsynced before the engine fsyncs the rest.
type markSyncer struct {
	fs   vfs.FS
	ch   chan []markFile
	done chan struct{}
	log  *slog.Logger
}

// markFile is one mark to fsync, with its shard's name for the log.
type markFile struct {
	shard, path string
}

func newMarkSyncer(fs vfs.FS, workers int, log *slog.Logger) *markSyncer {
	// One tick's list per worker in flight at most; a worker whose list
	// does not fit keeps its marks dirty (take).
	m := &markSyncer{fs: fs, ch: make(chan []markFile, workers), done: make(chan struct{}), log: log}
	go m.run()
	return m
}

// take hands the marks of shards over to be fsynced, without waiting:
// false if the syncer is still behind on earlier ticks' lists.
func (m *markSyncer) take(shards []*shard) bool {
	if len(shards) == 0 {
		return true
	}
	list := make([]markFile, len(shards))
	for i, sh := range shards {
		list[i] = markFile{shard: sh.name, path: sh.markPath()}
	}
	select {
	case m.ch <- list:
		return true
	default:
		m.log.Debug("the synced marks' fsyncs are behind; this tick's wait for the next", "marks", len(list))
		return false
	}
}

func (m *markSyncer) run() {
	defer close(m.done)
	for list := range m.ch {
		for _, mf := range list {
			if err := syncFile(m.fs, mf.path); err != nil && !errors.Is(err, os.ErrNotExist) {
				m.log.Warn("fsync of a synced mark failed; after a power cut recovery may treat more of a damaged tail as torn", "shard", mf.shard, "err", err)
			}
		}
	}
}

// stop waits for the fsyncs handed over; nil (fsync=batch off) does nothing.
func (m *markSyncer) stop() {
	if m == nil {
		return
	}
	close(m.ch)
	<-m.done
}

// The shared files' synced marks are the same promise for a shared file:
// how far it was on disk at its writer's last synced commit (fsync=batch).
// sharedfile.Open takes a file that ends before its mark for damage, not a
// torn tail (docs/engine.md, "Recovery"). Each writer (one per worker) has
// one active file, so the marks are one file of the shared folder,
// shared/synced, with a slot per worker, written in place with one pwrite
// after the commit's fsync returns and before its appends are answered
// (and after the interval policy's tick fsynced the file), for the
// reasons of the partition model's mark; it names a file at byte 0
// before the file's first commit:
//
//	slot worker id: file no u64 | position i64 | crc32c u32
//
// A slot of a worker no longer run names a file of an earlier start, which
// it still describes truly. The earlier version kept the mark in the
// index, committed synced; it is still read where no slot names the file:
//
//	'Y' file no u64 -> position i64
const (
	kindSharedSynced = 'Y'
	sharedMarkSize   = 20
)

func sharedSyncedKey(no uint64) []byte {
	return binary.BigEndian.AppendUint64([]byte{kindSharedSynced}, no)
}

// writeSharedMark writes w's slot: shared file no is on disk up to pos.
func (w *worker) writeSharedMark(no uint64, pos int64) error {
	if w.sharedMark == nil {
		f, err := w.e.cfg.FS.OpenReadWrite(filepath.Join(w.e.sharedDir(), syncedFile))
		if err != nil {
			return fmt.Errorf("opening the shared files' synced marks: %w", err)
		}
		w.sharedMark = f
	}
	b := binary.BigEndian.AppendUint64(w.sharedMarkBuf[:0], no)
	b = binary.BigEndian.AppendUint64(b, uint64(pos))
	b = binary.BigEndian.AppendUint32(b, crc32.Checksum(b, castagnoli))
	w.sharedMarkBuf = b
	if _, err := w.sharedMark.WriteAt(b, int64(w.id)*sharedMarkSize); err != nil {
		return fmt.Errorf("writing a shared file's synced mark: %w", err)
	}
	w.sharedMarked = no
	return nil
}

// closeSharedMark fsyncs and closes w's handle on the shared marks.
func (w *worker) closeSharedMark() error {
	if w.sharedMark == nil {
		return nil
	}
	err := errors.Join(w.sharedMark.Sync(), w.sharedMark.Close())
	w.sharedMark = nil
	return err
}

// sharedSyncedTo is shared file no's mark, 0 if none (never synced under
// fsync=batch, the index lost). A marks file that is there but cannot be
// read is an error, as a shard's is (loadSynced): read as "no mark", a cut
// of acknowledged chunks would pass for a torn tail and be cut.
func (e *Engine) sharedSyncedTo(no uint64) (int64, error) {
	pos, ok, err := readSharedMark(e.cfg.FS, e.sharedDir(), no)
	if err != nil || ok {
		return pos, err
	}
	v, closer, err := e.index.Get(sharedSyncedKey(no))
	if err != nil {
		if !errors.Is(err, pebble.ErrNotFound) {
			e.log.Warn("reading a shared file's synced mark; taking it as unknown", "file", no, "err", err)
		}
		e.noSharedMark(no, "no slot of the marks file names it")
		return 0, nil
	}
	defer closer.Close()
	if len(v) != 8 {
		e.noSharedMark(no, "its index key is of the wrong size")
		return 0, nil
	}
	return int64(binary.BigEndian.Uint64(v)), nil
}

// noSharedMark notes that shared file no, unsealed at start, has no mark.
// Under fsync=batch its writer's slot names it before its first chunk
// (commitShared), so one with chunks lost its mark: openShared reports it.
func (e *Engine) noSharedMark(no uint64, why string) {
	if e.cfg.Fsync != FsyncBatch {
		return
	}
	if e.unmarkedFiles == nil {
		e.unmarkedFiles = map[uint64]string{}
	}
	e.unmarkedFiles[no] = why
}

// readSharedMark is the position of the slot of the shared marks that
// names file no, if one does.
func readSharedMark(fs vfs.FS, dir string, no uint64) (int64, bool, error) {
	b, err := readFile(fs, filepath.Join(dir, syncedFile))
	if errors.Is(err, os.ErrNotExist) {
		return 0, false, nil
	}
	if err != nil {
		return 0, false, fmt.Errorf("reading the shared files' synced marks: %w", err)
	}
	pos, found := int64(0), false
	for ; len(b) >= sharedMarkSize; b = b[sharedMarkSize:] {
		s := b[:sharedMarkSize]
		if crc32.Checksum(s[:16], castagnoli) != binary.BigEndian.Uint32(s[16:]) || binary.BigEndian.Uint64(s) != no {
			continue
		}
		if p := int64(binary.BigEndian.Uint64(s[8:])); p >= 0 {
			pos, found = max(pos, p), true
		}
	}
	return pos, found, nil
}
