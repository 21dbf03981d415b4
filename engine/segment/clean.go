package segment

import (
	"context"
	"encoding/binary"
	"encoding/json"
	"errors"
	"fmt"
	"hash/crc32"
	"os"
	"path/filepath"
	"slices"
	"time"

	"github.com/cockroachdb/pebble"

	"strata/cleaner"
	"strata/engine/index"
	"strata/engine/record"
	"strata/engine/store"
)

// Cleaning a compacted shard's log (cleanup.policy=compact): the cleaner
// package decides, this file scans and rewrites. A sealed segment is
// rewritten into a new file of its own, {no}.{generation}.msg, holding the
// records the cleaner keeps with their offsets unchanged; the segment keeps
// its number and its range of offsets, so a compacted log has gaps inside
// segments, never between them. Each step is crash-safe (docs/compaction.md,
// "The hot cleaner"):
//
//	write and fsync the new file   a crash: recovery removes it (its
//	                               generation is not the manifest's)
//	commit the manifest entry      one synced batch: the new generation,
//	                               size, checksum, records, first cleaned,
//	                               and a reindex flag
//	swap the segment in memory     readers holding the old file keep its
//	                               mapping; the old file is removed
//	rebuild its index entries      then clear the flag; a crash before:
//	                               recovery rebuilds them from the file
//
// and the cleaner's checkpoint (the first dirty offset) is saved only after
// every rewrite of the run has committed, so a crash in between cleans the
// same segments again, which keeps the same records.

// kindCleaned: 'K' shard -> u64, the first offset no cleaning's offset map
// has covered (cleaner.Partition.FirstDirty).
const kindCleaned = 'K'

func cleanedKey(name string) []byte { return index.Prefix(kindCleaned, name) }

// CleanOptions is one cleaning of one shard (Engine.Clean).
type CleanOptions struct {
	Config cleaner.Config
	// MapBytes is the offset map's memory (cleaner.dedupe_buffer_bytes, as
	// Kafka's log.cleaner.dedupe.buffer.size).
	MapBytes int
	// Frozen, if set, names the sealed local segments the cleaning may not
	// rewrite: those tiering is uploading. Tiered segments (remote) are
	// always frozen: the cold tier's copy is compacted by the cold rewrite.
	Frozen func(no uint64) bool
}

// CleanReport is what one cleaning did.
type CleanReport struct {
	Plan cleaner.Plan
	// Segments rewritten, and their bytes and records before and after.
	Segments                    int
	BytesBefore, BytesAfter     int64
	RecordsBefore, RecordsAfter uint64
	Tombstones, TombstonesKept  uint64
	// Stopped says why the cleaning stopped before the plan's end (a
	// segment frozen meanwhile); its checkpoint did not move.
	Stopped string
}

