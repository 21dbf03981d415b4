package segment

import (
	"bytes"
	"context"
	"fmt"
	"math"
	"os"
	"slices"
	"sort"
	"sync"
	"sync/atomic"

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
	files     fileModel
}

func (e *Engine) view(name string) (view, error) {
	sh, err := e.shard(name)
	if err != nil {
		return view{}, err
	}
	sh.mu.RLock()
	defer sh.mu.RUnlock()
	return view{name: name, segments: sh.segments, low: sh.low, high: sh.high, end: sh.end, activeLen: sh.activeLen,
		activeGen: sh.active().gen, files: sh.files}, nil
}

// Read returns records from offset on: the segment holding it, a floor
// seek in the sparse offset index, then a forward scan of the mmap'd files,
// crossing into later segments with what is left of the budget. The
// records are copied out of the mapping: the caller may keep them.
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

// ReadView reads as Read does without copying: the records' byte slices
// alias the segment files' mappings (records the cold tier serves are
// copies, as Read's). They stay valid until release is called, however
// the segments change meanwhile (deleted by retention or tiering, re-mapped
// as they grow): each mapping read from is unmapped only after its last
// release. The caller must call release exactly once, and must not touch
// the records' bytes after. Only records below the high watermark are
// served, which no truncation cuts, so the file under a view never shrinks
// below it.
func (e *Engine) ReadView(ctx context.Context, name string, offset uint64, b store.Budget) ([]record.Record, func(), error) {
	v, err := e.view(name)
	if err != nil {
		return nil, func() {}, err
	}
	if offset < v.low || offset > v.high {
		return nil, func() {}, &store.OutOfRangeError{Shard: name, Offset: offset, Low: v.low, High: v.high}
	}
	o := readOut{view: true}
	err = e.scanInto(ctx, v, offset, b, &o)
	return o.recs, o.release, err
}

// readOut is what one read gathers: the records, their bytes, and (for a
// view) the mappings they alias.
type readOut struct {
	recs   []record.Record
	used   int
	view   bool
	leases []*mapping
	// retried: a shared shard's read started again from a fresh view once.
	retried bool
}

func (o *readOut) release() {
	for _, m := range o.leases {
		m.release()
	}
	o.leases = nil
}

func (e *Engine) scan(ctx context.Context, v view, offset uint64, b store.Budget) ([]record.Record, error) {
	var o readOut
	err := e.scanInto(ctx, v, offset, b, &o)
	return o.recs, err
}

func (e *Engine) scanInto(ctx context.Context, v view, offset uint64, b store.Budget, o *readOut) error {
	if offset >= v.high {
		return nil
	}
	i := sort.Search(len(v.segments), func(i int) bool { return v.segments[i].start > offset }) - 1
	// Below the first local segment, or in a sealed one's gap before the
	// next (a segment whose local copy went while an older one stayed):
	// the cold tier has those offsets.
	if i < 0 || (i < len(v.segments)-1 && offset >= v.segments[i].next) {
		recs, err := e.readCold(ctx, v, offset, b)
		o.recs = recs
		return err
	}
	return v.files.scan(ctx, e, v, i, offset, b, o)
}

// viewEstimate is how many records of size bytes a read is likely to
// return, for sizing its result once: what the budget (which has n records
// and used bytes) and the rest bytes of the file allow, at most 64 Ki.
func viewEstimate(b store.Budget, n, used, size, rest int) int {
	est := rest / size
	if b.MaxBytes > 0 {
		est = min(est, (b.MaxBytes-used)/size)
	}
	if b.MaxRecords > 0 {
		est = min(est, b.MaxRecords-n)
	}
	return min(max(est, 0)+1, 64<<10)
}

// verifyFrom is how much one read must take from a sealed segment before
// the segment is checked against its checksum as a whole: a consumer
// scanning it, not a point lookup, pays for (and profits from) the check.
const verifyFrom = 64 << 10

