package segment

import (
	"encoding/binary"
	"fmt"
	"math"
	"slices"
	"sort"

	"github.com/cockroachdb/pebble"

	"strata/engine/index"
	"strata/engine/record"
	"strata/engine/sharedfile"
)

// Recovery of the shared shards (docs/engine.md, "The shared-file model").
// The chunk entries are written unsynced after their chunks, so a crash
// may lose the last ones: each shard's log end is its last entry's end,
// then the shard's chunks written after that entry that continue the log
// (the shared files are read chunk header by chunk header from the
// entry's file on, or from where the shard began when it has none). The
// shard's logical truncations (cuts) are applied as they were made: a cut
// at (end, position) drops the shard's chunks written before the position
// from end on.

// sharedStart is where one shared shard's recovery starts: after chunk
// from (its last trusted entry), at offset end.
type sharedStart struct {
	from sharedfile.Ref
	end  uint64
	cuts []cutMeta
	// damaged is set when a chunk entry of the shard names a chunk in the
	// damage of a shared file: the shard starts from the entry before it
	// and refuses writes; its entries are kept.
	damaged *SharedDamagedError
}

// damageAt is the damage of shared file no that byte pos lies in, if any:
// from where the damage starts to the batch after it that proved it. (A
// chunk past what checks out after the last damage is in the file's torn
// tail: lost by a crash, not damage.)
func (e *Engine) damageAt(no uint64, pos int64) *sharedfile.CorruptError {
	regions := e.damagedFiles[no]
	for _, r := range regions {
		if pos >= r.Pos && pos < r.NextValid {
			return r
		}
	}
	return nil
}

// sharedStartOf applies the shard's cuts to its chunk entries (a crash
// may have come between recording a cut and deleting the entries it
// killed), drops a last entry whose chunk is not there (its bytes were
// lost with an fsync interval) and gives the shard's starting point.
func (e *Engine) sharedStartOf(cs ShardMeta, segs []SegmentMeta) (sharedStart, error) {
	d := e.shared.Load()
	cuts, err := loadCuts(e.manifest, cs.Name)
	if err != nil {
		return sharedStart{}, err
	}
	for _, c := range cuts {
		ib := e.index.NewBatch()
		if err := index.ChunksFrom(e.index, cs.Name, c.End, func(en index.ChunkEntry) bool {
			if !(sharedfile.Ref{File: en.File, Pos: en.Pos}).Less(c.Pos) {
				return true // written after the cut
			}
			switch {
			case en.First >= c.End:
				ib.Delete(index.ChunkKey(cs.Name, en.First), nil)
			case en.End() > c.End:
				en.Count = uint32(c.End - en.First)
				ib.Set(index.ChunkKey(cs.Name, en.First), index.ChunkValue(en), nil)
			}
			return true
		}); err != nil {
			ib.Close()
			return sharedStart{}, err
		}
		err := ib.Commit(pebble.NoSync)
		ib.Close()
		if err != nil {
			return sharedStart{}, err
		}
	}
	if len(e.damagedFiles) > 0 {
		// An entry naming a chunk in damage: the shard's log, as far as it
		// reads, ends before it, however far the entries go.
		var bad index.ChunkEntry
		var derr *sharedfile.CorruptError
		if err := index.ChunksFrom(e.index, cs.Name, 0, func(c index.ChunkEntry) bool {
			if c.File >= cs.FromFile {
				derr = e.damageAt(c.File, c.Pos)
			}
			bad = c
			return derr == nil
		}); err != nil {
			return sharedStart{}, err
		}
		if derr != nil {
			return e.sharedStartBefore(cs, segs, cuts, bad, derr)
		}
	}
	for {
		last, ok, err := index.LastChunk(e.index, cs.Name)
		if err != nil {
			return sharedStart{}, err
		}
		if !ok {
			break
		}
		sid := cs.ID
		rerr := d.ReadChunk(sharedfile.Ref{File: last.File, Pos: last.Pos}, &sid, func(h sharedfile.Header, _ []byte) error {
			if h.First != last.First || h.Count < last.Count {
				return fmt.Errorf("chunk holds offsets %d to %d", h.First, h.Last())
			}
			return nil
		})
		if rerr == nil {
			// The entries after this one may have been lost with the
			// index's unsynced writes while the manifest, synced, moved on:
			// an entry below the first local segment is of a segment
			// tiered and dropped since, whose files may be gone. The
			// segments say where to start then.
			if seg := sharedStartOfSegments(cs, segs, cuts); last.End() < seg.end {
				return seg, nil
			}
			return sharedStart{from: sharedfile.Ref{File: last.File, Pos: last.Pos}, end: last.End(), cuts: cuts}, nil
		}
		if derr := e.damageAt(last.File, last.Pos); derr != nil {
			// Not lost by a crash: the chunk is in damage. Its entry and
			// those before it stay (a repair decides); the shard starts
			// from the last entry whose chunk reads, and refuses writes.
			return e.sharedStartBefore(cs, segs, cuts, last, derr)
		}
		e.log.Warn("a chunk entry names no chunk of the shard (lost by a crash): dropped", "shard", cs.Name,
			"offset", last.First, "file", last.File, "at_byte", last.Pos, "err", rerr)
		if err := e.index.Delete(index.ChunkKey(cs.Name, last.First), pebble.NoSync); err != nil {
			return sharedStart{}, err
		}
	}
	return sharedStartOfSegments(cs, segs, cuts), nil
}

