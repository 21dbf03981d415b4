package segment

// The shared-file model (docs/engine.md, "The shared-file model"): a
// shard created under ModelShared keeps its records as chunks in the
// shared files of engine/sharedfile, interleaved with other shards',
// instead of files of its own. Everything above the bytes is the
// partition model's: the manifest's segments (logical ranges of offsets,
// rolled and sealed by the same gates, their checksum the CRC-32C of their
// record bytes), the high watermark and leader-epoch files in the shard's
// folder, the time, key and tag index entries, the events. What differs:
//
//   - a worker encodes a shared shard's append as a chunk of its Writer
//     and commits every chunk of its batch with one write and one fsync;
//   - the offset index is one entry per chunk (index.ChunkEntry);
//   - a truncation cannot cut a shared file: it records the cut (its end
//     and the writer's position then) in the manifest, and recovery
//     skips the shard's chunks the cut made dead;
//   - a shared file is removed once no local segment's file range holds
//     it (sweepShared).

import (
	"context"
	"encoding/binary"
	"encoding/json"
	"errors"
	"fmt"
	"hash/crc32"
	"math"
	"os"
	"path/filepath"
	"sort"

	"github.com/cockroachdb/pebble"

	"strata/engine/index"
	"strata/engine/integrity"
	"strata/engine/record"
	"strata/engine/sharedfile"
	"strata/engine/store"
)

// ModelShared is the file model (strata.file.model) whose shards share
// files; any other value, the partition model.
const ModelShared = "shared"

// Manifest keys of the shared model.
const (
	// kindCounter: 'C' name -> u64 big-endian. "shard-id" is the next
	// shared shard id; "file-no" the lowest shared file number not yet
	// used by a file that was removed.
	kindCounter = 'C'
	// kindCut: 'T' shard 0x00 file u64 pos u64 -> cutMeta: a logical
	// truncation of a shared shard, keyed by the writer's position then.
	kindCut = 'T'
)

func counterKey(name string) []byte { return append([]byte{kindCounter}, name...) }

func readCounter(db pebble.Reader, name string) (uint64, error) {
	v, closer, err := db.Get(counterKey(name))
	if errors.Is(err, pebble.ErrNotFound) {
		return 0, nil
	}
	if err != nil {
		return 0, err
	}
	defer closer.Close()
	if len(v) != 8 {
		return 0, fmt.Errorf("engine manifest: counter %s: %d bytes, want 8", name, len(v))
	}
	return binary.BigEndian.Uint64(v), nil
}

// cutMeta is a shared shard's logical truncation: the shard's chunks
// written before Pos (the writer's position when it was cut) hold no
// record at or past End any more.
type cutMeta struct {
	End uint64 `json:"end"`
	// RepairedFiles are the damaged shared files a repair (strata segment
	// repair) made this cut for: the shard's records in their damage are
	// given up, and they make it refuse writes no more.
	RepairedFiles []uint64       `json:"repaired_files,omitempty"`
	Pos           sharedfile.Ref `json:"-"`
}

func cutKey(shard string, pos sharedfile.Ref) []byte {
	k := binary.BigEndian.AppendUint64(index.Prefix(kindCut, shard), pos.File)
	return binary.BigEndian.AppendUint64(k, uint64(pos.Pos))
}

// loadCuts reads a shard's cuts, in the order they were made.
func loadCuts(db pebble.Reader, shard string) ([]cutMeta, error) {
	p := index.Prefix(kindCut, shard)
	it, err := db.NewIter(&pebble.IterOptions{LowerBound: p, UpperBound: index.UpperBound(p)})
	if err != nil {
		return nil, err
	}
	defer it.Close()
	var out []cutMeta
	for it.First(); it.Valid(); it.Next() {
		k := it.Key()
		if len(k) != len(p)+16 {
			return nil, fmt.Errorf("engine manifest: shard %s: cut key %q", shard, k)
		}
		var c cutMeta
		if err := json.Unmarshal(it.Value(), &c); err != nil {
			return nil, fmt.Errorf("engine manifest: shard %s: cut: %w", shard, err)
		}
		c.Pos = sharedfile.Ref{File: binary.BigEndian.Uint64(k[len(p):]), Pos: int64(binary.BigEndian.Uint64(k[len(p)+8:]))}
		out = append(out, c)
	}
	return out, it.Error()
}

// sharedFiles is the shared-file model of a shard: its records are
// chunks of the shared files under the numeric id id, and its segments
// are ranges of offsets with no file of their own.
type sharedFiles struct {
	id   uint64
	from uint64 // ShardMeta.FromFile
}

