package segment

import (
	"context"
	"fmt"
	"os"

	"github.com/cockroachdb/pebble"

	"strata/engine/record"
	"strata/engine/store"
)

// ColdSource serves offsets whose segments have left local disk. The
// engine defines it and never waits on object storage itself; the tiering
// package implements it and cmd wires it in.
type ColdSource interface {
	// Read returns records from offset on, within the budget, from the
	// shard's cold segments only; none when offset is not in one.
	Read(ctx context.Context, shard string, offset uint64, b store.Budget) ([]record.Record, error)
	// OffsetForTime returns the first offset at or after from, in the cold
	// segments, whose timestamp is at or after ts; ok is false if none is.
	OffsetForTime(ctx context.Context, shard string, from uint64, ts int64) (offset uint64, ok bool, err error)
}

// SetColdSource makes reads below the first local segment go to c.
func (e *Engine) SetColdSource(c ColdSource) {
	e.mu.Lock()
	defer e.mu.Unlock()
	e.cold = c
}

func (e *Engine) coldSource() ColdSource {
	e.mu.RLock()
	defer e.mu.RUnlock()
	return e.cold
}

// readCold serves a read that starts below the first local segment: the
// cold source first, then, with what is left of the budget, the local
// segments it runs into.
func (e *Engine) readCold(ctx context.Context, v view, offset uint64, b store.Budget) ([]record.Record, error) {
	cold := e.coldSource()
	if cold == nil {
		return nil, &store.OutOfRangeError{Shard: v.name, Offset: offset, Low: v.segments[0].start, High: v.high}
	}
	recs, err := cold.Read(ctx, v.name, offset, b)
	if err != nil {
		return nil, err
	}
	if len(recs) == 0 {
		return nil, fmt.Errorf("shard %s: offset %d is below local data (from %d) and no cold segment holds it", v.name, offset, v.segments[0].start)
	}
	next := recs[len(recs)-1].Offset + 1
	left, used := b, 0
	for i := range recs {
		used += record.Size(&recs[i])
	}
	if left.MaxRecords > 0 {
		if left.MaxRecords -= len(recs); left.MaxRecords <= 0 {
			return recs, nil
		}
	}
	if left.MaxBytes > 0 {
		if left.MaxBytes -= used; left.MaxBytes <= 0 {
			return recs, nil
		}
	}
	if next < v.segments[0].start {
		return recs, nil // the next cold read continues from there
	}
	more, err := e.scan(ctx, v, next, store.Budget{MaxRecords: left.MaxRecords, MaxBytes: max(left.MaxBytes, 1)})
	if err != nil {
		return recs, nil // what the cold tier gave is still good
	}
	if left.MaxBytes > 0 && len(more) > 0 && record.Size(&more[0]) > left.MaxBytes {
		return recs, nil // only the first record of a read may exceed the budget
	}
	return append(recs, more...), nil
}

// OldestLocal is the number of a shard's oldest local segment, the only one
// DropLocal takes, and whether it is sealed.
func (e *Engine) OldestLocal(name string) (no uint64, sealed bool, err error) {
	sh, err := e.shard(name)
	if err != nil {
		return 0, false, err
	}
	sh.mu.RLock()
	defer sh.mu.RUnlock()
	return sh.segments[0].no, len(sh.segments) > 1, nil
}

// DropLocal deletes the local file of a shard's oldest local segment once
// the tiering pipeline has committed it to the cold tier (and recorded it
// as remote in the catalog): the manifest records it remote first, so a
// crash leaves a file recovery deletes. Reads of its offsets go to the
// cold source.
func (e *Engine) DropLocal(ctx context.Context, name string, no uint64) error {
	sh, err := e.shard(name)
	if err != nil {
		return err
	}
	sh.mu.RLock()
	if len(sh.segments) < 2 || sh.segments[0].no != no || !sh.segments[0].sealed {
		first := sh.segments[0].no
		sh.mu.RUnlock()
		return fmt.Errorf("shard %s: segment %d is not the oldest sealed local segment (%d is)", name, no, first)
	}
	sh.mu.RUnlock()
	sh.sealedMu.Lock()
	defer sh.sealedMu.Unlock()
	sh.mu.RLock()
	if sh.segments[0].no != no {
		sh.mu.RUnlock()
		return fmt.Errorf("shard %s: segment %d is no longer the oldest local segment", name, no)
	}
	s := sh.segments[0]
	sh.mu.RUnlock()
	m := s.meta(name, SegmentRemote)
	b := e.manifest.NewBatch()
	defer b.Close()
	if err := putSegment(b, m); err != nil {
		return err
	}
	if err := b.Commit(pebble.Sync); err != nil {
		return err
	}
	sh.mu.Lock()
	if len(sh.segments) > 0 && sh.segments[0] == s {
		sh.segments = sh.segments[1:]
	}
	sh.mu.Unlock()
	if err := sh.files.dropSegment(e, sh, s); err != nil {
		return err
	}
	e.retire(s)
	e.postSegmentDropped(m)
	e.log.Info("local copy of a tiered segment deleted", "shard", name, "segment", no)
	return nil
}

// SegmentPath is where a shard's segment file lives.
func (e *Engine) SegmentPath(shard string, no uint64) string {
	if sh, err := e.shard(shard); err == nil {
		sh.mu.RLock()
		defer sh.mu.RUnlock()
		for _, s := range sh.segments {
			if s.no == no {
				return s.path
			}
		}
	}
	return segmentPath(e.shardDir(shard), no)
}

func (e *Engine) shardDir(shard string) string { return e.cfg.Dir + string(os.PathSeparator) + shard }

// ScanFile streams the records of a segment file to fn, checking each one,
// and returns the CRC-32C of the bytes it read, to compare with the checksum
// recorded when it was sealed. The record fn is given is valid only during
// the call (it is a view of the read buffer): fn copies what it keeps. The
// file is never held whole.
func ScanFile(path string, fn func(*record.Record) error) (crc uint32, size int64, err error) {
	f, err := os.Open(path)
	if err != nil {
		return 0, 0, err
	}
	defer f.Close()
	st, err := f.Stat()
	if err != nil {
		return 0, 0, err
	}
	sc := NewScanner(path, f, 0, st.Size(), nil)
	sc.Views()
	for sc.Next() {
		r, _, _ := sc.Record()
		if err := fn(r); err != nil {
			return sc.CRC(), sc.Pos(), err
		}
	}
	return sc.CRC(), sc.Pos(), sc.Err()
}