// Clean cleans a shard of the partition file model once, if the cleaner's
// plan says it is due, and returns what it did. A plan stopped by a full
// offset map before its first dirty segment is an error naming the
// setting to raise.
func (e *Engine) Clean(ctx context.Context, name string, o CleanOptions) (CleanReport, error) {
	// Close waits for a cleaning in its files (e.building), as for a create.
	e.mu.RLock()
	sh, ok := e.shards[name]
	if e.closed || !ok {
		e.mu.RUnlock()
		if e.closed {
			return CleanReport{}, store.ErrClosed
		}
		return CleanReport{}, fmt.Errorf("shard %q: %w", name, store.ErrUnknownShard)
	}
	e.building.Add(1)
	e.mu.RUnlock()
	defer e.building.Done()
	if _, ok := sh.files.(partitionFiles); !ok {
		return CleanReport{}, fmt.Errorf("shard %s: cleaning is for the partition file model (strata.file.model=partition); the shard is in the shared files", name)
	}
	// One cleaning of a shard at a time, and no DropLocal, retention or
	// deletion under its feet; a shard deleted before is left alone.
	sh.sealedMu.Lock()
	defer sh.sealedMu.Unlock()
	e.mu.RLock()
	still := e.shards[name] == sh
	e.mu.RUnlock()
	if !still {
		return CleanReport{}, fmt.Errorf("shard %q: %w", name, store.ErrUnknownShard)
	}
	p, err := e.cleanerView(sh, o.Frozen)
	if err != nil {
		return CleanReport{}, err
	}
	now := e.cfg.Now()
	plan := cleaner.PlanPartition(now, p, o.Config)
	rep := CleanReport{Plan: plan}
	if !plan.Clean {
		return rep, nil
	}
	m := cleaner.NewOffsetMap(o.MapBytes)
	mapped := plan.End
	for _, s := range e.localSegments(sh) {
		if s.next <= plan.FirstDirty || s.start >= plan.End || mapped < plan.End {
			continue
		}
		_, _, err := scanSegmentFile(s, func(r *record.Record) error {
			if r.Offset < plan.FirstDirty || r.Offset >= plan.End {
				return nil
			}
			if !m.Put(r.Key, r.Offset) {
				mapped = r.Offset
				return errMapFull
			}
			return nil
		})
		if err != nil && !errors.Is(err, errMapFull) {
			return rep, fmt.Errorf("shard %s: building the offset map from segment %d: %w", name, s.no, err)
		}
	}
	if plan, err = plan.Mapped(mapped); err != nil {
		return rep, fmt.Errorf("shard %s: %w", name, err)
	}
	rep.Plan = plan
	crashPoint("clean:mapped")
	for _, rw := range plan.Rewrite {
		if err := ctx.Err(); err != nil {
			return rep, err
		}
		err := e.rewriteSegment(sh, rw, m, o.Frozen, now, &rep)
		if errors.Is(err, errFrozen) {
			// The checkpoint stays: the next cleaning goes on from the
			// segments rewritten so far.
			e.log.Info("cleaning stopped before a segment tiering began to upload", "shard", name, "segment", rw.No, "rewritten", rep.Segments)
			rep.Stopped = fmt.Sprintf("segment %d began uploading during the cleaning", rw.No)
			return rep, nil
		}
		if err != nil {
			return rep, fmt.Errorf("shard %s: cleaning segment %d: %w", name, rw.No, err)
		}
	}
	b := e.manifest.NewBatch()
	defer b.Close()
	if err := b.Set(cleanedKey(name), binary.BigEndian.AppendUint64(nil, plan.End), nil); err != nil {
		return rep, err
	}
	if err := b.Commit(pebble.Sync); err != nil {
		return rep, err
	}
	crashPoint("clean:checkpoint")
	e.log.Info("shard cleaned", "shard", name, "segments", rep.Segments, "bytes_before", rep.BytesBefore, "bytes_after", rep.BytesAfter,
		"records_before", rep.RecordsBefore, "records_after", rep.RecordsAfter, "first_dirty", plan.FirstDirty, "end", plan.End, "why", plan.Why)
	return rep, nil
}

var errMapFull = errors.New("the offset map is full")

var errFrozen = errors.New("tiering began uploading the segment during its cleaning; the cleaning stops, and the next one goes on")

// dropBatchBytes bounds the index deletions one segment's rewrite holds.
const dropBatchBytes = 64 << 20

// cleanerView is the shard's log as the cleaner's planner sees it: the
// tiered segments (frozen), the local ones, the active one last.
func (e *Engine) cleanerView(sh *shard, frozen func(uint64) bool) (cleaner.Partition, error) {
	metas, err := loadSegments(e.manifest, sh.name)
	if err != nil {
		return cleaner.Partition{}, err
	}
	var p cleaner.Partition
	v, closer, err := e.manifest.Get(cleanedKey(sh.name))
	switch {
	case err == nil:
		if len(v) == 8 {
			p.FirstDirty = binary.BigEndian.Uint64(v)
		}
		closer.Close()
	case !errors.Is(err, pebble.ErrNotFound):
		return p, err
	}
	sh.mu.RLock()
	defer sh.mu.RUnlock()
	first := sh.segments[0].start
	for _, c := range metas {
		if c.State == SegmentRemote && c.StartOffset < first {
			p.Segments = append(p.Segments, cleaner.Segment{No: c.No, Start: c.StartOffset, End: c.EndOffset + 1, Bytes: c.Size,
				MinTimestamp: time.UnixMilli(c.MinTimestamp), MaxTimestamp: time.UnixMilli(c.MaxTimestamp), Frozen: true})
		}
	}
	for i, s := range sh.segments {
		active := i == len(sh.segments)-1
		seg := cleaner.Segment{No: s.no, Start: s.start, End: s.next, Bytes: s.size, FirstCleaned: s.firstCleaned, Active: active,
			MinTimestamp: time.UnixMilli(s.minTS), MaxTimestamp: time.UnixMilli(s.maxTS), Frozen: !active && frozen != nil && frozen(s.no)}
		if active {
			seg.End, seg.Bytes = sh.end, sh.activeLen
		}
		p.Segments = append(p.Segments, seg)
	}
	return p, nil
}