// sharedStartBefore starts a shard whose chunk entry bad names a chunk in
// damage derr: from the last entry before it whose chunk reads.
func (e *Engine) sharedStartBefore(cs ShardMeta, segs []SegmentMeta, cuts []cutMeta, bad index.ChunkEntry, derr *sharedfile.CorruptError) (sharedStart, error) {
	var before []index.ChunkEntry
	if err := index.ChunksFrom(e.index, cs.Name, 0, func(c index.ChunkEntry) bool {
		if c.First >= bad.First {
			return false
		}
		before = append(before, c)
		return true
	}); err != nil {
		return sharedStart{}, err
	}
	st := sharedStartOfSegments(cs, segs, cuts)
	d := e.shared.Load()
	sid := cs.ID
	for i := len(before) - 1; i >= 0; i-- {
		c := before[i]
		if d.ReadChunk(sharedfile.Ref{File: c.File, Pos: c.Pos}, &sid, func(sharedfile.Header, []byte) error { return nil }) == nil {
			st.from, st.end = sharedfile.Ref{File: c.File, Pos: c.Pos}, c.End()
			break
		}
	}
	st.damaged = &SharedDamagedError{Shard: cs.Name, Files: []uint64{bad.File}, Cause: derr, LogEnd: st.end}
	e.log.Error("a shared shard's chunk lies in the damage of a shared file: serving what comes before, refusing writes",
		"shard", cs.Name, "file", bad.File, "at_byte", bad.Pos, "offsets_from", bad.First, "log_end", st.end)
	return st, nil
}

// sharedStartOfSegments is where a shard with no usable chunk entry
// starts: its first local segment's first file, or where it began.
func sharedStartOfSegments(cs ShardMeta, segs []SegmentMeta, cuts []cutMeta) sharedStart {
	st := sharedStart{from: sharedfile.Ref{File: cs.FromFile, Pos: -1}, cuts: cuts}
	for _, s := range segs {
		if s.State == SegmentRemote {
			st.from.File = max(st.from.File, s.LastFile)
			continue
		}
		st.end = s.StartOffset
		if s.State == SegmentSealed && s.FirstFile > 0 {
			st.from.File = s.FirstFile
		}
		break
	}
	return st
}