// inShared says whether sh keeps its records in the shared files: the
// shared files' own bookkeeping (sweepShared, fsyncShared) asks it of
// every shard.
func inShared(sh *shard) bool {
	_, ok := sh.files.(*sharedFiles)
	return ok
}

func (f *sharedFiles) meta(m *ShardMeta) { m.Model, m.ID, m.FromFile = ModelShared, f.id, f.from }

// openActive makes a range of offsets in the shared files: no file of its
// own.
func (*sharedFiles) openActive(e *Engine, sh *shard, seg SegmentMeta, fresh bool) (*segment, error) {
	return &segment{no: seg.No, start: seg.StartOffset, next: seg.StartOffset, created: seg.Created}, nil
}

func (*sharedFiles) created(*Engine, *shard) error { return nil } // no file in its folder

// written has nothing to do per shard: one commit of the worker's writer
// (commitShared) makes every shared shard of the batch durable.
func (*sharedFiles) written(*worker, *shard) {}

// tick has nothing to do per shard: the worker's writer is synced once
// (syncShared).
func (*sharedFiles) tick(*worker, *shard) bool { return false }

func (f *sharedFiles) append(w *worker, sh *shard, recs []record.Record, at bool, _ *pebble.Batch) (uint64, error) {
	return w.appendShared(sh, f.id, recs, at)
}

func (*sharedFiles) roll(w *worker, sh *shard) error { return w.rollShared(sh) }

func (f *sharedFiles) truncate(w *worker, sh *shard, end uint64) error {
	return w.truncateShared(sh, f.id, end)
}

func (*sharedFiles) repair(w *worker, sh *shard) error { return w.repairShared(sh) }

func (*sharedFiles) dropSegment(e *Engine, sh *shard, s *segment) error {
	if err := e.dropSharedSegment(sh.name, s); err != nil {
		return fmt.Errorf("shard %s: drop segment %d: %w", sh.name, s.no, err)
	}
	return nil
}

func (*sharedFiles) deleted(e *Engine) {
	if err := e.sweepShared(); err != nil {
		e.log.Error("removing the shared files of a deleted shard; the next start tries again", "err", err)
	}
}

func (f *sharedFiles) scan(ctx context.Context, e *Engine, v view, _ int, offset uint64, b store.Budget, o *readOut) error {
	err := e.scanShared(v, f.id, offset, b, o)
	if errors.Is(err, sharedfile.ErrGone) && !o.retried {
		// A file this view named went with a segment dropped since
		// (tiered, or past retention). What was read stands (the next
		// read goes on from it); with nothing read, read again from a
		// fresh view, which sends the offsets to the cold tier.
		if len(o.recs) > 0 {
			return nil
		}
		nv, verr := e.view(v.name)
		if verr != nil {
			return verr
		}
		nv.high = min(nv.high, v.high)
		o.retried = true
		return e.scanInto(ctx, nv, offset, b, o)
	}
	return err
}

func (f *sharedFiles) scanSegment(e *Engine, sh *shard, s *segment, end uint64, fn func(*record.Record) error) (uint32, int64, error) {
	return e.scanSegmentShared(sh.name, f.id, s, end, fn)
}

func (f *sharedFiles) checksum(e *Engine, v view, no uint64) (uint32, int64, error) {
	return e.checksumShared(v, f.id, no)
}

func (f *sharedFiles) scrubSegment(e *Engine, sh *shard, c SegmentMeta) error {
	s := &segment{no: c.No, start: c.StartOffset}
	got, size, err := e.scanSegmentShared(sh.name, f.id, s, c.EndOffset+1, nil)
	if err != nil {
		return fmt.Errorf("scrub shard %s segment %d: %w", sh.name, c.No, err)
	}
	if size != c.Size || got != c.Checksum {
		return &scrubbed{c.No, c.StartOffset, fmt.Errorf("scrub shard %s segment %d: %d record bytes with crc32c %08x; sealed as %d bytes with %08x: %w",
			sh.name, c.No, size, got, c.Size, c.Checksum, record.ErrCorrupt)}
	}
	return nil
}

// meta is the shard's manifest entry with low watermark low.
func (sh *shard) meta(low uint64) ShardMeta {
	m := ShardMeta{Name: sh.name, Created: sh.created, LowWatermark: low}
	sh.files.meta(&m)
	return m
}

// sharedDir is the shared files' folder.
func (e *Engine) sharedDir() string { return filepath.Join(e.cfg.Dir, "shared") }

