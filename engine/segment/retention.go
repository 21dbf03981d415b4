package segment

import (
	"context"
	"time"
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
		n, err := e.retainShard(sh, policy(name), mayDrop)
		deleted += n
		if err != nil {
			return deleted, err
		}
	}
	return deleted, nil
}

// retainShard applies retention to one shard, holding its sealedMu so no
// cleaning replaces a segment it drops.
func (e *Engine) retainShard(sh *shard, p RetentionPolicy, mayDrop func(shard string, no uint64) bool) (int, error) {
	sh.sealedMu.Lock()
	defer sh.sealedMu.Unlock()
	name, deleted := sh.name, 0
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
	drop := DropDecision(e.cfg.Now(), infos, low, p, func(no uint64) bool { return mayDrop == nil || mayDrop(name, no) })
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
	return deleted, nil
}