func (e *Engine) localSegments(sh *shard) []*segment {
	sh.mu.RLock()
	defer sh.mu.RUnlock()
	return append([]*segment(nil), sh.segments[:len(sh.segments)-1]...)
}

// rewriteSegment writes the records of one sealed segment the cleaner keeps
// into the segment's next generation and swaps it in.
func (e *Engine) rewriteSegment(sh *shard, rw cleaner.Rewrite, m *cleaner.OffsetMap, frozen func(uint64) bool, now time.Time, rep *CleanReport) error {
	var old *segment
	for _, s := range e.localSegments(sh) {
		if s.no == rw.No {
			old = s
		}
	}
	if old == nil {
		return nil // dropped since the plan (nothing else drops a segment while sealedMu is held, but a restore may replace the shard)
	}
	// The next generation is past the manifest's too: a commit whose
	// outcome an error left unknown may have named one the segment in
	// memory does not know.
	gen := old.cleaned
	if v, closer, err := e.manifest.Get(segmentKey(sh.name, old.no)); err == nil {
		var c SegmentMeta
		err = json.Unmarshal(v, &c)
		closer.Close()
		if err != nil {
			return err
		}
		gen = max(gen, c.Cleaned)
	} else if !errors.Is(err, pebble.ErrNotFound) {
		return err
	}
	ns := &segment{no: old.no, start: old.start, next: old.next, created: old.created, sealedAt: old.sealedAt, sealed: true,
		cleaned: gen + 1, firstCleaned: old.firstCleaned}
	if ns.firstCleaned.IsZero() {
		ns.firstCleaned = now.UTC()
	}
	ns.path = cleanedPath(sh.dir, ns.no, ns.cleaned)
	// A file of this generation is a leftover of a cleaning that failed
	// before its commit in this process (recovery removes those of a crash).
	if err := e.cfg.FS.Remove(ns.path); err != nil && !errors.Is(err, os.ErrNotExist) {
		return err
	}
	wf, err := createSegmentFile(e.cfg.FS, ns.path)
	if err != nil {
		return err
	}
	defer func() {
		if wf != nil {
			wf.Close()
			e.cfg.FS.Remove(ns.path)
		}
	}()
	var buf []byte
	var positions []int64
	var kept []uint64
	// The key and tag entries of the records dropped go once the new
	// generation is committed; past dropBatchBytes they are left to
	// readIndexed's check (it finds no record at such an entry).
	del := e.index.NewBatch()
	defer del.Close()
	flush := func() error {
		if _, err := wf.Write(buf); err != nil {
			return err
		}
		buf = buf[:0]
		return nil
	}
	var tombstones, tombstonesKept uint64
	_, _, err = scanSegmentFile(old, func(r *record.Record) error {
		tomb := r.Value == nil && r.Key != nil
		if tomb {
			tombstones++
		}
		if !cleaner.Keep(m, rw, cleaner.Record{Offset: r.Offset, Key: r.Key, Tombstone: r.Value == nil}) {
			if del.Len() < dropBatchBytes {
				if r.Key != nil {
					del.Delete(index.WithOffset(index.KeyPrefix(sh.name, r.Key), r.Offset), nil)
				}
				for _, t := range r.Tags {
					del.Delete(index.WithOffset(index.TagPrefix(sh.name, t), r.Offset), nil)
				}
			}
			return nil
		}
		if tomb {
			tombstonesKept++
		}
		at := len(buf)
		var err error
		if buf, err = record.Append(buf, r); err != nil {
			return err
		}
		ns.crc = crc32.Update(ns.crc, castagnoli, buf[at:])
		positions = append(positions, ns.size)
		kept = append(kept, r.Offset)
		ns.size += int64(len(buf) - at)
		ns.track(r)
		if len(buf) >= 1<<20 {
			return flush()
		}
		return nil
	})
	if err == nil {
		err = flush()
	}
	if err == nil {
		err = wf.Sync()
	}
	if cerr := wf.Close(); err == nil {
		err = cerr
	}
	wf = nil
	if err == nil {
		os.Chmod(ns.path, 0o444)
		err = syncDir(e.cfg.FS, sh.dir)
	}
	if err != nil {
		e.cfg.FS.Remove(ns.path)
		return err
	}
	if ns.count == old.count && !old.firstCleaned.IsZero() {
		e.cfg.FS.Remove(ns.path) // nothing to drop: the segment stays as it is
		return nil
	}
	if ns.count == 0 { // nothing kept: the times stay the segment's, for retention
		ns.minTS, ns.maxTS = old.minTS, old.maxTS
	}
	crashPoint("clean:written")
	if frozen != nil && frozen(old.no) {
		// Tiering took it meanwhile: the upload reads the old file, so
		// the rewrite is abandoned before its commit (docs/compaction.md).
		e.cfg.FS.Remove(ns.path)
		return errFrozen
	}
	meta := ns.meta(sh.name, SegmentSealed)
	meta.Reindex = true
	b := e.manifest.NewBatch()
	defer b.Close()
	if err := putSegment(b, meta); err != nil {
		return err
	}
	if err := b.Commit(pebble.Sync); err != nil {
		// The file stays: if the commit took after all, it is the
		// segment's; if not, the next start removes it.
		return err
	}
	crashPoint("clean:committed")
	// Past the commit the new generation is the segment's: the swap is
	// always made, and what fails before it is left to the reindex flag
	// (the next start rebuilds the index entries).
	if err := del.Commit(pebble.NoSync); err != nil {
		e.log.Warn("deleting a cleaned segment's dropped records' key entries; ReadByKey skips them", "shard", sh.name, "segment", old.no, "err", err)
	}
	// The new generation's index points, before any reader can reach it:
	// a reader of the old one meanwhile that follows a new durable point
	// into the old file finds no record there and reads the segment from
	// its start.
	reindexed := e.reindexCleaned(sh, ns, kept, positions)
	if reindexed != nil {
		e.log.Error("indexing a cleaned segment; the next start rebuilds its entries", "shard", sh.name, "segment", old.no, "err", reindexed)
	}
	// Readers of the old generation walk its mapping: made now, it outlives
	// the file's removal (retire lets it go a minute on).
	old.mu.Lock()
	err = old.remapLocked(old.size)
	old.mu.Unlock()
	if err != nil {
		e.log.Warn("mapping a segment before its cleaned generation replaces it", "shard", sh.name, "segment", old.no, "err", err)
	}
	// A new slice: views taken before hold the old one's array.
	sh.mu.Lock()
	segs := slices.Clone(sh.segments)
	for i, s := range segs {
		if s == old {
			segs[i] = ns
		}
	}
	sh.segments = segs
	sh.mu.Unlock()
	e.retire(old)
	if err := e.cfg.FS.Remove(old.path); err != nil && !errors.Is(err, os.ErrNotExist) {
		e.log.Warn("removing a segment's generation its cleaning replaced; the next start removes it", "path", old.path, "err", err)
	}
	crashPoint("clean:swapped")
	if reindexed == nil {
		if err := e.clearReindex(sh, ns); err != nil {
			e.log.Warn("clearing a cleaned segment's reindex flag; the next start rebuilds its entries", "shard", sh.name, "segment", old.no, "err", err)
		}
	}
	rep.Segments++
	rep.RecordsBefore += old.count
	rep.Tombstones += tombstones
	rep.TombstonesKept += tombstonesKept
	rep.BytesBefore += old.size
	rep.BytesAfter += ns.size
	rep.RecordsAfter += ns.count
	return nil
}

