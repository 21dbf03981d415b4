package segment

import (
	"context"
	"errors"
	"fmt"
	"hash/crc32"
	"io"
	"os"
	"time"

	"strata/engine/record"
	"strata/engine/store"
)

// RetentionPolicy bounds what a shard keeps on local disk. Zero fields
// impose no bound.
type RetentionPolicy struct {
	// MaxAge drops a sealed segment whose newest record is older than this.
	MaxAge time.Duration
	// MaxBytes drops the oldest sealed segments while the shard's local
	// segments add up to more than this.
	MaxBytes int64
}

// SegmentInfo is what the retention decision looks at.
type SegmentInfo struct {
	No           uint64
	EndOffset    uint64
	MaxTimestamp int64 // ms
	Size         int64
	Sealed       bool
}

// DropDecision says which of a shard's oldest segments to delete: a prefix
// of segs (oldest first), so the offsets that remain stay contiguous. Only
// sealed segments go; one goes if it is wholly below the low watermark, too
// old, or the shard is over its byte budget, and mayDrop agrees (the hook
// through which tiering keeps a segment until it is safely uploaded).
func DropDecision(now time.Time, segs []SegmentInfo, low uint64, p RetentionPolicy, mayDrop func(no uint64) bool) []uint64 {
	var total int64
	for _, s := range segs {
		total += s.Size
	}
	var drop []uint64
	for _, s := range segs {
		if !s.Sealed {
			break
		}
		below := s.EndOffset < low
		old := p.MaxAge > 0 && now.Sub(time.UnixMilli(s.MaxTimestamp)) > p.MaxAge
		over := p.MaxBytes > 0 && total > p.MaxBytes
		if !(below || old || over) || (mayDrop != nil && !mayDrop(s.No)) {
			break
		}
		drop = append(drop, s.No)
		total -= s.Size
	}
	return drop
}

// RetainLoop applies the policy every interval (at least a second) until
// ctx ends. It is the whole of retention when nothing tiers; with tiering,
// the tiering job applies retention over every tier instead.
func (e *Engine) RetainLoop(ctx context.Context, p RetentionPolicy, interval time.Duration) {
	e.RetainLoopBy(ctx, func(string) RetentionPolicy { return p }, interval)
}

// RetainLoopBy is RetainLoop with a policy per shard (its topic's
// retention.ms and retention.bytes), asked at every pass so a change
// applies at the next one.
func (e *Engine) RetainLoopBy(ctx context.Context, policy func(shard string) RetentionPolicy, interval time.Duration) {
	t := time.NewTicker(max(interval, time.Second))
	defer t.Stop()
	for {
		select {
		case <-ctx.Done():
			return
		case <-t.C:
			if n, err := e.ApplyRetentionBy(ctx, policy, nil); err != nil {
				e.log.Error("retention failed", "err", err)
			} else if n > 0 {
				e.log.Info("retention deleted segments", "segments", n)
			}
		}
	}
}

// ApplyRetention deletes, in every shard, the segments DropDecision picks
// (and mayDrop, if given, agrees to): one manifest batch removes each and
// raises the low watermark past it, then its file goes and listeners hear
// of it. It returns how many segments it deleted. It is retention when
// nothing tiers; with tiering, the tiering job expires segments instead.
func (e *Engine) ApplyRetention(ctx context.Context, p RetentionPolicy, mayDrop func(shard string, no uint64) bool) (int, error) {
	return e.ApplyRetentionBy(ctx, func(string) RetentionPolicy { return p }, mayDrop)
}

// ApplyRetentionBy is ApplyRetention with a policy per shard.
func (e *Engine) ApplyRetentionBy(ctx context.Context, policy func(shard string) RetentionPolicy, mayDrop func(shard string, no uint64) bool) (int, error) {
	names, _ := e.Shards(ctx)
	deleted := 0
	for _, name := range names {
		sh, err := e.shard(name)
		if err != nil {
			continue
		}
		sh.mu.RLock()
		segs := sh.segments
		low := sh.low
		infos := make([]SegmentInfo, len(segs))
		for i, s := range segs {
			infos[i] = SegmentInfo{No: s.no, EndOffset: s.next - 1, Size: s.size, Sealed: s.sealed && i < len(segs)-1}
			if infos[i].Sealed {
				infos[i].MaxTimestamp = s.maxTS
			}
		}
		sh.mu.RUnlock()
		drop := DropDecision(e.cfg.Now(), infos, low, policy(name), func(no uint64) bool { return mayDrop == nil || mayDrop(name, no) })
		for range drop {
			s := segs[0]
			b := e.manifest.NewBatch()
			err := b.Delete(segmentKey(name, s.no), nil)
			if err == nil {
				err = e.raiseLow(sh, s.next, b)
			}
			b.Close()
			if err != nil {
				return deleted, err
			}
			sh.mu.Lock()
			sh.segments = sh.segments[1:]
			sh.mu.Unlock()
			// A reader still scanning it keeps its mapping; the file goes now.
			if err := sh.files.dropSegment(e, sh, s); err != nil {
				return deleted, err
			}
			e.retire(s)
			e.postSegmentDropped(s.meta(name, SegmentDeleted))
			e.postLowWatermark(name, s.next)
			segs = segs[1:]
			deleted++
			e.log.Info("segment deleted by retention", "shard", name, "segment", s.no, "end_offset", s.next-1)
		}
	}
	return deleted, nil
}

