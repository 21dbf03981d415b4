package segment

import (
	"bytes"
	"context"
	"fmt"
	"math"
	"sort"

	"strata/engine/index"
	"strata/engine/record"
	"strata/engine/store"
)

// view is a consistent snapshot of a shard for one read.
type view struct {
	name      string
	segments  []*segment
	low, high uint64 // high: the high watermark
	end       uint64 // the log end
	activeLen int64
	activeGen uint64 // the active segment's truncation generation
}

func (e *Engine) view(name string) (view, error) {
	sh, err := e.shard(name)
	if err != nil {
		return view{}, err
	}
	sh.mu.RLock()
	defer sh.mu.RUnlock()
	return view{name: name, segments: sh.segments, low: sh.low, high: sh.high, end: sh.end, activeLen: sh.activeLen,
		activeGen: sh.active().gen}, nil
}

// Read returns records from offset on: the segment holding it, a floor
// seek in the sparse offset index, then a forward scan of the mmap'd files,
// crossing into later segments with what is left of the budget.
func (e *Engine) Read(ctx context.Context, name string, offset uint64, b store.Budget) ([]record.Record, error) {
	v, err := e.view(name)
	if err != nil {
		return nil, err
	}
	if offset < v.low || offset > v.high {
		return nil, &store.OutOfRangeError{Shard: name, Offset: offset, Low: v.low, High: v.high}
	}
	return e.scan(ctx, v, offset, b)
}

func (e *Engine) scan(ctx context.Context, v view, offset uint64, b store.Budget) ([]record.Record, error) {
	if offset >= v.high {
		return nil, nil
	}
	i := sort.Search(len(v.segments), func(i int) bool { return v.segments[i].start > offset }) - 1
	// Below the first local segment, or in a sealed one's gap before the
	// next (a segment whose local copy went while an older one stayed):
	// the cold tier has those offsets.
	if i < 0 || (i < len(v.segments)-1 && offset >= v.segments[i].next) {
		return e.readCold(ctx, v, offset, b)
	}
	var pos int64
	if at, segNo, p, ok, err := index.FloorOffset(e.index, v.name, offset); err != nil {
		return nil, err
	} else if ok && segNo == v.segments[i].no && at >= v.segments[i].start {
		pos = p
	}
	var out []record.Record
	used := 0
	for ; i < len(v.segments); i++ {
		s := v.segments[i]
		// The active segment's size is the worker's: readers take the
		// durable length the view published.
		limit, gen := v.activeLen, v.activeGen
		if i < len(v.segments)-1 {
			limit, gen = s.size, anyGen
		}
		more, err := s.scan(pos, limit, gen, offset, v.high, b, &out, &used)
		if err != nil {
			return out, err
		}
		if !more || (i+1 < len(v.segments) && v.segments[i+1].start != s.next) {
			break // the budget is used, or a gap follows: the next read goes cold
		}
		pos = 0
	}
	return out, nil
}

// scan appends the records of s from byte pos up to limit whose offsets
// are in [from, high), within the budget. It reports whether the read may
// continue into the next segment. gen is the truncation generation limit
// was taken at (anyGen for a segment sealed then).
func (s *segment) scan(pos, limit int64, gen uint64, from, high uint64, b store.Budget, out *[]record.Record, used *int) (bool, error) {
	s.mu.RLock()
	defer s.mu.RUnlock()
	data, err := s.view(limit, gen)
	if err != nil {
		return false, err
	}
	// Find the run of wanted records first, then copy it out in one piece:
	// the mapping may be replaced once the lock is released.
	var run []span
	start, n := -1, 0
	for p := int(pos); p < len(data); {
		off, size, err := record.Peek(data[p:])
		if err != nil {
			return false, fmt.Errorf("segment %s at byte %d: %w", s.path, p, err)
		}
		if off >= high {
			break
		}
		if off >= from {
			if !b.Take(len(*out)+len(run), *used+n, size) {
				return s.decodeRun(data, start, n, run, out, used, false)
			}
			if start < 0 {
				start = p
			}
			run = append(run, span{p - start, size})
			n += size
		}
		p += size
	}
	_, err = s.decodeRun(data, start, n, run, out, used, true)
	return err == nil, err
}

