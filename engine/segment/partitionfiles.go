package segment

import (
	"context"
	"errors"
	"fmt"
	"hash/crc32"
	"math"
	"os"

	"github.com/cockroachdb/pebble"
	"github.com/cockroachdb/pebble/vfs"

	"strata/engine/index"
	"strata/engine/record"
	"strata/engine/store"
)

// partitionFiles is the file-per-partition model: each segment is a file
// of the shard's own folder, {dir}/{segment no}.msg, fsynced once per
// worker batch, with a synced mark (synced.go).
type partitionFiles struct{}

func (partitionFiles) meta(*ShardMeta) {}

func (partitionFiles) created(e *Engine, sh *shard) error { return syncDir(e.cfg.FS, sh.dir) }

func (partitionFiles) written(w *worker, sh *shard) {
	if w.e.cfg.Fsync != FsyncBatch {
		sh.dirty = true // the tick, or Close, syncs it
		return
	}
	w.e.stats.Fsyncs.Add(1)
	if err := sh.active().wf.Sync(); err != nil {
		w.fail(sh, fmt.Errorf("fsync %s: %w", sh.active().path, err))
		return
	}
	w.markSynced(sh)
}

func (partitionFiles) tick(w *worker, sh *shard) bool {
	if !sh.dirty || sh.failed != nil {
		return false
	}
	sh.dirty = false
	s := sh.active()
	if err := s.wf.Sync(); err != nil {
		w.fail(sh, fmt.Errorf("fsync %s: %w", s.path, err))
		return false
	}
	return true
}

func (partitionFiles) dropSegment(e *Engine, sh *shard, s *segment) error {
	if err := e.cfg.FS.Remove(s.path); err != nil && !errors.Is(err, os.ErrNotExist) {
		return fmt.Errorf("delete %s: %w", s.path, err)
	}
	return nil
}

func (partitionFiles) deleted(*Engine) {} // the files went with the folder