// openShared opens the shared files once: at the first shared shard, or
// at a start that finds the folder. Files a crash left unsealed are
// scanned; their chunks are kept for recovery (e.recovered).
func (e *Engine) openShared() (*sharedfile.Dir, error) {
	if d := e.shared.Load(); d != nil {
		return d, nil
	}
	e.sharedMu.Lock()
	defer e.sharedMu.Unlock()
	if d := e.shared.Load(); d != nil {
		return d, nil
	}
	first, err := readCounter(e.manifest, "file-no")
	if err != nil {
		return nil, err
	}
	// File number 0 is never used: a segment's FirstFile 0 means "none".
	d, recs, err := sharedfile.Open(sharedfile.Config{Dir: e.sharedDir(), FS: e.cfg.FS, MaxFileBytes: e.cfg.SharedFileBytes,
		FirstFileNo: max(first, 1), SyncedTo: e.sharedSyncedTo, Logger: e.log})
	if err != nil {
		return nil, fmt.Errorf("shared files: %w", err)
	}
	e.recovered = map[uint64][]sharedfile.Chunk{}
	e.damagedFiles = map[uint64][]*sharedfile.CorruptError{}
	for _, r := range recs {
		if why, ok := e.unmarkedFiles[r.No]; ok && (len(r.Chunks) > 0 || r.Cut > 0) && r.Damage == nil {
			e.stats.Unmarked.Add(1)
			e.log.Error("a shared file has no synced mark: what recovery cut, or a cut before it, may have held acknowledged chunks, and nothing tells how many; its shards serve what reads",
				"file", r.Path, "mark", why, "committed_to_byte", r.DataLen, "cut_bytes", r.Cut)
		} else {
			delete(e.unmarkedFiles, r.No)
		}
		if r.Damage != nil {
			e.damagedFiles[r.No] = r.Damages
			e.log.Error("a shared file is damaged inside: the shards that may have records in the damage refuse writes",
				"file", r.Path, "damages", len(r.Damages), "err", r.Damage)
		}
		if r.Chunks != nil || r.After != nil {
			e.recovered[r.No] = append(r.Chunks, r.After...)
		}
	}
	if err := e.dropSharedSyncedKeys(); err != nil {
		return nil, err
	}
	e.shared.Store(d)
	return d, nil
}

// dropSharedSyncedKeys deletes the earlier version's shared-file marks
// ('Y' keys) of every file but a damaged one: Open has sealed the others
// (trailer fsynced), and a sealed file is trusted without a scan, so its
// mark is never read again. A damaged file's stays, for the next start to
// find the same damage.
func (e *Engine) dropSharedSyncedKeys() error {
	it, err := e.index.NewIter(&pebble.IterOptions{LowerBound: []byte{kindSharedSynced}, UpperBound: []byte{kindSharedSynced + 1}})
	if err != nil {
		return err
	}
	b := e.index.NewBatch()
	defer b.Close()
	for it.First(); it.Valid(); it.Next() {
		k := it.Key()
		if len(k) != 9 {
			continue
		}
		if _, damaged := e.damagedFiles[binary.BigEndian.Uint64(k[1:])]; !damaged {
			b.Delete(k, nil)
		}
	}
	if err := errors.Join(it.Error(), it.Close()); err != nil {
		return err
	}
	if b.Empty() {
		return nil
	}
	return b.Commit(pebble.NoSync)
}

// writer is the worker's shared-file writer, made at its first shared
// append.
func (w *worker) writer() *sharedfile.Writer {
	if w.sw == nil {
		w.sw = w.e.shared.Load().NewWriter()
	}
	return w.sw
}

// sharedBatch is the index batch of the shared appends since the last
// commit: written only once their chunks are.
func (w *worker) sharedBatch() *pebble.Batch {
	if w.sib == nil {
		w.sib = w.e.index.NewBatch()
	}
	return w.sib
}

