package segment

import (
	"math"
	"slices"
	"sort"
	"sync"
	"sync/atomic"

	"strata/engine/index"
)

// The in-memory offset index. The durable offset index in Pebble has a
// point per IndexInterval records (500), bounded by its size on disk; a
// lookup from one walks up to 500 record headers and costs a Pebble seek.
// Each segment written since the engine opened also keeps, in memory, a
// point per memPointBytes of file (as Kafka's index.interval.bytes), so a
// lookup is a binary search and a walk of at most that many bytes. Pebble
// stays the durable copy: a sealed segment of an earlier run loads its
// points from it on its first lookup (loadPoints), and it serves the
// segments whose points went to keep the engine within
// Config.IndexMemoryBytes (oldest sealed segments first).

// memPointBytes is how many bytes of a segment file a lookup walks at
// most from an in-memory point (plus the record that crosses it).
const memPointBytes = 4 << 10

// memPoint is the offset (relative to the segment's first) and the byte
// position of one record: 8 bytes a point, so about 0.2% of the data it
// indexes. A segment past 4 GiB or 4G records keeps no points.
type memPoint struct {
	rel, pos uint32
}

// memPoints is a segment's in-memory points, worker-written. Readers load
// the published snapshot: the worker appends past its length (or into a
// new array) and publishes a longer one, and never rewrites a published
// element (a truncation publishes a copy), so a snapshot needs no lock.
type memPoints struct {
	pub  atomic.Pointer[[]memPoint]
	pts  []memPoint // worker-owned; pts[:len(*pub)] is published
	last int64      // position of the last point
	held int64      // bytes of pts' array counted against the budget
	// off: this segment keeps no points (budget or size); lookups use
	// Pebble.
	off bool
	// loading: a reader took on loading a sealed segment's points from
	// the durable index (a segment of an earlier run; loadPoints).
	loading atomic.Bool
}

// span is the stretch of a segment file between two in-memory points: the
// record at an offset lies in it.
type span struct {
	at       uint64 // the offset of the record at pos
	pos, end int64  // end: the next point's position, -1 past the last point
}

// span is the last point at or before offset, and the one after it.
func (m *memPoints) span(start, offset uint64) (span, bool) {
	p := m.pub.Load()
	if p == nil || offset < start || offset-start > math.MaxUint32 {
		return span{}, false
	}
	pts, rel := *p, uint32(offset-start)
	i := sort.Search(len(pts), func(i int) bool { return pts[i].rel > rel }) - 1
	if i < 0 {
		return span{}, false
	}
	sp := span{at: start + uint64(pts[i].rel), pos: int64(pts[i].pos), end: -1}
	if i+1 < len(pts) {
		sp.end = int64(pts[i+1].pos)
	}
	return sp, true
}

// pointBudget bounds the memory of all segments' in-memory points.
type pointBudget struct {
	limit int64
	used  atomic.Int64
	mu    sync.Mutex
	// sealed lists the sealed segments holding points, oldest first: the
	// first to give theirs up.
	sealed []*segment
}

// add notes one record at (offset, pos) of segment s: a point when it is
// the segment's first or memPointBytes past the last point. The worker
// publishes the batch's points with publish.
func (b *pointBudget) add(s *segment, offset uint64, pos int64) {
	m := &s.points
	if m.off || (len(m.pts) > 0 && pos-m.last < memPointBytes) {
		return
	}
	if offset-s.start > math.MaxUint32 || pos > math.MaxUint32 {
		b.drop(s)
		return
	}
	if len(m.pts) == cap(m.pts) {
		grown := int64(max(8, 2*cap(m.pts))) * 8
		if !b.take(grown - m.held) {
			b.drop(s)
			return
		}
		m.pts = append(make([]memPoint, 0, grown/8), m.pts...)
		m.held = grown
	}
	m.pts = append(m.pts, memPoint{rel: uint32(offset - s.start), pos: uint32(pos)})
	m.last = pos
}

// publish makes the points added so far visible to lookups.
func (b *pointBudget) publish(s *segment) {
	m := &s.points
	if m.off {
		return
	}
	if p := m.pub.Load(); p == nil || len(*p) != len(m.pts) {
		pts := m.pts
		m.pub.Store(&pts)
	}
}