// sharedChunks lists, per shard id, the chunks of every shared file
// numbered from or past first, in the order they were written.
func (e *Engine) sharedChunks(first uint64) (map[uint64][]sharedfile.Chunk, error) {
	d := e.shared.Load()
	out := map[uint64][]sharedfile.Chunk{}
	for _, f := range d.Files() {
		if f.No < first {
			continue
		}
		chunks, ok := e.recovered[f.No]
		if !ok {
			var err error
			if chunks, err = d.Chunks(f.No); err != nil {
				// A file damaged inside: what comes before the damage is read.
				e.log.Error("listing a shared file's chunks", "file", f.No, "err", err)
			}
		}
		for _, c := range chunks {
			out[c.Shard] = append(out[c.Shard], c)
		}
	}
	return out, nil
}

// recoverSharedShard rebuilds a shared shard from its manifest, its
// starting point and its chunks written after it.
func (e *Engine) recoverSharedShard(cs ShardMeta, segs []SegmentMeta, st sharedStart, chunks []sharedfile.Chunk) error {
	sh := e.newShard(cs)
	if err := e.cfg.FS.MkdirAll(sh.dir, 0o755); err != nil {
		return err
	}
	for i, c := range segs {
		if c.State == SegmentRemote {
			continue
		}
		s := &segment{no: c.No, start: c.StartOffset, next: c.StartOffset, created: c.Created, sealedAt: c.SealedAt}
		s.firstFile.Store(c.FirstFile)
		s.lastFile.Store(c.LastFile)
		if c.State != SegmentActive {
			s.next, s.size, s.crc, s.count = c.EndOffset+1, c.Size, c.Checksum, c.Records
			s.minTS, s.maxTS, s.sealed = c.MinTimestamp, c.MaxTimestamp, true
		} else if i != len(segs)-1 {
			return fmt.Errorf("shard %s: the manifest has active segment %d before segment %d", cs.Name, c.No, segs[i+1].No)
		}
		sh.segments = append(sh.segments, s)
	}
	if len(sh.segments) == 0 || sh.segments[len(sh.segments)-1].sealed {
		return fmt.Errorf("shard %s: the manifest has no active segment", cs.Name)
	}
	sh.last.Store(sh.segments[len(sh.segments)-1])
	a := sh.active()

	// Replay the chunks written after the starting point, and the cuts
	// made after it, in the order they were written and made.
	end := st.end
	var added []index.ChunkEntry
	cut := func(at uint64) {
		if at >= end {
			return
		}
		end = at
		for len(added) > 0 && added[len(added)-1].First >= at {
			added = added[:len(added)-1]
		}
		if n := len(added); n > 0 && added[n-1].End() > at {
			added[n-1].Count = uint32(at - added[n-1].First)
		}
	}
	var cuts []cutMeta
	for _, c := range st.cuts {
		if st.from.Less(c.Pos) {
			cuts = append(cuts, c)
		}
	}
	for _, c := range chunks {
		if !st.from.Less(c.Ref) {
			continue
		}
		for len(cuts) > 0 && !c.Ref.Less(cuts[0].Pos) {
			cut(cuts[0].End)
			cuts = cuts[1:]
		}
		if c.First == end {
			added = append(added, index.ChunkEntry{First: c.First, File: c.File, Pos: c.Pos, Count: c.Count})
			end = c.Last() + 1
		}
	}
	for _, c := range cuts {
		cut(c.End)
	}
	var unmarked []uint64
	for _, c := range chunks {
		if _, ok := e.unmarkedFiles[c.File]; ok && !slices.Contains(unmarked, c.File) {
			unmarked = append(unmarked, c.File)
		}
	}
	if len(unmarked) > 0 {
		e.log.Error("a shared shard has chunks in a shared file with no synced mark: acknowledged records past its log end may be lost, and nothing tells how many; serving what reads",
			"shard", cs.Name, "segment", a.no, "first_offset", a.start, "log_end", end, "files", unmarked)
	}
	// A shared file damaged inside may hold this shard's last records: then
	// writes would give acknowledged offsets to new records. The shard is
	// refused unless its log, as replayed, goes on past every damage of
	// every such file it may have chunks in (its next chunk after the
	// damage continued the log, so the damage held none of its live
	// records), or a repair gave that file up.
	last := st.from
	if n := len(added); n > 0 {
		last = sharedfile.Ref{File: added[n-1].File, Pos: added[n-1].Pos}
	}
	damaged := st.damaged
	repaired := map[uint64]bool{}
	for _, c := range st.cuts {
		for _, f := range c.RepairedFiles {
			repaired[f] = true
		}
	}
	var files []uint64
	for no := range e.damagedFiles {
		files = append(files, no)
	}
	sort.Slice(files, func(i, j int) bool { return files[i] < files[j] })
	for _, no := range files {
		if no < cs.FromFile || repaired[no] {
			continue
		}
		for _, r := range e.damagedFiles[no] {
			if !last.Less(sharedfile.Ref{File: no, Pos: r.NextValid}) {
				continue
			}
			if damaged == nil {
				damaged = &SharedDamagedError{Shard: cs.Name, Cause: r, LogEnd: end}
			}
			if !slices.Contains(damaged.Files, no) {
				damaged.Files = append(damaged.Files, no)
			}
			break
		}
	}
	if damaged != nil {
		damaged.LogEnd = end
		sh.failed = damaged
		// As a file-per-partition copy's damaged active segment: a
		// replica's copy is refilled from its leader (Damage).
		e.noteDamage(sh, &LocalDamage{Segment: a.no, From: end, Cause: damaged})
		e.stats.Damaged.Add(1)
		e.log.Error("a shared shard may have records in the damage of a shared file: serving what comes before, refusing writes",
			"shard", cs.Name, "files", damaged.Files, "log_end", end)
		if end < a.start {
			// The damage took records of sealed segments too: the log
			// end stays where the manifest has it; reads there fail.
			end = a.start
		}
	}
	if end < a.start {
		return fmt.Errorf("shard %s: the shared files hold its offsets up to %d, but its active segment %d starts at %d: %w",
			cs.Name, end, a.no, a.start, record.ErrCorrupt)
	}

	ib := e.index.NewBatch()
	defer ib.Close()
	// A refused shard's entries past its end name what the damage held:
	// kept, for a repair to drop.
	if damaged == nil {
		if err := index.DeleteChunksFrom(e.index, ib, cs.Name, end); err != nil {
			return err
		}
	}
	d := e.shared.Load()
	for _, c := range added {
		ib.Set(index.ChunkKey(cs.Name, c.First), index.ChunkValue(c), nil)
		sid := cs.ID
		if err := d.ReadChunk(sharedfile.Ref{File: c.File, Pos: c.Pos}, &sid, func(_ sharedfile.Header, recs []byte) error {
			for p := 0; p < len(recs); {
				r, n, err := record.Decode(recs[p:])
				if err != nil {
					return err
				}
				if r.Offset >= c.End() {
					break
				}
				sh.worker.indexAttrs(sh, &r, ib)
				p += n
			}
			return nil
		}); err != nil {
			return fmt.Errorf("shard %s: re-indexing: %w", cs.Name, err)
		}
	}
	if len(added) > 0 {
		e.log.Info("chunk entries rebuilt from the shared files", "shard", cs.Name, "chunks", len(added), "log_end", end)
	}
	if err := ib.Commit(pebble.Sync); err != nil {
		return err
	}

	// The active segment: its statistics, checksum and files, from its
	// chunks.
	a.next = a.start
	if end > a.start {
		crc, size, err := e.scanSegmentShared(cs.Name, cs.ID, a, end, func(r *record.Record) error {
			a.track(r)
			return nil
		})
		if err != nil {
			return fmt.Errorf("shard %s: recovering the active segment: %w", cs.Name, err)
		}
		a.crc, a.size, a.next = crc, size, end
		a.firstAt = e.cfg.Now()
		first := true
		if err := index.ChunksFrom(e.index, cs.Name, a.start, func(c index.ChunkEntry) bool {
			if c.End() <= a.start {
				return true
			}
			if first {
				a.firstFile.Store(c.File)
				first = false
			}
			a.lastFile.Store(c.File)
			return true
		}); err != nil {
			return err
		}
	}
	if damaged != nil {
		// Its active segment holds the damaged files (the sweep keeps
		// them, for a repair or a restore to decide).
		if f := slices.Min(damaged.Files); a.firstFile.Load() == 0 || a.firstFile.Load() > f {
			a.firstFile.Store(f)
		}
	}
	sh.activeLen = a.size
	sh.publishEnd(a.next)
	if err := e.loadHighWatermark(sh); err != nil {
		return err
	}
	if err := e.loadEpochs(sh); err != nil {
		return err
	}
	sh.activeMaxTS, sh.activeHasRecs = a.maxTS, a.count > 0
	e.shards[cs.Name] = sh
	sh.worker.shards++
	return nil
}