// reindexCleaned replaces a cleaned segment's offset-index points (and its
// in-memory ones) with the new file's, then clears the manifest's reindex
// flag.
func (e *Engine) reindexCleaned(sh *shard, s *segment, kept []uint64, positions []int64) error {
	ib := e.index.NewBatch()
	defer ib.Close()
	if err := ib.DeleteRange(index.OffsetKey(sh.name, s.start), index.OffsetKey(sh.name, s.next), nil); err != nil {
		return err
	}
	var g index.OffsetGroup
	for i, off := range kept {
		e.points.add(s, off, positions[i])
		if i%e.cfg.IndexInterval == 0 {
			g.Add(off, s.no, positions[i])
			if err := ib.Set(index.OffsetKey(sh.name, g.First()), g.Value(), nil); err != nil {
				return err
			}
		}
	}
	e.points.publish(s)
	e.points.sealedNow(s)
	if err := ib.Commit(pebble.Sync); err != nil {
		return err
	}
	crashPoint("clean:reindexed")
	return nil
}

func (e *Engine) clearReindex(sh *shard, s *segment) error {
	b := e.manifest.NewBatch()
	defer b.Close()
	if err := putSegment(b, s.meta(sh.name, SegmentSealed)); err != nil {
		return err
	}
	return b.Commit(pebble.NoSync)
}

