package segment

import (
	"fmt"
	"time"

	"github.com/cockroachdb/pebble"
	"github.com/cockroachdb/pebble/vfs"

	"strata/engine/index"
	"strata/engine/record"
	"strata/engine/sharedfile"
	"strata/engine/store"
)

type request struct {
	shard *shard
	recs  []record.Record
	at    bool // the records carry their offsets (AppendAt)
	done  chan result
	tick  bool // no records: seal aged segments, fsync under the interval policy
	drop  bool // the shard is being deleted: close its files
	// rollAt seals the active segment where the leader sealed its own: the
	// next segment starts at this offset (RollAt).
	rollAt *uint64
	repair bool // cut a damaged active segment at its damage (Repair)
	// truncateTo cuts the log so that it ends at this offset (TruncateTo).
	truncateTo *uint64
}

type result struct {
	base uint64
	err  error
}

// worker owns the write side of the shards mapped to it, so a shard's
// appends are applied in the order they were queued.
type worker struct {
	e   *Engine
	id  int
	ch  chan request
	buf []byte
	pos []int64 // file position of each record in buf
	// shards counts the shards mapped to this worker (under Engine.mu).
	shards int

	// The shared model (shared.go): the worker's writer, the index entries
	// and shards of the chunks not yet committed, and whether the writer
	// has unsynced commits (interval policy).
	sw            *sharedfile.Writer
	sib           *pebble.Batch
	chunks        []sharedfile.Chunk
	pendingShared map[*shard]bool
	sharedDirty   bool
	// sharedMark holds the shared files' synced marks, this worker's slot
	// written at each synced commit (synced.go).
	sharedMark    vfs.File
	sharedMarkBuf []byte
	// sharedMarked is the shared file this worker's slot names;
	// sharedCommitted the end of the chunks of its last commit, which the
	// interval policy's tick marks once it has fsynced them.
	sharedMarked    uint64
	sharedCommitted sharedfile.Ref
}

func newWorker(e *Engine, id int) *worker {
	return &worker{e: e, id: id, ch: make(chan request, 4*e.cfg.MaxBatchRequests)}
}

func (w *worker) run() {
	for req := range w.ch {
		batch := []request{req}
		bytes := approxSize(req.recs)
	drain: // take what else is queued, without waiting
		for len(batch) < w.e.cfg.MaxBatchRequests && bytes < w.e.cfg.MaxBatchBytes {
			select {
			case r, ok := <-w.ch:
				if !ok {
					break drain
				}
				batch = append(batch, r)
				bytes += approxSize(r.recs)
			default:
				break drain
			}
		}
		w.process(batch)
	}
}

func approxSize(recs []record.Record) int {
	n := 0
	for i := range recs {
		n += record.MinSize + len(recs[i].Value) + len(recs[i].Key)
	}
	return n
}

// pending is one request's effect before its batch is durable.
type pending struct {
	req  request
	base uint64
	err  error
}

