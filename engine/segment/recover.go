package segment

import (
	"errors"
	"fmt"
	"math"
	"os"
	"path/filepath"
	"sort"

	"github.com/cockroachdb/pebble"

	"strata/engine/index"
	"strata/engine/record"
)

// recoverShard rebuilds a shard's state on start: sealed segments are taken
// from the manifest (their checksums are verified by a scrub, not here); the
// active segment is scanned, checked record by record and truncated at the
// first torn or corrupt record; index entries a crash lost are re-added.
func (e *Engine) recoverShard(cs ShardMeta) error {
	segs, err := loadSegments(e.manifest, cs.Name)
	if err != nil {
		return err
	}
	sh := e.newShard(cs)
	if err := e.cfg.FS.MkdirAll(sh.dir, 0o755); err != nil {
		return err
	}
	if err := e.removeLeftovers(sh, segs); err != nil {
		return err
	}
	for i, c := range segs {
		if c.State == SegmentRemote {
			continue
		}
		if c.State != SegmentActive {
			s := &segment{no: c.No, start: c.StartOffset, next: c.EndOffset + 1, path: cleanedPath(sh.dir, c.No, c.Cleaned),
				size: c.Size, crc: c.Checksum, count: c.Records, minTS: c.MinTimestamp, maxTS: c.MaxTimestamp, sealed: true,
				created: c.Created, sealedAt: c.SealedAt, cleaned: c.Cleaned, firstCleaned: c.FirstCleaned}
			os.Chmod(s.path, 0o444) // a crash may have come between the roll and the chmod
			if err := checkSealedSize(s); err != nil {
				e.noteDamage(sh, &LocalDamage{Segment: s.no, From: s.start, Cause: err})
			}
			sh.segments = append(sh.segments, s)
			continue
		}
		if i != len(segs)-1 {
			return fmt.Errorf("shard %s: the manifest has active segment %d before segment %d", cs.Name, c.No, segs[i+1].No)
		}
		s, err := e.openActive(sh, c, false)
		if err != nil {
			return err
		}
		if err := e.recoverActive(sh, s); err != nil {
			s.wf.Close()
			return err
		}
		sh.segments = append(sh.segments, s)
	}
	if len(sh.segments) == 0 || sh.segments[len(sh.segments)-1].sealed {
		return fmt.Errorf("shard %s: the manifest has no active segment", cs.Name)
	}
	sh.last.Store(sh.segments[len(sh.segments)-1])
	a := sh.active()
	sh.activeLen = a.size
	sh.publishEnd(a.next)
	err = e.loadHighWatermark(sh)
	if err == nil {
		err = e.loadEpochs(sh)
	}
	if err == nil {
		err = e.reindexFlagged(sh, segs)
	}
	if err == nil {
		sh.activeMaxTS, sh.activeHasRecs = a.maxTS, a.count > 0
		if err = e.reindex(sh); err != nil {
			err = fmt.Errorf("shard %s: rebuilding the index: %w", cs.Name, err)
		}
	}
	if err != nil {
		a.wf.Close() // the shard is not served: nothing else closes it
		return err
	}
	e.shards[cs.Name] = sh
	sh.worker.shards++
	return nil
}

// removeLeftovers removes the segment files of a shard's folder that no
// local segment of the manifest owns: a segment recorded remote (DropLocal)
// or gone from the manifest (retention, or a remote segment below the low
// watermark), whose file a crash kept after the manifest's change. Files
// numbered past the last segment of the manifest are left alone: a new
// segment's file is only made after the manifest records it, so there are
// none.
func (e *Engine) removeLeftovers(sh *shard, segs []SegmentMeta) error {
	if len(segs) == 0 {
		return nil
	}
	names, err := e.cfg.FS.List(sh.dir)
	if err != nil {
		return err
	}
	local := map[uint64]bool{}
	generation := map[uint64]uint64{}
	for _, c := range segs {
		local[c.No] = c.State != SegmentRemote
		generation[c.No] = c.Cleaned
	}
	sort.Strings(names)
	for _, name := range names {
		no, gen, ok := parseSegmentFile(name)
		if !ok || no > segs[len(segs)-1].No || (local[no] && gen == generation[no]) {
			continue
		}
		if local[no] {
			// A cleaning's new file whose commit a crash prevented, or the
			// file it replaced (clean.go).
			e.log.Warn("removing a generation of a segment file the manifest does not name (a crash cut a cleaning)", "shard", sh.name, "segment", no, "file", name)
		} else {
			e.log.Warn("removing a segment file the manifest no longer holds locally (a crash came before its removal)", "shard", sh.name, "segment", no)
		}
		if err := e.cfg.FS.Remove(filepath.Join(sh.dir, name)); err != nil && !errors.Is(err, os.ErrNotExist) {
			return err
		}
	}
	return nil
}