func (partitionFiles) scanSegment(e *Engine, sh *shard, s *segment, end uint64, fn func(*record.Record) error) (uint32, int64, error) {
	if s.cleaned > 0 {
		return scanSegmentFile(s, fn)
	}
	return ScanFile(s.path, fn)
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

// beforeAppend checks an append to sh, in either file model, and rolls
// first if the gates say so.
func (w *worker) beforeAppend(sh *shard, recs []record.Record, at bool) error {
	if sh.failed != nil {
		return sh.failed
	}
	if at && recs[0].Offset != sh.active().next {
		return fmt.Errorf("shard %s: append at offset %d, but the next offset is %d", sh.name, recs[0].Offset, sh.active().next)
	}
	// A copy of a leader's log rolls where the leader did (RollAt), never
	// by its own gates, so the two segment files end at the same bytes.
	sh.dictated = at
	if at {
		return nil
	}
	return w.maybeRoll(sh, len(recs))
}

// append encodes the records at the shard's next offsets and writes them to
// the active segment's file, rolling first if the gates say so.
func (partitionFiles) append(w *worker, sh *shard, recs []record.Record, at bool, ib *pebble.Batch) (uint64, error) {
	if err := w.beforeAppend(sh, recs, at); err != nil {
		return 0, err
	}
	s := sh.active()
	base := s.next
	// Encode the whole request before anything is indexed or written: a
	// record that cannot be stored refuses the request and leaves no trace.
	w.buf = w.buf[:0]
	w.pos = w.pos[:0]
	for i := range recs {
		r := &recs[i]
		r.Offset = base + uint64(i)
		w.pos = append(w.pos, s.size+int64(len(w.buf)))
		var err error
		if w.buf, err = record.Append(w.buf, r); err != nil {
			return 0, fmt.Errorf("shard %s: %w", sh.name, err)
		}
	}
	if err := w.e.markBeforeFirstByte(sh); err != nil {
		return 0, err
	}
	if _, err := s.wf.WriteAt(w.buf, s.size); err != nil {
		// Cut off whatever part reached the file, so the log stays whole.
		if terr := truncateFile(s.wf, s.size); terr != nil {
			w.fail(sh, fmt.Errorf("write %s: %v; truncate after it: %w", s.path, err, terr))
		}
		return 0, fmt.Errorf("shard %s: write %s: %w", sh.name, s.path, err)
	}
	for i := range recs {
		w.indexRecord(sh, s, &recs[i], w.pos[i], ib)
		w.e.points.add(s, recs[i].Offset, w.pos[i])
	}
	w.e.points.publish(s)
	s.size += int64(len(w.buf))
	w.e.stats.Bytes.Add(uint64(len(w.buf)))
	w.e.stats.Records.Add(uint64(len(recs)))
	s.crc = crc32.Update(s.crc, castagnoli, w.buf)
	s.next = base + uint64(len(recs))
	if s.firstAt.IsZero() {
		s.firstAt = w.e.cfg.Now()
	}
	for i := range recs {
		s.track(&recs[i])
	}
	return base, nil
}

// roll seals the active segment and starts the next one: fsync, one
// manifest batch that seals it and records the next, the next file, then
// the event (queued: the worker never waits on listeners).
func (partitionFiles) roll(w *worker, sh *shard) error {
	s := sh.active()
	if err := s.wf.Sync(); err != nil {
		w.fail(sh, fmt.Errorf("fsync %s: %w", s.path, err))
		return sh.failed
	}
	sh.dirty = false
	sealed, next, err := w.commitRoll(sh, s)
	if err != nil {
		return err
	}
	ns, err := w.e.openActive(sh, next, true)
	if err != nil {
		w.fail(sh, err)
		return sh.failed // a storage error, which clients retry elsewhere
	}
	if err := s.wf.Close(); err != nil {
		w.e.log.Warn("closing a sealed segment", "path", s.path, "err", err)
	}
	s.wf = nil
	s.sealed = true
	// On the list of points to give up before readers (and retention) see
	// the segment sealed, so no one releases its points before.
	w.e.points.sealedNow(s)
	if err := os.Chmod(s.path, 0o444); err != nil {
		w.e.log.Warn("making a sealed segment read-only", "path", s.path, "err", err)
	}
	sh.mu.Lock()
	sh.segments = append(sh.segments, ns)
	sh.last.Store(ns)
	sh.activeLen = 0
	sh.activeMaxTS, sh.activeHasRecs = 0, false
	sh.mu.Unlock()
	w.e.log.Debug("segment sealed", "shard", sh.name, "segment", s.no, "records", s.count, "bytes", s.size)
	w.e.postSegmentSealed(sealed, next)
	return nil
}

// repair cuts a damaged active segment at the damage and lets the shard
// take writes again.
func (partitionFiles) repair(w *worker, sh *shard) error {
	var d *DamagedError
	if !errors.As(sh.failed, &d) {
		return fmt.Errorf("shard %s has no damaged segment to repair", sh.name)
	}
	s := sh.active()
	// The synced mark goes down to the cut first: a crash before the cut
	// then finds the damage past the mark, a torn tail it cuts itself.
	b := w.e.index.NewBatch()
	err := w.e.lowerSynced(sh, b, s.size, s.next)
	if err == nil {
		err = b.Commit(pebble.Sync)
	}
	b.Close()
	if err != nil {
		return fmt.Errorf("shard %s: lowering the synced mark to the cut: %w", sh.name, err)
	}
	s.synced = s.size
	if err := truncateFile(s.wf, s.size); err != nil {
		return fmt.Errorf("truncate %s: %w", s.path, err)
	}
	if err := s.wf.Sync(); err != nil {
		return fmt.Errorf("fsync %s: %w", s.path, err)
	}
	sh.failed = nil
	w.e.stats.Damaged.Add(^uint64(0))
	w.e.log.Warn("damaged segment cut at the damage; the shard takes writes again", "shard", sh.name, "segment", s.no, "at_byte", s.size)
	return nil
}

// truncate cuts the shard's log at offset end: the index entries of the
// records cut go first (synced), then the file is truncated and synced.
// A crash between the two leaves the whole file with entries missing,
// which recovery re-adds, and the truncation unacknowledged.
func (partitionFiles) truncate(w *worker, sh *shard, end uint64) error {
	if sh.failed != nil {
		return sh.failed
	}
	sh.hwMu.Lock() // no SetHighWatermark meanwhile: it could pass the new end
	defer sh.hwMu.Unlock()
	sh.epochMu.Lock() // no AssignEpoch meanwhile: it checks its start against the end
	defer sh.epochMu.Unlock()
	if cut, err := w.e.startTruncate(sh, end); !cut {
		return err
	}
	s := sh.active()
	// Scan the active file: the kept records give its new length, checksum
	// and statistics; the cut ones, their index entries' time range.
	f, err := os.Open(s.path)
	if err != nil {
		return err
	}
	defer f.Close()
	kept := segment{no: s.no, start: s.start, next: s.start}
	minCut := int64(math.MaxInt64)
	next := s.start
	sc := NewScanner(s.path, f, 0, s.size, &next)
	for sc.Next() {
		r, _, _ := sc.Record()
		if r.Offset < end {
			kept.track(r)
			kept.next, kept.size, kept.crc = r.Offset+1, sc.Pos(), sc.CRC()
		} else {
			minCut = min(minCut, r.Timestamp)
		}
	}
	if err := sc.Err(); err != nil {
		return fmt.Errorf("shard %s: truncate: %w", sh.name, err)
	}
	if kept.next != end {
		return fmt.Errorf("shard %s: truncate to offset %d: the active segment holds offsets %d to %d", sh.name, end, s.start, kept.next)
	}
	ib := w.e.index.NewBatch()
	defer ib.Close()
	if err := index.DeleteOffsetsFrom(w.e.index, ib, sh.name, end); err != nil {
		return err
	}
	if err := index.DeleteTimeFrom(w.e.index, ib, sh.name, minCut, end); err != nil {
		return err
	}
	// Key and tag entries of the cut records stay: readers check that the
	// record at an entry's offset still matches, as after a crash. The
	// synced mark goes down to the cut before the file is cut: bytes
	// written there later are not on disk until their own fsync.
	lower := s.synced > kept.size
	if lower {
		if err := w.e.lowerSynced(sh, ib, kept.size, end); err != nil {
			return fmt.Errorf("shard %s: truncate: %w", sh.name, err)
		}
	}
	if err := ib.Commit(pebble.Sync); err != nil {
		return fmt.Errorf("shard %s: truncate: index: %w", sh.name, err)
	}
	if lower {
		s.synced = kept.size
	}
	// Readers that took their view before hold s.mu.RLock while they scan:
	// wait for them, and make later ones stop at the kept length.
	s.mu.Lock()
	sh.mu.Lock()
	err = truncateFile(s.wf, kept.size)
	if err == nil {
		err = s.wf.Sync()
	}
	if err != nil {
		sh.mu.Unlock()
		s.mu.Unlock()
		w.fail(sh, fmt.Errorf("truncate %s: %w", s.path, err))
		return sh.failed
	}
	if s.mapped() > kept.size {
		s.dropMapLocked() // past the new end a mapping faults; re-made on the next read
	}
	s.gen++
	s.keep = kept.size
	w.e.points.cut(s, end)
	s.size, s.crc, s.next = kept.size, kept.crc, kept.next
	s.count, s.minTS, s.maxTS = kept.count, kept.minTS, kept.maxTS
	if s.count == 0 {
		s.firstAt = kept.firstAt
	}
	sh.publishEnd(end)
	sh.activeLen = s.size
	sh.activeMaxTS, sh.activeHasRecs = s.maxTS, s.count > 0
	sh.mu.Unlock()
	s.mu.Unlock()
	// The next record gets an offset entry; the time index goes on from
	// its last entry left.
	sh.sinceIndex = w.e.cfg.IndexInterval
	sh.offsets.Reset()
	ts, _, ok, err := index.LastTime(w.e.index, sh.name)
	if err != nil {
		return err
	}
	sh.tsBucket, sh.tsIndexed = w.bucket(ts), ok
	w.e.log.Info("log truncated", "shard", sh.name, "log_end", end, "high_watermark", sh.high)
	return nil
}

// scan reads from the mmap'd segment files, from segment i on.
func (partitionFiles) scan(ctx context.Context, e *Engine, v view, i int, offset uint64, b store.Budget, o *readOut) error {
	// The segment's in-memory points if it has them (points.go), else
	// the durable index. The record at pos must carry offset expect.
	seg := v.segments[i]
	expect := seg.start
	sp, ok := seg.points.span(seg.start, offset)
	if !ok && i < len(v.segments)-1 && seg.points.pub.Load() == nil {
		// A sealed segment of an earlier run: its points from the
		// durable index, once.
		e.loadPoints(v.name, seg)
		sp, ok = seg.points.span(seg.start, offset)
	}
	pos, afterWindow := int64(0), false
	if ok {
		pos, expect = sp.pos, sp.at
		if !o.view {
			limit, gen := v.activeLen, v.activeGen
			if i < len(v.segments)-1 {
				limit, gen = seg.size, anyGen
			}
			if sp.end < 0 {
				sp.end = limit
			}
			if sp.end-sp.pos <= maxWindow {
				w, done, err := seg.scanWindow(sp, limit, gen, offset, v.high, b, o)
				if done && err == nil {
					return nil
				}
				if err != nil && !errors.Is(err, record.ErrCorrupt) {
					return err
				}
				if err == nil {
					pos, expect, afterWindow = w.pos, w.expect, true
				}
				// Else the mapping's walk from the point meets the damage
				// again and reports it as every read does.
			}
		}
	} else if at, segNo, p, ok, err := index.FloorOffset(e.index, v.name, offset); err != nil {
		return err
	} else if ok && segNo == seg.no && at >= seg.start {
		pos, expect = p, at
	}
	for ; i < len(v.segments); i++ {
		s := v.segments[i]
		// The active segment's size is the worker's: readers take the
		// durable length the view published. A sealed one's size and
		// checksum no longer change.
		sealed := i < len(v.segments)-1
		limit, gen, sum := v.activeLen, v.activeGen, uint32(0)
		if sealed {
			limit, gen, sum = s.size, anyGen, s.crc
		}
		more, err := s.scan(pos, expect, limit, gen, sealed, sum, offset, v.high, b, o)
		// Not after a window's read: its end is a record it checked, and
		// o holds that window's records already.
		if err != nil && pos > 0 && !afterWindow && errors.Is(err, record.ErrCorrupt) {
			// An index point may name a cut record (a truncation's batch
			// once committed its appends' entries after the cut): the
			// segment's own bytes from its start decide.
			e.log.Warn("an offset index point does not match its segment; reading from the segment's start", "shard", v.name, "segment", s.no, "err", err)
			more, err = s.scan(0, s.start, limit, gen, sealed, sum, offset, v.high, b, o)
		}
		if err != nil {
			return err
		}
		if !more || (i+1 < len(v.segments) && v.segments[i+1].start != s.next) {
			break // the budget is used, or a gap follows: the next read goes cold
		}
		pos = 0
		if i+1 < len(v.segments) {
			expect = v.segments[i+1].start
		}
	}
	return nil
}

func (partitionFiles) checksum(e *Engine, v view, no uint64) (uint32, int64, error) {
	for i, s := range v.segments {
		if s.no != no {
			continue
		}
		limit := s.size
		if i == len(v.segments)-1 {
			limit = v.activeLen
		}
		crc, err := fileCRC(s.path, limit)
		if err != nil {
			return 0, 0, err
		}
		return crc, limit, nil
	}
	return 0, 0, fmt.Errorf("shard %s has no local segment %d: %w", v.name, no, store.ErrUnknownShard)
}

func (partitionFiles) scrubSegment(e *Engine, sh *shard, c SegmentMeta) error {
	path := cleanedPath(sh.dir, c.No, c.Cleaned)
	st, err := os.Stat(path)
	if errors.Is(err, os.ErrNotExist) {
		if !e.stillSealedLocal(sh.name, c.No, c.Cleaned) {
			return nil // dropped since the list was read (retention, tiering), or cleaned
		}
		return &scrubbed{c.No, c.StartOffset, fmt.Errorf("scrub %s: %w: %v", path, record.ErrCorrupt, err)}
	}
	if err != nil {
		return fmt.Errorf("scrub %s: %w", path, err)
	}
	got, err := fileCRC(path, st.Size())
	if err != nil {
		return fmt.Errorf("scrub %s: %w", path, err)
	}
	if st.Size() != c.Size || got != c.Checksum {
		return &scrubbed{c.No, c.StartOffset, fmt.Errorf("scrub %s: %d bytes with crc32c %08x; sealed as %d bytes with %08x: %w",
			path, st.Size(), got, c.Size, c.Checksum, record.ErrCorrupt)}
	}
	return nil
}