// appendShared encodes a request of a shared shard as chunks of the
// worker's writer; commitShared writes them with the rest of the batch.
func (w *worker) appendShared(sh *shard, sid uint64, recs []record.Record, at bool) (uint64, error) {
	if err := w.beforeAppend(sh, recs, at); err != nil {
		return 0, err
	}
	s := sh.active()
	base := s.next
	for i := range recs {
		recs[i].Offset = base + uint64(i)
	}
	sw := w.writer()
	chunks, err := sw.Add(w.chunks[:0], sid, recs)
	w.chunks = chunks
	if err != nil {
		return 0, fmt.Errorf("shard %s: %w", sh.name, err)
	}
	ib := w.sharedBatch()
	var n int64
	for _, c := range chunks {
		b := sw.Pending(c)
		s.crc = crc32.Update(s.crc, castagnoli, b)
		n += int64(len(b))
		ib.Set(index.ChunkKey(sh.name, c.First), index.ChunkValue(index.ChunkEntry{First: c.First, File: c.File, Pos: c.Pos, Count: c.Count}), nil)
		if s.firstFile.Load() == 0 {
			s.firstFile.Store(c.File)
		}
		s.lastFile.Store(c.File)
	}
	for i := range recs {
		w.indexAttrs(sh, &recs[i], ib)
	}
	s.size += n
	w.e.stats.Bytes.Add(uint64(n))
	w.e.stats.Records.Add(uint64(len(recs)))
	s.next = base + uint64(len(recs))
	if s.firstAt.IsZero() {
		s.firstAt = w.e.cfg.Now()
	}
	for i := range recs {
		s.track(&recs[i])
	}
	if w.pendingShared == nil {
		w.pendingShared = map[*shard]bool{}
	}
	w.pendingShared[sh] = true
	return base, nil
}

// commitShared writes the chunks added since the last commit: one write,
// and under fsync=batch one fsync, for every shared shard of the batch.
// Their index entries follow. A failed commit fails each of those shards
// until a restart, which reads back what reached the disk: the chunks of
// other shards share the write, so no one request can be refused alone.
func (w *worker) commitShared() {
	if len(w.pendingShared) == 0 {
		return
	}
	sync := w.e.cfg.Fsync == FsyncBatch
	at := w.sw.Next() // the end of the chunks, in the file the commit writes
	var err error
	if at.File != w.sharedMarked {
		// The slot names the file before its first chunk is written, as
		// a segment's mark (markBeforeFirstByte): a file with chunks and
		// no mark then lost it, which recovery reports.
		err = w.writeSharedMark(at.File, 0)
	}
	if err == nil {
		_, err = w.sw.Commit(sync)
	}
	if err == nil && sync {
		w.e.stats.Fsyncs.Add(1)
	}
	if err == nil && sync {
		// The file's synced mark, written after its fsync returned, lets
		// recovery tell synced chunks lost from the file from a torn
		// tail (synced.go).
		if merr := w.writeSharedMark(at.File, at.Pos); merr != nil {
			err = merr
		}
	}
	if err != nil {
		for sh := range w.pendingShared {
			w.fail(sh, fmt.Errorf("shared file commit: %w", err))
		}
		if w.sib != nil {
			w.sib.Close()
			w.sib = nil
		}
	} else if w.sib != nil {
		if !w.sib.Empty() {
			if err := w.sib.Commit(pebble.NoSync); err != nil {
				// Reads find chunks through these entries, and the next
				// start replays chunks only after a shard's last entry:
				// no later entry may be written past the gap, so these
				// shards stop until a restart rebuilds it.
				for sh := range w.pendingShared {
					w.fail(sh, fmt.Errorf("shared chunk index write: %w", err))
				}
			}
		}
		w.sib.Close()
		w.sib = nil
	}
	if err == nil {
		w.sharedCommitted = at
	}
	if w.e.cfg.Fsync == FsyncInterval {
		w.sharedDirty = true // the tick syncs it
	}
	clear(w.pendingShared)
}

// rollShared seals a shared shard's active segment: its chunks are
// committed first (the manifest must not name records a crash could
// lose), then one synced manifest batch seals it and records the next.
// No file is made or closed: the segments are ranges of offsets.
func (w *worker) rollShared(sh *shard) error {
	if w.pendingShared[sh] {
		w.commitShared()
		if sh.failed != nil {
			return sh.failed
		}
	}
	// Under fsync=interval or none the chunks may still be in the page
	// cache only; the partition model's roll fsyncs its file whatever the
	// policy, and so does this one (sealed files were fsynced at their seal).
	if w.e.cfg.Fsync != FsyncBatch {
		if err := w.fsyncShared(); err != nil {
			return err
		}
	}
	s := sh.active()
	sealed, next, err := w.commitRoll(sh, s)
	if err != nil {
		return err
	}
	ns := &segment{no: next.No, start: next.StartOffset, next: next.StartOffset, created: next.Created}
	sh.mu.Lock()
	s.sealed = true
	sh.segments = append(sh.segments, ns)
	sh.last.Store(ns)
	sh.activeLen = 0
	sh.activeMaxTS, sh.activeHasRecs = 0, false
	sh.mu.Unlock()
	w.e.log.Debug("segment sealed", "shard", sh.name, "segment", s.no, "records", s.count, "bytes", s.size)
	w.e.postSegmentSealed(sealed, next)
	return nil
}