// recoverActive scans the whole active file: every record must check out
// and carry the next offset. The first one that does not ends the log.
// Where it lies says what it is (docs/engine.md, "Recovery"): at or past
// the synced mark, a torn tail (bytes of writes no fsync finished, which
// may hold anything, whole records too), cut off; before it, damage to
// bytes that were on disk, kept for an operator.
func (e *Engine) recoverActive(sh *shard, s *segment) error {
	mark, missing, err := e.loadSynced(sh, s.no)
	if err != nil {
		return err
	}
	synced := mark.pos
	s.synced, s.marked = synced, missing == ""
	f, err := os.Open(s.path)
	if err != nil {
		return err
	}
	defer f.Close()
	st, err := f.Stat()
	if err != nil {
		return err
	}
	next := s.next
	sc := NewScanner(s.path, f, 0, st.Size(), &next)
	for sc.Next() {
		r, pos, _ := sc.Record()
		s.track(r)
		// The in-memory points of the records this run did not write:
		// the same ones the writer made (points.go), so a lookup after a
		// restart walks 4 KiB, not up to IndexInterval records.
		e.points.add(s, r.Offset, pos)
		s.next++
	}
	e.points.publish(s)
	damage := sc.Err()
	if damage == nil && sc.Pos() < synced {
		expected := s.next
		damage = &CorruptError{Path: s.path, Pos: sc.Pos(), Offset: &expected,
			Err: fmt.Errorf("%w: the file ends at byte %d, but it was on disk up to byte %d", record.ErrCorrupt, sc.Pos(), synced)}
	}
	if damage != nil && sc.Pos() < synced {
		// Cutting here would lose records that were on disk, acknowledged
		// under fsync=batch: the file stays as it is, the shard serves what
		// comes before the damage and refuses writes until an operator
		// repairs it (strata segment repair) or a replica restores it.
		later := validRecordAfter(f, sc.Pos(), min(synced, st.Size()), s.next)
		s.size, s.crc = sc.Pos(), sc.CRC()
		d := &DamagedError{Shard: sh.name, Segment: s.no, Pos: sc.Pos(), Synced: synced, From: s.next, Cause: damage, NextValid: later}
		if mark.hasNext {
			d.SyncedEnd = mark.next
		}
		sh.failed = d
		e.noteDamage(sh, &LocalDamage{Segment: s.no, From: s.next, Cause: sh.failed})
		e.stats.Damaged.Add(1)
		e.log.Error("a segment is damaged in bytes that were on disk: serving what comes before, refusing writes",
			"shard", sh.name, "segment", s.no, "at_byte", sc.Pos(), "at_offset", s.next, "synced_to_byte", synced,
			"synced_to_offset", d.SyncedEnd, "next_valid_record_at", later,
			"err", damage, "repair", "strata segment repair --data-dir DIR --shard "+sh.name)
		return nil
	}
	// Under fsync=batch a segment's mark is written before its first byte
	// (markBeforeFirstByte) and moved after every fsync: a segment with
	// bytes and no mark lost it, and whatever a fault cut from the file
	// since its last fsync reads as a torn tail below. Nothing tells how
	// much was acknowledged: the start goes on (docs/engine.md says why),
	// but loudly. Under interval or none no mark is expected after a kill.
	unproven := missing != "" && e.cfg.Fsync == FsyncBatch && st.Size() > 0
	cut := st.Size() - sc.Pos()
	if unproven {
		e.stats.Unmarked.Add(1)
		e.log.Error("an active segment has no synced mark: what recovery cut, or a cut before it, may have held acknowledged records, and nothing tells how many; serving what reads",
			"shard", sh.name, "segment", s.no, "mark", missing, "first_offset", s.start, "log_end", s.next,
			"file_bytes", st.Size(), "cut_bytes", cut, "reason", damage)
	}
	if err := damage; err != nil {
		// cut_bytes is what this start cut, from the last whole record to
		// the end of the file as found: bytes gone from the file before
		// the start are not in it (only a mark could tell them, above).
		attrs := []any{"shard", sh.name, "segment", s.no, "at_byte", sc.Pos(), "log_end", s.next, "synced_to_byte", synced,
			"cut_bytes", cut, "reason", err}
		if !unproven {
			e.log.Warn("truncating a torn segment tail (bytes written after the last fsync)", attrs...)
		}
		if err := truncateFile(s.wf, sc.Pos()); err != nil {
			return fmt.Errorf("truncate %s: %w", s.path, err)
		}
		if err := s.wf.Sync(); err != nil {
			return fmt.Errorf("fsync %s: %w", s.path, err)
		}
		e.stats.CutBytes.Add(uint64(cut))
	}
	s.size = sc.Pos()
	s.crc = sc.CRC()
	if s.count > 0 {
		s.firstAt = e.cfg.Now() // the age clock restarts with the process
	}
	key := false
	if e.oldMarks {
		if _, found, err := e.loadSyncedKey(sh); err != nil {
			return err
		} else {
			key = found
		}
	}
	if unproven || key {
		return e.remark(sh, s, key)
	}
	return nil
}