// span is a record's place in a run copied out of a segment.
type span struct{ p, size int }

func (s *segment) decodeRun(data []byte, start, n int, run []span, out *[]record.Record, used *int, more bool) (bool, error) {
	if len(run) == 0 {
		return more, nil
	}
	buf := make([]byte, n)
	copy(buf, data[start:start+n])
	for _, a := range run {
		r, _, err := record.Decode(buf[a.p : a.p+a.size])
		if err != nil {
			return false, fmt.Errorf("segment %s at byte %d: %w", s.path, start+a.p, err)
		}
		*out = append(*out, r)
	}
	*used += n
	return more, nil
}

// OffsetForTime finds the first offset whose timestamp is at or after ts:
// the time index gives a starting point no later than the answer, then a
// forward scan finds it.
func (e *Engine) OffsetForTime(ctx context.Context, name string, ts int64) (uint64, error) {
	v, err := e.view(name)
	if err != nil {
		return 0, err
	}
	if cold := e.coldSource(); cold != nil && v.low < v.segments[0].start {
		if off, ok, err := cold.OffsetForTime(ctx, name, v.low, ts); err != nil || ok {
			return off, err
		}
	}
	from := max(v.low, v.segments[0].start)
	if off, ok, err := index.TimeFloor(e.index, name, ts); err != nil {
		return 0, err
	} else if ok && off > from && off < v.high {
		from = off
	}
	for from < v.high {
		if err := ctx.Err(); err != nil {
			return 0, err
		}
		recs, err := e.scan(ctx, v, from, store.Budget{MaxRecords: 1000})
		if err != nil {
			return 0, err
		}
		for _, r := range recs {
			if r.Timestamp >= ts {
				return r.Offset, nil
			}
		}
		if len(recs) == 0 {
			break
		}
		from = recs[len(recs)-1].Offset + 1
	}
	return v.high, nil
}

// ReadByKey returns records whose key is key, from offset from on.
func (e *Engine) ReadByKey(ctx context.Context, name string, key []byte, from uint64, b store.Budget) ([]record.Record, error) {
	if key == nil {
		return nil, fmt.Errorf("read by key: the key is null")
	}
	return e.readIndexed(ctx, name, index.KeyPrefix(name, key), from, b, func(r *record.Record) bool {
		return r.Key != nil && bytes.Equal(r.Key, key)
	})
}

// ReadByTag returns records carrying tag, from offset from on.
func (e *Engine) ReadByTag(ctx context.Context, name string, tag string, from uint64, b store.Budget) ([]record.Record, error) {
	return e.readIndexed(ctx, name, index.TagPrefix(name, tag), from, b, func(r *record.Record) bool {
		for _, t := range r.Tags {
			if t == tag {
				return true
			}
		}
		return false
	})
}

// readIndexed follows index entries and checks each record still matches:
// after a crash, offsets past the recovered end are written again, so an
// old entry may name an offset that now holds another record.
func (e *Engine) readIndexed(ctx context.Context, name string, prefix []byte, from uint64, b store.Budget, match func(*record.Record) bool) ([]record.Record, error) {
	v, err := e.view(name)
	if err != nil {
		return nil, err
	}
	from = max(from, v.low, v.segments[0].start)
	var out []record.Record
	used := 0
	for from < v.high {
		if err := ctx.Err(); err != nil {
			return out, err
		}
		offs, err := index.OffsetsFrom(e.index, prefix, from, 256)
		if err != nil {
			return out, err
		}
		if len(offs) == 0 {
			break
		}
		for _, off := range offs {
			if off >= v.high {
				return out, nil
			}
			recs, err := e.scan(ctx, v, off, store.Budget{MaxRecords: 1})
			if err != nil {
				return out, err
			}
			if len(recs) == 0 || recs[0].Offset != off || !match(&recs[0]) {
				continue
			}
			size := record.Size(&recs[0])
			if !b.Take(len(out), used, size) {
				return out, nil
			}
			out = append(out, recs[0])
			used += size
		}
		if offs[len(offs)-1] == math.MaxUint64 {
			break
		}
		from = offs[len(offs)-1] + 1
	}
	return out, nil
}