// syncShared fsyncs the writer's active file (the interval policy's tick).
func (w *worker) syncShared() {
	if w.sharedDirty {
		w.fsyncShared()
	}
}

// fsyncShared fsyncs the writer's active file; a failure fails every
// shared shard of the worker until a restart.
func (w *worker) fsyncShared() error {
	if w.sw == nil {
		return nil
	}
	w.sharedDirty = false
	if err := w.sw.Sync(); err != nil {
		err = fmt.Errorf("shared file fsync: %w", err)
		for _, sh := range w.e.shardsOf(w) {
			if inShared(sh) {
				w.fail(sh, err)
			}
		}
		return err
	}
	w.e.stats.Fsyncs.Add(1)
	// What the fsync covered is on disk: the slot says so, as the
	// partition model's tick moves a shard's mark (commitSynced), so a cut
	// of those chunks is damage under fsync=interval too, not a torn tail.
	if c := w.sharedCommitted; c.File != 0 {
		if err := w.writeSharedMark(c.File, c.Pos); err != nil {
			w.e.log.Warn("writing a shared file's synced mark after its fsync; a later cut of its chunks may pass for a torn tail", "file", c.File, "err", err)
		}
	}
	return nil
}

// scanShared is scanInto for a shared shard: the chunk entries from the
// one holding offset on, each chunk checked (ReadChunk) and its wanted
// records copied out, until the budget, the high watermark or a gap in
// the local offsets (what follows is read cold by the next read). Views
// get copies too: a shared file's mapping is not reference-counted, so
// nothing aliases it past the read.
func (e *Engine) scanShared(v view, sid, offset uint64, b store.Budget, o *readOut) error {
	d := e.shared.Load()
	if d == nil {
		return fmt.Errorf("shard %s: the shared files are not open", v.name)
	}
	next, more, had := offset, true, len(o.recs)
	var rerr error
	// local says whether offset is in a local segment: a read stops where
	// the local log has a hole (a segment read cold), as scanInto does.
	last := len(v.segments) - 1
	local := func(offset uint64) bool {
		i := sort.Search(len(v.segments), func(i int) bool { return v.segments[i].start > offset }) - 1
		return i >= 0 && (i == last || offset < v.segments[i].next)
	}
	err := index.ChunksFrom(e.index, v.name, offset, func(c index.ChunkEntry) bool {
		if c.End() <= next {
			return true // the entry before offset's
		}
		if c.First >= v.high || c.First > next || !local(next) {
			return false
		}
		rerr = d.ReadChunk(sharedfile.Ref{File: c.File, Pos: c.Pos}, &sid, func(h sharedfile.Header, recs []byte) error {
			if h.First != c.First {
				return fmt.Errorf("shard %s: the chunk at file %d byte %d starts at offset %d, its index entry at %d: %w",
					v.name, c.File, c.Pos, h.First, c.First, record.ErrCorrupt)
			}
			start, n, k, had := -1, 0, 0, len(o.recs)
			for p := 0; p < len(recs); {
				off, size, err := record.Peek(recs[p:])
				if err != nil {
					return fmt.Errorf("shard %s: file %d chunk at byte %d: %w", v.name, c.File, c.Pos, err)
				}
				if off >= v.high || off >= c.End() {
					break
				}
				if off >= offset {
					if !b.Take(had+k, o.used+n, size) {
						more = false
						break
					}
					if start < 0 {
						start = p
					}
					k++
					n += size
				}
				p += size
			}
			if k == 0 {
				return nil
			}
			run := append([]byte(nil), recs[start:start+n]...)
			for p := 0; p < n; {
				r, size, err := record.DecodeVerified(run[p:])
				if err != nil {
					return fmt.Errorf("shard %s: file %d chunk at byte %d: %w", v.name, c.File, c.Pos, err)
				}
				o.recs = append(o.recs, r)
				p += size
			}
			o.used += n
			return nil
		})
		next = c.End()
		return rerr == nil && more && next < v.high
	})
	if rerr != nil && len(o.recs) == had {
		return rerr
	}
	if rerr != nil {
		// The records before a chunk that does not read (damage) are
		// served; the next read, from that chunk, meets the error.
		return nil
	}
	if err == nil && len(o.recs) == had && more && offset < v.high && local(offset) {
		// Every offset below the high watermark of a local segment has a
		// chunk entry, unless the segment went since this view was taken
		// (read again from a fresh view, which sends it cold) or damage
		// took its chunk: an error then, not an empty read a consumer
		// would wait on for ever.
		if !o.retried {
			return fmt.Errorf("shard %s: no chunk holds offset %d: %w", v.name, offset, sharedfile.ErrGone)
		}
		return fmt.Errorf("shard %s: offset %d lies in a local segment below the high watermark %d, but no chunk of the shared files holds it "+
			"(damage inside a shared file; strata segment verify shows it): %w", v.name, offset, v.high, record.ErrCorrupt)
	}
	return err
}