// cleanedPath is the file of a segment's generation: {no}.msg as written,
// {no}.{generation}.msg after each cleaning.
func cleanedPath(dir string, no, generation uint64) string {
	if generation == 0 {
		return segmentPath(dir, no)
	}
	return filepath.Join(dir, fmt.Sprintf("%d.%d.msg", no, generation))
}

// parseSegmentFile is the segment number and generation of a file name of
// a shard's folder, if it is a segment file's.
func parseSegmentFile(name string) (no, generation uint64, ok bool) {
	if n, err := fmt.Sscanf(name, "%d.%d.msg", &no, &generation); err == nil && n == 2 && name == fmt.Sprintf("%d.%d.msg", no, generation) && generation > 0 {
		return no, generation, true
	}
	if n, err := fmt.Sscanf(name, "%d.msg", &no); err == nil && n == 1 && name == fmt.Sprintf("%d.msg", no) {
		return no, 0, true
	}
	return 0, 0, false
}

// scanSegmentFile streams a local segment's records: a cleaned one's
// offsets only increase (it has gaps), anyone else's follow each other.
func scanSegmentFile(s *segment, fn func(*record.Record) error) (uint32, int64, error) {
	f, err := os.Open(s.path)
	if err != nil {
		return 0, 0, err
	}
	defer f.Close()
	st, err := f.Stat()
	if err != nil {
		return 0, 0, err
	}
	var from *uint64
	if s.cleaned > 0 {
		start := s.start
		from = &start
	}
	sc := NewScanner(s.path, f, 0, st.Size(), from)
	sc.Views()
	if s.cleaned > 0 {
		sc.Gaps(s.next)
	}
	for sc.Next() {
		r, _, _ := sc.Record()
		if err := fn(r); err != nil {
			return sc.CRC(), sc.Pos(), err
		}
	}
	return sc.CRC(), sc.Pos(), sc.Err()
}

// reindexFlagged rebuilds the index entries of the segments whose cleaning
// a crash cut between its manifest commit and its index commit.
func (e *Engine) reindexFlagged(sh *shard, segs []SegmentMeta) error {
	for _, c := range segs {
		if !c.Reindex {
			continue
		}
		for _, s := range sh.segments {
			if s.no != c.No {
				continue
			}
			var kept []uint64
			var positions []int64
			pos := int64(0)
			if _, _, err := scanSegmentFile(s, func(r *record.Record) error {
				kept, positions = append(kept, r.Offset), append(positions, pos)
				pos += int64(record.Size(r))
				return nil
			}); err != nil {
				return fmt.Errorf("shard %s: reindexing cleaned segment %d: %w", sh.name, s.no, err)
			}
			e.log.Info("rebuilding a cleaned segment's index entries (a crash came before they were written)", "shard", sh.name, "segment", s.no)
			if err := e.reindexCleaned(sh, s, kept, positions); err != nil {
				return err
			}
			if err := e.clearReindex(sh, s); err != nil {
				return err
			}
		}
	}
	return nil
}