// reindex re-adds the index entries of every record after the last
// offset-index entry, which a crash between the data fsync and the index
// commit may have lost (each worker batch's entries commit together and in
// order, so everything up to that entry's batch is there). It also drops
// offset entries past the recovered end.
func (e *Engine) reindex(sh *shard) error {
	ib := e.index.NewBatch()
	defer ib.Close()
	if err := index.DeleteOffsetsFrom(e.index, ib, sh.name, sh.end); err != nil {
		return err
	}
	// An offset index of the first format (a key per point) is dropped:
	// finding no point of the current one, the rebuild below starts from
	// the first segment.
	if v1, err := index.HasOffsetsV1(e.index, sh.name); err != nil {
		return err
	} else if v1 {
		e.log.Info("the offset index is in its first format (a key per point); rebuilding it from the data", "shard", sh.name)
		p := index.Prefix(index.KindOffsetV1, sh.name)
		if err := ib.DeleteRange(p, index.UpperBound(p), nil); err != nil {
			return err
		}
		q := index.Prefix(index.KindOffset, sh.name)
		if err := ib.DeleteRange(q, index.UpperBound(q), nil); err != nil {
			return err
		}
	}
	if err := ib.Commit(pebble.NoSync); err != nil {
		return err
	}
	at, segNo, pos, ok, err := index.FloorOffset(e.index, sh.name, math.MaxUint64)
	if err != nil {
		return err
	}
	first := 0
	if ok {
		for first < len(sh.segments) && sh.segments[first].no < segNo {
			first++
		}
	}
	if !ok || first == len(sh.segments) || sh.segments[first].no != segNo {
		first, pos, at = 0, 0, 0
	}
	ib = e.index.NewBatch()
	defer ib.Close()
	added := 0
	for i := first; i < len(sh.segments); i++ {
		s := sh.segments[i]
		n, err := e.reindexFrom(sh, s, pos, at, ib)
		if d := sh.damage.Load(); err != nil && d != nil && d.Segment == s.no {
			// Found damaged above: its records past the damage are not
			// served from here (a replica refills the copy), and the
			// segments after it are indexed still.
			e.log.Warn("indexing a damaged segment up to its damage", "shard", sh.name, "segment", s.no, "err", err)
			err = nil
		}
		if err != nil && pos != 0 {
			// The index entry pointed at no record (a stale entry): the
			// data is the truth, so scan the whole segment instead.
			e.log.Warn("an index entry points at no record; rebuilding the segment's entries from its start", "shard", sh.name,
				"segment", s.no, "at_byte", pos, "err", err)
			if err = ib.DeleteRange(index.OffsetKey(sh.name, s.start), index.OffsetKey(sh.name, s.next), nil); err == nil {
				sh.sinceIndex = 0
				sh.offsets.Reset()
				n, err = e.reindexFrom(sh, s, 0, s.start, ib)
			}
		}
		if err != nil {
			return err
		}
		added += n
		pos = 0
	}
	if added > 0 {
		e.log.Info("index entries rebuilt from data", "shard", sh.name, "records", added)
	}
	return ib.Commit(pebble.Sync)
}

// reindexFrom adds the index entries of the records of s from byte pos on
// whose offsets are at or past at. The record at pos must carry at (the
// index entry's), or the segment's first offset at byte 0: a stale entry
// is then found out instead of indexing records under its offsets.
func (e *Engine) reindexFrom(sh *shard, s *segment, pos int64, at uint64, ib *pebble.Batch) (int, error) {
	f, err := os.Open(s.path)
	if errors.Is(err, os.ErrNotExist) {
		return 0, fmt.Errorf("segment %s is in the manifest but not on disk", s.path)
	}
	if err != nil {
		return 0, err
	}
	defer f.Close()
	added := 0
	expect := at
	if pos == 0 {
		expect = s.start
	}
	sc := NewScanner(s.path, f, pos, s.size, &expect)
	if s.cleaned > 0 {
		sc.Gaps(s.next)
	}
	for sc.Next() {
		r, p, _ := sc.Record()
		if r.Offset >= at {
			sh.worker.indexRecord(sh, s, r, p, ib)
			added++
		}
	}
	return added, sc.Err()
}