// scan appends to o the records of s from byte pos up to limit whose
// offsets are in [from, high), within the budget; the record at pos must
// carry offset expect, and each one after it the next offset. It reports
// whether the read may continue into the next segment. gen is the truncation
// generation limit was taken at (anyGen for a segment sealed then); a
// sealed segment's sum is its whole file's checksum.
func (s *segment) scan(pos int64, expect uint64, limit int64, gen uint64, sealed bool, sum uint32, from, high uint64, b store.Budget, o *readOut) (bool, error) {
	s.mu.RLock()
	defer s.mu.RUnlock()
	if pos >= s.readable(limit, gen) {
		return true, nil // nothing left here (a window read ended at the limit)
	}
	data, err := s.view(limit, gen)
	if err != nil {
		return false, err
	}
	verified := s.verified.Load()
	w := walk{s: s, data: data, pos: pos, expect: expect, from: from, high: high, verified: verified}
	n, more, err := w.take(b, o)
	if !verified && sealed && n >= verifyFrom {
		// Also when a record of the run failed its CRC: the check of the
		// whole file then marks the segment as not matching.
		s.verifyLater(data, sum)
	}
	if err != nil || n == 0 {
		return more, err
	}
	if o.view {
		s.mm.acquire()
		o.leases = append(o.leases, s.mm)
	}
	return more, nil
}

// maxWindow is the largest span between two in-memory points read with
// pread: a larger one (a record of more than that) is walked in the
// mapping, which a read of that size pays little for.
const maxWindow = 64 << 10

var windowBufs = sync.Pool{New: func() any { b := make([]byte, 0, 2*memPointBytes); return &b }}

// scanWindow appends to o what a read finds in the span sp of s (from an
// in-memory point to the next), read with pread into a pooled buffer: a
// point lookup then does not touch the mapping, where a fresh mapping
// takes a page fault for each new 64 KiB it touches (in a VM, where a page
// table page is new memory, 100 µs or more; docs/bench.md), and the page
// cache serves the read with no page-table work. The walk and its checks
// are the mapping's (walk.take). done is true when the read needs nothing
// past the span (the budget is used or the high watermark reached); else
// w says where it stopped, or the segment has no file to pread (w at sp).
func (s *segment) scanWindow(sp span, limit int64, gen uint64, from, high uint64, b store.Budget, o *readOut) (w walk, done bool, err error) {
	s.mu.RLock()
	defer s.mu.RUnlock()
	w = walk{s: s, pos: sp.pos, expect: sp.at, from: from, high: high, verified: s.verified.Load(), window: true}
	end := min(sp.end, s.readable(limit, gen))
	if end <= sp.pos || (s.mm != nil && s.mm.filled.Load() && s.mapped() >= end) {
		return w, false, nil // nothing to read, or the mapping's walk takes no fault
	}
	f := s.preadFile(end)
	if f == nil || f != s.pf {
		return w, false, nil // none, or closed while the lock was let go
	}
	// preadFile may have let go of the lock: a truncation may have cut
	// the file since.
	end = min(sp.end, s.readable(limit, gen))
	if end <= sp.pos {
		return w, false, nil
	}
	bp := windowBufs.Get().(*[]byte)
	defer windowBufs.Put(bp)
	buf := slices.Grow((*bp)[:0], int(end-sp.pos))[:end-sp.pos]
	*bp = buf
	if _, err := f.ReadAt(buf, sp.pos); err != nil {
		return w, false, fmt.Errorf("segment %s: read %d bytes at %d: %w", s.path, len(buf), sp.pos, err)
	}
	w.data, w.base = buf, sp.pos
	if _, _, err := w.take(b, o); err != nil {
		return w, false, err
	}
	// Done unless the span ended with room in the budget for another
	// record (checked here, so a lookup of a span's last record does not
	// go on into the mapping).
	return w, !w.ended || !b.Take(len(o.recs), o.used, record.MinSize), nil
}

// preadFile is the segment's file opened for scanWindow, opened on the
// first (n: the bytes it reads up to); nil once the segment's read side is
// closed, when the process holds maxPreadFiles of them already, or when it
// cannot be opened: the mapping's walk serves the lookup then, and says
// what is wrong if anything is. The caller holds s.mu.RLock, which
// preadFile may release and take again.
func (s *segment) preadFile(n int64) *os.File {
	// The count is checked before taking the write lock too: past the
	// bound, every lookup would otherwise shut out the segment's scans.
	if s.pf != nil || s.noPread || preadFiles.Load() >= maxPreadFiles {
		return s.pf
	}
	s.mu.RUnlock()
	defer s.mu.RLock()
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.pf != nil || s.noPread {
		return s.pf
	}
	// Map the file as well (its first n bytes at least), so its cached
	// pages' page tables are filled in the background (populateLater):
	// once they are, lookups walk the mapping, a syscall cheaper. A
	// mapping that fails is no reason to fail the read.
	_ = s.remapLocked(n)
	if preadFiles.Add(1) > maxPreadFiles {
		preadFiles.Add(-1)
		return nil
	}
	f, err := os.Open(s.path)
	if err != nil {
		preadFiles.Add(-1)
		s.noPread = true
		return nil
	}
	s.pf = f
	return f
}