// take counts n more bytes if the budget has room, giving up the points
// of the oldest sealed segments to make it.
func (b *pointBudget) take(n int64) bool {
	if b.used.Add(n) <= b.limit {
		return true
	}
	b.mu.Lock()
	for len(b.sealed) > 0 && b.used.Load() > b.limit {
		s := b.sealed[0]
		b.sealed = b.sealed[1:]
		b.release(s)
	}
	b.mu.Unlock()
	if b.used.Load() <= b.limit {
		return true
	}
	b.used.Add(-n)
	return false
}

// release frees a segment's points; lookups in it use Pebble from now on.
// The caller is the segment's worker, or holds b.mu for a sealed segment
// (whose worker adds no more points) or a dropped one.
func (b *pointBudget) release(s *segment) {
	m := &s.points
	m.off = true
	m.pub.Store(nil)
	b.used.Add(-m.held)
	m.held, m.pts = 0, nil
}

// drop releases a segment's points and takes it off the sealed list.
func (b *pointBudget) drop(s *segment) {
	b.mu.Lock()
	defer b.mu.Unlock()
	for i, x := range b.sealed {
		if x == s {
			b.sealed = append(b.sealed[:i], b.sealed[i+1:]...)
			break
		}
	}
	b.release(s)
}

// sealedNow puts a segment that was just sealed on the list of those that
// give up their points first, its points moved to an array of their size
// (it takes no more).
func (b *pointBudget) sealedNow(s *segment) {
	m := &s.points
	if m.off || m.pub.Load() == nil {
		return
	}
	if exact := int64(len(m.pts)) * 8; exact < m.held {
		pts := append(make([]memPoint, 0, len(m.pts)), m.pts...)
		m.pts = pts
		m.pub.Store(&pts)
		b.used.Add(exact - m.held)
		m.held = exact
	}
	b.mu.Lock()
	b.sealed = append(b.sealed, s)
	b.mu.Unlock()
}

// cut drops the points at offsets from end on (a truncation), publishing
// a copy so that no published element changes.
func (b *pointBudget) cut(s *segment, end uint64) {
	m := &s.points
	if m.off {
		return
	}
	n := sort.Search(len(m.pts), func(i int) bool { return s.start+uint64(m.pts[i].rel) >= end })
	kept := append(make([]memPoint, 0, cap(m.pts)), m.pts[:n]...)
	m.pts = kept
	m.last = 0
	if n > 0 {
		m.last = int64(kept[n-1].pos)
	}
	m.pub.Store(&kept)
}

// loadPoints gives a sealed segment without points (written before the
// engine opened) the durable index's points, one per IndexInterval
// records: its lookups then skip Pebble, though they walk up to that many
// records. The first reader to need them loads them; the others use
// Pebble meanwhile.
func (e *Engine) loadPoints(name string, s *segment) {
	m := &s.points
	if m.pub.Load() != nil || !m.loading.CompareAndSwap(false, true) {
		return
	}
	b := &e.points
	b.mu.Lock()
	off := m.off
	b.mu.Unlock()
	if off {
		return // gave its points up: taking them back would evict another's
	}
	var pts []memPoint
	if err := index.OffsetPoints(e.index, name, s.no, s.start, s.next, func(off uint64, pos int64) {
		if off-s.start <= math.MaxUint32 && pos <= math.MaxUint32 {
			pts = append(pts, memPoint{rel: uint32(off - s.start), pos: uint32(pos)})
		}
	}); err != nil || len(pts) == 0 || (pts[0].rel != 0 && s.cleaned == 0) { // a cleaned segment's first record may be past its start
		if err != nil {
			e.log.Warn("loading a segment's offset points", "shard", name, "segment", s.no, "err", err)
		}
		return // Pebble serves it, as before
	}
	pts = slices.Clip(pts)
	n := int64(len(pts)) * 8
	if !b.take(n) {
		return
	}
	b.mu.Lock()
	defer b.mu.Unlock()
	if m.off { // retired meanwhile
		b.used.Add(-n)
		return
	}
	m.pts, m.held = pts, n
	m.pub.Store(&pts)
	b.sealed = append(b.sealed, s)
}