// recoverShared recovers every shared shard of the manifest: the
// starting points first, then one pass over the shared files from the
// oldest of them.
func (e *Engine) recoverShared(shards []ShardMeta) error {
	type pending struct {
		cs   ShardMeta
		segs []SegmentMeta
		st   sharedStart
	}
	var todo []pending
	first := uint64(math.MaxUint64)
	for _, cs := range shards {
		if cs.Model != ModelShared {
			continue
		}
		segs, err := loadSegments(e.manifest, cs.Name)
		if err != nil {
			return err
		}
		st, err := e.sharedStartOf(cs, segs)
		if err != nil {
			return fmt.Errorf("shard %s: %w", cs.Name, err)
		}
		first = min(first, st.from.File)
		todo = append(todo, pending{cs, segs, st})
	}
	if len(todo) == 0 {
		return nil
	}
	chunks := map[uint64][]sharedfile.Chunk{}
	if !e.cleanStart {
		var err error
		if chunks, err = e.sharedChunks(first); err != nil {
			return err
		}
	}
	for _, p := range todo {
		if err := e.recoverSharedShard(p.cs, p.segs, p.st, chunks[p.cs.ID]); err != nil {
			return err
		}
	}
	return nil
}

// openSharedAtStart opens the shared files when the manifest has a
// shared shard or the folder exists (files of shards since deleted, to
// sweep).
func (e *Engine) openSharedAtStart(shards []ShardMeta) error {
	// A clean Close synced every chunk entry and said so: the files need
	// no reading. The mark goes (synced) before anything is written.
	clean, err := readCounter(e.manifest, "clean")
	if err != nil {
		return err
	}
	if clean != 0 {
		if err := e.manifest.Delete(counterKey("clean"), pebble.Sync); err != nil {
			return err
		}
	}
	need := false
	for _, s := range shards {
		need = need || s.Model == ModelShared
	}
	if !need {
		if _, err := e.cfg.FS.Stat(e.sharedDir()); err != nil {
			return nil
		}
	}
	if _, err := e.openShared(); err != nil {
		return err
	}
	// Files a crash left unsealed, or damaged, were written after the mark
	// (it is only made with every writer's file sealed): read them all.
	e.cleanStart = clean == 1 && e.indexKept && len(e.recovered) == 0 && len(e.damagedFiles) == 0
	return nil
}

// markClean, at Close, makes every chunk entry durable (they are written
// unsynced), then records that in the manifest, so the next start need
// not read the shared files' chunk headers to find lost ones.
func (e *Engine) markClean() error {
	if err := e.index.LogData(nil, pebble.Sync); err != nil {
		return err
	}
	return e.manifest.Set(counterKey("clean"), binary.BigEndian.AppendUint64(nil, 1), pebble.Sync)
}