// preadFiles counts the segment files held open for point lookups, in
// the whole process (descriptors are the process's); maxPreadFiles bounds
// them: a segment read by point lookups keeps one until it is dropped.
var preadFiles atomic.Int64

const maxPreadFiles = 1024

// walk is one pass over a segment's bytes: data holds the file's bytes
// from byte base on (the whole mapping, base 0, or a window read with
// pread), pos is where the walk is (a position in the file), and the
// record there must carry offset expect.
type walk struct {
	s          *segment
	data       []byte
	base, pos  int64
	expect     uint64
	from, high uint64
	verified   bool
	// window: data is a window read with pread, which may end inside a
	// record.
	window bool
	// ended: the walk reached the end of data (not the budget's end or the
	// high watermark).
	ended bool
}

// take appends to o the records of the walk's bytes whose offsets are in
// [from, high), within the budget, decoding in place for a view read
// (the records alias data) and else copying the run out first. It returns
// the bytes taken (of the run found, also when one of its records then
// fails its CRC) and whether the budget has room for more.
func (w *walk) take(b store.Budget, o *readOut) (int, bool, error) {
	decode := record.Decode
	if w.verified {
		decode = record.DecodeVerified
	}
	// Find the run of wanted records, decoding each on the way when the
	// read holds the mapping (a view); else copy the run out in one piece
	// and decode the copy: the mapping may be replaced once the lock is
	// released.
	data, s := w.data, w.s
	start, n, k, more, had := -1, 0, 0, true, len(o.recs)
	p, short := int(w.pos-w.base), false
	for p < len(data) {
		if w.window && len(data)-p < record.HeaderSize {
			short = true // a window ends inside this record's header
			break
		}
		off, size, err := record.Peek(data[p:])
		switch {
		case err != nil:
		case s.cleaned > 0 && (off < w.expect || off >= s.next):
			// A cleaned segment has gaps: its offsets only increase.
			err = fmt.Errorf("%w: offset %d where one from %d to %d was expected", record.ErrCorrupt, off, w.expect, s.next-1)
		case s.cleaned == 0 && off != w.expect:
			// The offset field is outside the record's CRC, and until the
			// whole-file check has run nothing else covers it: a damaged
			// one would end the read early, skip records or serve them
			// under another offset, all without an error.
			err = fmt.Errorf("%w: offset %d where %d was expected", record.ErrCorrupt, off, w.expect)
		}
		if err == nil && w.window && size > len(data)-p {
			short = true // a window ends inside this record
			break
		}
		if err != nil {
			o.recs = o.recs[:had]
			return 0, false, fmt.Errorf("segment %s at byte %d: %w", s.path, w.base+int64(p), err)
		}
		if off >= w.high {
			break
		}
		if off >= w.from {
			if !b.Take(had+k, o.used+n, size) {
				more = false
				break
			}
			if start < 0 {
				start = p
			}
			if o.view {
				if k == 0 { // room for as many more records of this size as the budget and the file allow
					o.recs = slices.Grow(o.recs, viewEstimate(b, had, o.used, size, len(data)-p))
				}
				r, _, err := decode(data[p:])
				if err != nil {
					o.recs = o.recs[:had] // they alias the mapping, and no lease is taken for them
					return 0, false, fmt.Errorf("segment %s at byte %d: %w", s.path, w.base+int64(p), err)
				}
				o.recs = append(o.recs, r)
			}
			k++
			n += size
		}
		w.expect = off + 1
		p += size
	}
	w.ended = more && (short || p >= len(data))
	w.pos = w.base + int64(p)
	if k == 0 {
		return 0, more, nil
	}
	if !o.view {
		// append, not make and copy: the buffer is not zeroed first.
		run := append([]byte(nil), data[start:start+n]...)
		o.recs = slices.Grow(o.recs, k)
		for p := 0; p < n; {
			r, size, err := decode(run[p:])
			if err != nil {
				o.recs = o.recs[:had]
				return n, false, fmt.Errorf("segment %s at byte %d: %w", s.path, w.base+int64(start+p), err)
			}
			o.recs = append(o.recs, r)
			p += size
		}
	}
	o.used += n
	return n, more, nil
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