// retire unmaps deleted segments once no read can still be using them.
func (e *Engine) retire(s *segment) {
	e.points.drop(s)
	// Its pread file now, not with the read side a minute on: until
	// then it holds a descriptor (counted against maxPreadFiles) and the
	// unlinked file's disk space; lookups in flight walk the mapping.
	s.mu.Lock()
	s.closePreadLocked()
	s.mu.Unlock()
	e.retiredMu.Lock()
	defer e.retiredMu.Unlock()
	now := time.Now()
	kept := e.retired[:0]
	for _, r := range e.retired {
		if now.Sub(r.at) > time.Minute {
			r.s.closeRead()
		} else {
			kept = append(kept, r)
		}
	}
	e.retired = append(kept, retiredSegment{s, now})
}

type retiredSegment struct {
	s  *segment
	at time.Time
}

// AppendAt writes records whose offsets are already set, as a follower
// copying its leader does: the first must be the shard's next offset and
// the rest follow it. The bytes on disk are the leader's bytes.
func (e *Engine) AppendAt(ctx context.Context, name string, recs []record.Record) error {
	for i := 1; i < len(recs); i++ {
		if recs[i].Offset != recs[0].Offset+uint64(i) {
			return fmt.Errorf("append at: offset %d follows %d", recs[i].Offset, recs[i-1].Offset)
		}
	}
	_, err := e.append(ctx, name, recs, true)
	return err
}

// Repair cuts a shard's active segment at damage found inside it at start
// (DamagedError), dropping the records after the damage, so the shard takes
// writes again. It is the operator's choice (strata segment repair): until
// then the shard serves what comes before the damage and keeps the bytes
// after it, for a replica or an operator to recover.
func (e *Engine) Repair(ctx context.Context, name string) error {
	return e.ask(ctx, name, request{repair: true})
}

// RollAt seals the shard's active segment so that the next one starts at
// offset next, as a follower does where its leader sealed: with AppendAt
// (which never rolls by itself) the follower's segment files hold the
// leader's bytes segment for segment, and their checksums agree.
func (e *Engine) RollAt(ctx context.Context, name string, next uint64) error {
	return e.ask(ctx, name, request{rollAt: &next})
}

// ask hands a shard's worker one request and waits for its answer.
func (e *Engine) ask(ctx context.Context, name string, req request) error {
	e.mu.RLock()
	sh, ok := e.shards[name]
	switch {
	case e.closed:
		e.mu.RUnlock()
		return store.ErrClosed
	case !ok:
		e.mu.RUnlock()
		return fmt.Errorf("shard %q: %w", name, store.ErrUnknownShard)
	}
	req.shard, req.done = sh, make(chan result, 1)
	sh.worker.ch <- req
	e.mu.RUnlock()
	select {
	case r := <-req.done:
		return r.err
	case <-ctx.Done():
		return ctx.Err()
	}
}

// Checksum returns the CRC-32C and length of a local segment as far as it
// is durable, for two replicas to compare.
func (e *Engine) Checksum(ctx context.Context, name string, no uint64) (crc uint32, size int64, err error) {
	v, err := e.view(name)
	if err != nil {
		return 0, 0, err
	}
	return v.files.checksum(e, v, no)
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

// fileCRC is the CRC-32C of the first n bytes of a file, read as a stream.
func fileCRC(path string, n int64) (uint32, error) {
	f, err := os.Open(path)
	if err != nil {
		return 0, err
	}
	defer f.Close()
	h := crc32.New(castagnoli)
	if got, err := io.Copy(h, io.LimitReader(f, n)); err != nil || got != n {
		return 0, fmt.Errorf("read %s: %d of %d bytes: %v", path, got, n, err)
	}
	return h.Sum32(), nil
}

// Scrub verifies every sealed local segment of a shard against the checksum
// the manifest recorded when it was sealed. Recovery trusts sealed segments;
// this is how their bytes are checked. Damage found is kept (Damage), for
// replication to refill the copy from its leader.
func (e *Engine) Scrub(ctx context.Context, name string) error {
	sh, err := e.shard(name)
	if err != nil {
		return err
	}
	err = e.scrub(ctx, sh, name)
	var bad *scrubbed
	if errors.As(err, &bad) {
		e.noteDamage(sh, &LocalDamage{Segment: bad.no, From: bad.start, Cause: bad.err})
		return bad.err
	}
	return err
}

// stillSealedLocal reports whether the manifest still holds segment no of
// shard name as a local sealed segment.
func (e *Engine) stillSealedLocal(name string, no uint64) bool {
	segs, err := loadSegments(e.manifest, name)
	if err != nil {
		return true // unknown: a missing file is damage until shown otherwise
	}
	for _, c := range segs {
		if c.No == no {
			return c.State == SegmentSealed
		}
	}
	return false
}

// scrubbed is a segment a scrub found damaged.
type scrubbed struct {
	no, start uint64
	err       error
}

func (s *scrubbed) Error() string { return s.err.Error() }

func (e *Engine) scrub(ctx context.Context, sh *shard, name string) error {
	segs, err := loadSegments(e.manifest, name)
	if err != nil {
		return err
	}
	for _, c := range segs {
		if c.State != SegmentSealed {
			continue
		}
		if err := sh.files.scrubSegment(e, sh, c); err != nil {
			return err
		}
	}
	return nil
}

func (partitionFiles) scrubSegment(e *Engine, sh *shard, c SegmentMeta) error {
	path := segmentPath(sh.dir, c.No)
	st, err := os.Stat(path)
	if errors.Is(err, os.ErrNotExist) {
		if !e.stillSealedLocal(sh.name, c.No) {
			return nil // dropped since the list was read (retention, tiering)
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