// scanSegmentShared calls fn with each record of a shared shard's local
// segment s below end, in order, and returns the CRC-32C and length of
// their bytes: the segment's checksum, as a segment file of the same
// records would have it.
func (e *Engine) scanSegmentShared(name string, sid uint64, s *segment, end uint64, fn func(*record.Record) error) (uint32, int64, error) {
	d := e.shared.Load()
	if d == nil {
		return 0, 0, fmt.Errorf("shard %s: the shared files are not open", name)
	}
	var entries []index.ChunkEntry
	if err := index.ChunksFrom(e.index, name, s.start, func(c index.ChunkEntry) bool {
		if c.First >= end {
			return false
		}
		if c.End() > s.start {
			entries = append(entries, c)
		}
		return true
	}); err != nil {
		return 0, 0, err
	}
	// Chunk by chunk rather than with a ShardScanner: an entry a
	// truncation shortened ends before its chunk does.
	next := s.start
	var crc uint32
	var size int64
	var buf []byte
	for _, c := range entries {
		err := d.ReadChunk(sharedfile.Ref{File: c.File, Pos: c.Pos}, &sid, func(h sharedfile.Header, recs []byte) error {
			if h.First != c.First {
				return fmt.Errorf("the chunk at file %d byte %d starts at offset %d, its entry at %d", c.File, c.Pos, h.First, c.First)
			}
			buf = append(buf[:0], recs...) // records handed to fn outlive the mapping
			for p := 0; p < len(buf); {
				off, n, err := record.Peek(buf[p:])
				if err != nil {
					return err
				}
				if off >= c.End() || off >= end {
					break
				}
				if off >= s.start {
					if off != next {
						return fmt.Errorf("offset %d where %d was expected", off, next)
					}
					next++
					crc = crc32.Update(crc, castagnoli, buf[p:p+n])
					size += int64(n)
					if fn != nil {
						r, _, err := record.Decode(buf[p : p+n])
						if err != nil {
							return err
						}
						if err := fn(&r); err != nil {
							return err
						}
					}
				}
				p += n
			}
			if fn != nil {
				buf = nil // fn may keep the records
			}
			return nil
		})
		if err != nil {
			return crc, size, fmt.Errorf("shard %s segment %d: %w", name, s.no, err)
		}
	}
	if next != end {
		return crc, size, fmt.Errorf("shard %s segment %d: the shared files hold offsets %d to %d, not to %d: %w", name, s.no, s.start, next, end, record.ErrCorrupt)
	}
	return crc, size, nil
}

// ScanSegment streams a local segment's records to fn in order and
// returns the CRC-32C and length of their bytes, in either file model:
// what tiering converts, compared with the checksum the segment was
// sealed with.
func (e *Engine) ScanSegment(name string, no uint64, fn func(*record.Record) error) (uint32, int64, error) {
	sh, err := e.shard(name)
	if err != nil {
		return 0, 0, err
	}
	sh.mu.RLock()
	var s *segment
	for _, c := range sh.segments {
		if c.no == no {
			s = c
		}
	}
	end := sh.end
	if s != nil && s.sealed {
		end = s.next // fixed once sealed; both are written under sh.mu
	}
	sh.mu.RUnlock()
	if s == nil {
		return 0, 0, fmt.Errorf("shard %s has no local segment %d: %w", name, no, store.ErrUnknownShard)
	}
	return sh.files.scanSegment(e, sh, s, end, fn)
}

// SharedStats is the shared files' counters; nil until the first shared
// shard (or a start that found shared files).
func (e *Engine) SharedStats() *sharedfile.Stats {
	if d := e.shared.Load(); d != nil {
		return d.Stats()
	}
	return nil
}

// dropSharedSegment forgets a shared shard's segment that left the local
// disk (retention, DropLocal): its chunk entries go, then every shared
// file no local segment holds any more.
func (e *Engine) dropSharedSegment(name string, s *segment) error {
	ib := e.index.NewBatch()
	defer ib.Close()
	if err := ib.DeleteRange(index.ChunkKey(name, s.start), index.ChunkKey(name, s.next), nil); err != nil {
		return err
	}
	if err := ib.Commit(pebble.NoSync); err != nil {
		return err
	}
	return e.sweepShared()
}