// process appends every request of the batch, fsyncs each touched file
// once, writes all index entries in one Pebble batch, publishes the new
// high watermarks and only then answers.
func (w *worker) process(batch []request) {
	ib := w.e.index.NewBatch()
	defer func() { ib.Close() }()
	// The index can be rebuilt from the data, so it need not be synced:
	// recovery re-adds whatever a crash lost. The synced marks, which it
	// cannot rebuild, are files of their own, written before anything is
	// answered (synced.go). Most batches have no entry under fsync=interval
	// or none (a point per 500 records) and skip Pebble's commit pipeline.
	var idxErr error
	commitIndex := func() {
		if ib.Empty() {
			return
		}
		if err := ib.Commit(pebble.NoSync); err != nil && idxErr == nil {
			idxErr = err
		}
		ib.Close()
		ib = w.e.index.NewBatch()
	}
	var done []pending
	touched := map[*shard]bool{}
	for _, req := range batch {
		if req.tick {
			w.tick()
			if req.done != nil { // a test's tick, waiting for it (the ticker's do not)
				req.done <- result{}
			}
			continue
		}
		if req.repair {
			req.done <- result{err: req.shard.files.repair(w, req.shard)}
			continue
		}
		if req.truncateTo != nil {
			// The entries of appends earlier in this batch land first: the
			// truncation deletes what it finds in the index, and entries
			// committed after it would name cut records.
			commitIndex()
			req.done <- result{err: req.shard.files.truncate(w, req.shard, *req.truncateTo)}
			continue
		}
		if req.rollAt != nil {
			req.done <- result{err: w.rollAt(req.shard, *req.rollAt)}
			continue
		}
		if req.drop {
			if w.pendingShared[req.shard] {
				// Its chunk entries must reach the index before the
				// deletion clears the shard's entries, or they would
				// outlive it (and mislead a new shard of the name).
				w.commitShared()
			}
			// Likewise the index entries of its appends in this batch:
			// DeleteShard clears the shard's entries once answered, and
			// entries committed after that would mislead a new shard of
			// the name to read at the old shard's positions.
			commitIndex()
			// Appends earlier in this batch were written but not synced:
			// they are answered with the deletion's error, never acknowledged.
			req.shard.mu.RLock() // a cleaning may swap a sealed one meanwhile
			segs := req.shard.segments
			req.shard.mu.RUnlock()
			for _, seg := range segs {
				if seg.wf != nil {
					seg.wf.Close()
					seg.wf = nil
				}
			}
			req.shard.failed = fmt.Errorf("shard %s: %w", req.shard.name, store.ErrUnknownShard)
			delete(touched, req.shard)
			req.done <- result{}
			continue
		}
		base, err := req.shard.files.append(w, req.shard, req.recs, req.at, ib)
		done = append(done, pending{req: req, base: base, err: err})
		if err == nil {
			touched[req.shard] = true
		}
	}
	if len(touched) > 0 {
		w.e.stats.Batches.Add(1)
	}
	// One after the other: fsyncs at once (for the filesystem to commit
	// them together) were measured with 256 shards and showed no gain
	// (docs/bench.md).
	for sh := range touched {
		sh.files.written(w, sh)
	}
	w.commitShared()
	commitIndex()
	for sh := range touched {
		if sh.failed != nil {
			continue
		}
		a := sh.active()
		sh.mu.Lock()
		sh.publishEnd(a.next)
		sh.activeLen = a.size
		sh.activeMaxTS, sh.activeHasRecs = a.maxTS, a.count > 0
		sh.mu.Unlock()
	}
	for _, p := range done {
		err := p.err
		if err == nil && p.req.shard.failed != nil {
			err = p.req.shard.failed
		}
		if err == nil && idxErr != nil {
			w.e.log.Error("index write failed; the next start rebuilds it", "err", idxErr)
		}
		p.req.done <- result{base: p.base, err: err}
	}
}

// fail stops writes to a shard after a failed fsync: what the kernel
// dropped cannot be known, so nothing more is acknowledged until a restart
// recovers the file from what is really on disk.
func (w *worker) fail(sh *shard, err error) {
	if sh.failed == nil {
		sh.failed = fmt.Errorf("shard %s refuses writes until restart: %w: %w", sh.name, store.ErrStorage, err)
		w.e.log.Error("shard failed", "shard", sh.name, "err", err)
	}
}

func (sh *shard) active() *segment { return sh.last.Load() }

// indexRecord adds r's index entries to the batch: a sparse offset point
// (and always one at a segment's first record), written as its whole
// group; a time entry when the shard's largest timestamp enters a new
// bucket; key and tag entries.
func (w *worker) indexRecord(sh *shard, s *segment, r *record.Record, pos int64, ib *pebble.Batch) {
	if r.Offset == s.start || sh.sinceIndex >= w.e.cfg.IndexInterval {
		g := &sh.offsets
		g.Add(r.Offset, s.no, pos)
		ib.Set(index.OffsetKey(sh.name, g.First()), g.Value(), nil)
		sh.sinceIndex = 0
	}
	sh.sinceIndex++
	w.indexAttrs(sh, r, ib)
}

// indexAttrs adds r's time, key and tag entries to the batch: a time entry
// when the shard's largest timestamp enters a new bucket, key and tag
// entries always.
func (w *worker) indexAttrs(sh *shard, r *record.Record, ib *pebble.Batch) {
	bucket := w.bucket(r.Timestamp)
	if !sh.tsIndexed || bucket > sh.tsBucket {
		ib.Set(index.TimeKey(sh.name, r.Timestamp, r.Offset), nil, nil)
		sh.tsBucket, sh.tsIndexed = bucket, true
	}
	if r.Key != nil {
		ib.Set(index.WithOffset(index.KeyPrefix(sh.name, r.Key), r.Offset), nil, nil)
	}
	for _, t := range r.Tags {
		ib.Set(index.WithOffset(index.TagPrefix(sh.name, t), r.Offset), nil, nil)
	}
}

