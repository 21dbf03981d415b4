package segment

import (
	"context"

	"github.com/cockroachdb/pebble"

	"strata/engine/store"
)

// Watermarks returns the readable range [low, high).
func (e *Engine) Watermarks(ctx context.Context, name string) (uint64, uint64, error) {
	sh, err := e.shard(name)
	if err != nil {
		return 0, 0, err
	}
	sh.mu.RLock()
	defer sh.mu.RUnlock()
	return sh.low, sh.high, nil
}

// DeleteBefore raises the low watermark, durably.
func (e *Engine) DeleteBefore(ctx context.Context, name string, offset uint64) error {
	sh, err := e.shard(name)
	if err != nil {
		return err
	}
	sh.mu.RLock()
	low, high := sh.low, sh.high
	sh.mu.RUnlock()
	if offset > high {
		return &store.OutOfRangeError{Shard: name, Offset: offset, Low: low, High: high}
	}
	if offset <= low {
		return nil
	}
	if err := e.raiseLow(sh, offset, nil); err != nil {
		return err
	}
	e.postLowWatermark(name, offset)
	return nil
}

// raiseLow records a higher low watermark in the manifest, with what else
// the batch holds (a dropped segment), then publishes it to readers.
// Tiered segments wholly below it leave the manifest.
func (e *Engine) raiseLow(sh *shard, low uint64, b *pebble.Batch) error {
	if b == nil {
		b = e.manifest.NewBatch()
		defer b.Close()
	}
	e.manifestMu.Lock()
	defer e.manifestMu.Unlock()
	sh.mu.RLock()
	low = max(low, sh.low)
	sh.mu.RUnlock()
	if err := putShard(b, sh.meta(low)); err != nil {
		return err
	}
	segs, err := loadSegments(e.manifest, sh.name)
	if err != nil {
		return err
	}
	for _, s := range segs {
		if s.State == SegmentRemote && s.EndOffset < low {
			if err := b.Delete(segmentKey(sh.name, s.No), nil); err != nil {
				return err
			}
		}
	}
	if err := b.Commit(pebble.Sync); err != nil {
		return err
	}
	sh.mu.Lock()
	sh.low = max(sh.low, low)
	sh.mu.Unlock()
	return nil
}