// sweepShared removes the sealed shared files no local segment of any
// shared shard holds: each segment holds the files from its first to its
// last (an active one, every file from its first on). The file-number
// counter passes the removed files first (synced), so no number is used
// twice. Removal is not synced: a start sweeps again.
func (e *Engine) sweepShared() error {
	d := e.shared.Load()
	if d == nil {
		return nil
	}
	e.sharedMu.Lock()
	defer e.sharedMu.Unlock()
	// The files first, then what holds them: a chunk's segment records the
	// file (firstFile, lastFile) when the chunk is added, before the
	// commit that may seal the file, so a file sealed by the time it is
	// listed here is seen held by any segment with a chunk in it.
	files := d.Files()
	type span struct{ first, last uint64 }
	var live []span
	e.mu.RLock()
	for _, sh := range e.shards {
		if !inShared(sh) {
			continue
		}
		sh.mu.RLock()
		for i, s := range sh.segments {
			f := s.firstFile.Load()
			if f == 0 {
				continue
			}
			l := s.lastFile.Load()
			if i == len(sh.segments)-1 {
				l = math.MaxUint64
			}
			live = append(live, span{f, l})
		}
		sh.mu.RUnlock()
	}
	e.mu.RUnlock()
	var gone []uint64
	for _, f := range files {
		if !f.Sealed && !f.Damaged {
			continue
		}
		held := false
		for _, s := range live {
			if s.first <= f.No && f.No <= s.last {
				held = true
				break
			}
		}
		if !held {
			gone = append(gone, f.No)
		}
	}
	if len(gone) == 0 {
		return nil
	}
	sort.Slice(gone, func(i, j int) bool { return gone[i] < gone[j] })
	if cur, err := readCounter(e.manifest, "file-no"); err != nil {
		return err
	} else if next := gone[len(gone)-1] + 1; next > cur {
		if err := e.manifest.Set(counterKey("file-no"), binary.BigEndian.AppendUint64(nil, next), pebble.Sync); err != nil {
			return err
		}
	}
	for _, no := range gone {
		if err := d.Remove(no); err != nil && !errors.Is(err, os.ErrNotExist) {
			e.log.Error("removing a shared file no segment holds", "file", no, "err", err)
			continue
		}
		e.log.Info("shared file removed: no local segment holds it", "file", no)
		if err := e.index.Delete(sharedSyncedKey(no), pebble.NoSync); err != nil {
			e.log.Warn("deleting a removed shared file's synced mark", "file", no, "err", err)
		}
	}
	return nil
}

// truncateShared cuts a shared shard's log at end. The files are not
// touched (other shards' chunks follow); the cut is recorded in the
// manifest with the writer's position, synced, before the chunk entries
// at or past end go: chunks of the shard written before that position
// hold no record at or past end any more, which recovery applies.
func (w *worker) truncateShared(sh *shard, sid, end uint64) error {
	if sh.failed != nil {
		return sh.failed
	}
	sh.hwMu.Lock()
	defer sh.hwMu.Unlock()
	sh.epochMu.Lock()
	defer sh.epochMu.Unlock()
	if cut, err := w.e.startTruncate(sh, end); !cut {
		return err
	}
	s := sh.active()
	if w.pendingShared[sh] {
		w.commitShared()
		if sh.failed != nil {
			return sh.failed
		}
	}
	kept := segment{no: s.no, start: s.start, next: s.start}
	minCut := int64(math.MaxInt64)
	var keptCRC uint32
	var keptSize int64
	_, _, err := w.e.scanSegmentShared(sh.name, sid, s, s.next, func(r *record.Record) error {
		if r.Offset < end {
			kept.track(r)
			kept.next = r.Offset + 1
		} else {
			minCut = min(minCut, r.Timestamp)
		}
		return nil
	})
	if err != nil {
		return fmt.Errorf("shard %s: truncate: %w", sh.name, err)
	}
	// The kept records' checksum and size: scanned again up to end (a
	// scanner's running CRC is of everything it read).
	if end > s.start {
		if keptCRC, keptSize, err = w.e.scanSegmentShared(sh.name, sid, s, end, nil); err != nil {
			return fmt.Errorf("shard %s: truncate: %w", sh.name, err)
		}
	}
	pos := w.writer().Next()
	b := w.e.manifest.NewBatch()
	v, _ := json.Marshal(cutMeta{End: end})
	b.Set(cutKey(sh.name, pos), v, nil)
	err = b.Commit(pebble.Sync)
	b.Close()
	if err != nil {
		return fmt.Errorf("shard %s: truncate: manifest: %w", sh.name, err)
	}
	ib := w.e.index.NewBatch()
	defer ib.Close()
	if err := index.DeleteChunksFrom(w.e.index, ib, sh.name, end); err != nil {
		return err
	}
	if err := index.DeleteTimeFrom(w.e.index, ib, sh.name, minCut, end); err != nil {
		return err
	}
	if err := ib.Commit(pebble.Sync); err != nil {
		return fmt.Errorf("shard %s: truncate: index: %w", sh.name, err)
	}
	sh.mu.Lock()
	s.size, s.crc, s.next = keptSize, keptCRC, end
	s.count, s.minTS, s.maxTS = kept.count, kept.minTS, kept.maxTS
	if s.count == 0 {
		s.firstAt = kept.firstAt
	}
	sh.publishEnd(end)
	sh.activeLen = s.size
	sh.activeMaxTS, sh.activeHasRecs = s.maxTS, s.count > 0
	sh.mu.Unlock()
	ts, _, ok, err := index.LastTime(w.e.index, sh.name)
	if err != nil {
		return err
	}
	sh.tsBucket, sh.tsIndexed = w.bucket(ts), ok
	w.e.log.Info("log truncated", "shard", sh.name, "log_end", end, "high_watermark", sh.high)
	return nil
}