// bucket is the time-index bucket of a timestamp.
func (w *worker) bucket(ts int64) int64 {
	g := w.e.cfg.TimeIndexGranularity.Milliseconds()
	b := ts / g
	if ts < 0 && ts%g != 0 {
		b-- // floor, not truncation
	}
	return b
}

// commitRoll records a roll of sh's active segment s in one synced manifest
// batch, both models': s sealed now, and the next segment, active from
// s's next offset; it returns the two as recorded. A failed commit leaves
// s unsealed.
func (w *worker) commitRoll(sh *shard, s *segment) (sealed, next SegmentMeta, err error) {
	now := w.e.cfg.Now().UTC()
	s.sealedAt = now
	sealed = s.meta(sh.name, SegmentSealed)
	next = SegmentMeta{Shard: sh.name, No: s.no + 1, State: SegmentActive, StartOffset: s.next, Created: now}
	b := w.e.manifest.NewBatch()
	defer b.Close()
	err = putSegment(b, sealed)
	if err == nil {
		err = putSegment(b, next)
	}
	if err == nil {
		err = b.Commit(pebble.Sync)
	}
	if err != nil {
		s.sealedAt = time.Time{}
		return SegmentMeta{}, SegmentMeta{}, fmt.Errorf("shard %s: roll segment %d: %w", sh.name, s.no, err)
	}
	return sealed, next, nil
}

// maybeRoll applies the design's two gates (docs/design.md) before an append of n records:
// the written offset crosses a multiple of RollCheckInterval and the active
// segment is past 90% of MaxSegmentBytes. A segment that has reached
// MaxSegmentBytes rolls regardless, so no file grows past the cap by more
// than one append.
func (w *worker) maybeRoll(sh *shard, n int) error {
	s := sh.active()
	if shouldRoll(s.count, s.next, n, s.size, w.e.cfg.RollCheckInterval, sh.maxBytes) {
		return w.roll(sh)
	}
	return nil
}

// shouldRoll decides, before appending n records at offset next to a
// segment of count records and size bytes, whether to roll first.
func shouldRoll(count, next uint64, n int, size int64, checkInterval uint64, maxBytes int64) bool {
	if count == 0 {
		return false
	}
	crosses := next/checkInterval != (next+uint64(n))/checkInterval
	full := size*10 >= maxBytes*9
	return (crosses && full) || size >= maxBytes
}

// tick seals segments past their maximum age and fsyncs dirty shards under
// the interval policy.
func (w *worker) tick() {
	w.syncShared()
	var synced []*shard
	defer func() { w.commitSynced(synced) }()
	policy := w.e.segmentPolicies()
	for _, sh := range w.e.shardsOf(w) {
		s := sh.active()
		if sh.files.tick(w, sh) {
			synced = append(synced, sh)
		}
		sh.maxBytes, sh.maxAge = policy(sh.name)
		if sh.maxAge > 0 && s.count > 0 && sh.failed == nil && !sh.dictated &&
			w.e.cfg.Now().Sub(s.firstAt) >= sh.maxAge {
			if err := w.roll(sh); err != nil {
				w.e.log.Error("sealing an aged segment failed", "shard", sh.name, "segment", s.no, "err", err)
			}
		}
	}
}

// rollAt seals the active segment where a leader sealed its own.
func (w *worker) rollAt(sh *shard, next uint64) error {
	if sh.failed != nil {
		return sh.failed
	}
	s := sh.active()
	if s.next != next || s.count == 0 {
		return fmt.Errorf("shard %s: roll at offset %d, but the active segment %d holds %d records up to offset %d",
			sh.name, next, s.no, s.count, s.next)
	}
	if err := w.roll(sh); err != nil {
		return err
	}
	// The roll is acknowledged durable: what readers see follows it.
	sh.mu.Lock()
	sh.publishEnd(sh.active().next)
	sh.mu.Unlock()
	return nil
}

// roll seals the shard's active segment and starts the next one.
func (w *worker) roll(sh *shard) error { return sh.files.roll(w, sh) }

// shardsOf lists the shards worker w owns.
func (e *Engine) shardsOf(w *worker) []*shard {
	e.mu.RLock()
	defer e.mu.RUnlock()
	var out []*shard
	for _, sh := range e.shards {
		if sh.worker == w {
			out = append(out, sh)
		}
	}
	return out
}