// checksumShared is Checksum for a shared shard's segment: the CRC-32C
// and length of its record bytes as far as they are durable.
func (e *Engine) checksumShared(v view, sid, no uint64) (uint32, int64, error) {
	for i, s := range v.segments {
		if s.no != no {
			continue
		}
		end := s.next
		if i == len(v.segments)-1 {
			end = v.end
		}
		if end == s.start {
			return 0, 0, nil
		}
		return e.scanSegmentShared(v.name, sid, s, end, nil)
	}
	return 0, 0, fmt.Errorf("shard %s has no local segment %d: %w", v.name, no, store.ErrUnknownShard)
}

// SharedDamagedError is why a shared shard refuses writes: a shared file
// it may have records in is damaged inside (found at start), and its log,
// as far as it could be read, stops before the whole chunks after the
// damage: the damage may hold its last acknowledged records, and new
// writes would take their offsets.
type SharedDamagedError struct {
	Shard string
	// Files are the damaged files it may have records in; Cause the first
	// damage of the first.
	Files []uint64
	Cause *sharedfile.CorruptError
	// LogEnd is where the shard's log, as read, ends.
	LogEnd uint64
}

func (e *SharedDamagedError) Error() string {
	return fmt.Sprintf("shard %s refuses writes: shared file %d is damaged inside (%v) and may hold its records from offset %d on; "+
		"reads stop there; `strata segment repair --shard %s` (service stopped) ends its log there for good, giving up what the damage held, "+
		"and the shard takes writes again", e.Shard, e.Files[0], e.Cause, e.LogEnd, e.Shard)
}

func (e *SharedDamagedError) Unwrap() error { return e.Cause }

// Is makes it answer integrity.IsCorruption, whatever it wraps.
func (e *SharedDamagedError) Is(target error) bool { return target == integrity.ErrCorruption }

// repairShared is Repair for a shared shard refused for a damaged shared
// file: its log ends where it was read to, for good. The files are not
// touched (other shards' chunks share them): a cut at that end is
// recorded, naming the damaged files it gives up on (so a start does not
// refuse the shard for them again), and the shard's chunk entries past it
// go. Recovery applies the cut as any other: the shard's chunks written
// before it hold nothing at or past its end.
func (w *worker) repairShared(sh *shard) error {
	var d *SharedDamagedError
	if !errors.As(sh.failed, &d) {
		return fmt.Errorf("shard %s has no damaged shared file to repair", sh.name)
	}
	end := sh.active().next
	pos := w.writer().Next()
	v, _ := json.Marshal(cutMeta{End: end, RepairedFiles: d.Files})
	if err := w.e.manifest.Set(cutKey(sh.name, pos), v, pebble.Sync); err != nil {
		return fmt.Errorf("shard %s: repair: manifest: %w", sh.name, err)
	}
	ib := w.e.index.NewBatch()
	defer ib.Close()
	if err := index.DeleteChunksFrom(w.e.index, ib, sh.name, end); err != nil {
		return err
	}
	if err := ib.Commit(pebble.Sync); err != nil {
		return fmt.Errorf("shard %s: repair: index: %w", sh.name, err)
	}
	sh.failed = nil
	w.e.stats.Damaged.Add(^uint64(0))
	w.e.log.Warn("shared shard repaired: its log ends where the damage began; it takes writes again",
		"shard", sh.name, "log_end", end, "damaged_files", d.Files)
	return nil
}
