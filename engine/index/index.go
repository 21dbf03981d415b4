// Package index holds the Pebble key layouts of the engines' indexes
// (docs/indexes.md) and the lookups on them. Every key starts with a kind
// byte and the shard name, then 0x00 (shard names never hold 0x00), so one
// shard's entries of one kind are contiguous and ordered for one seek.
package index

import (
	"encoding/binary"
	"errors"
	"fmt"
	"math"
	"sync"

	"github.com/cockroachdb/pebble"
)

// Key kinds.
const (
	KindOffset = 'O' // first offset of a group -> segment no, the group's points (OffsetGroup)
	KindTime   = 't' // running-max ts bucket   -> (offset in key)
	KindKey    = 'k' // key, offset             -> (empty)
	KindTag    = 'g' // tag, offset             -> (empty)
	// KindOffsetV1 is the first offset index, one key per point (offset ->
	// segment no, byte position). It is no longer written or read: a shard
	// that still has it gets its offset index rebuilt from its data on open.
	KindOffsetV1 = 'o'
	// KindChunk indexes a shared-model shard (engine/sharedfile): one entry
	// per chunk, first offset -> where the chunk is (ChunkEntry).
	KindChunk = 'c'
)

// Prefix starts every key of one kind for one shard.
func Prefix(kind byte, shard string) []byte {
	b := make([]byte, 0, 2+len(shard)+8+8)
	b = append(b, kind)
	b = append(b, shard...)
	return append(b, 0)
}

// OffsetKey is the key of the offset-index group whose first point is at
// offset.
func OffsetKey(shard string, offset uint64) []byte {
	return binary.BigEndian.AppendUint64(Prefix(KindOffset, shard), offset)
}

// MaxGroupPoints bounds the points of one offset-index group: each new
// point rewrites its group's value, so this bounds what a point costs to
// write (about 5 bytes a point, so at most about 330 bytes) and to decode
// on a lookup.
const MaxGroupPoints = 64

// OffsetGroup is one value of the offset index: up to MaxGroupPoints
// points (offset, byte position) of one segment, ascending, the first at
// the key's offset. Stored as uvarints:
//
//	segment no | first point's position | (offset - previous offset, position - previous position) ...
//
// A point is a few bytes where a key of its own cost about 14 on disk
// (docs/indexes.md).
type OffsetGroup struct {
	first, last uint64 // offsets of the first and last point
	seg         uint64
	lastPos     int64
	n           int
	val         []byte
}

// Add adds the point (offset, pos) of segment seg. It starts a new group
// when this one is full, of another segment, or empty; the caller then
// writes the group under OffsetKey(shard, g.First()) with g.Value(),
// replacing what it wrote for the group's earlier points.
func (g *OffsetGroup) Add(offset, seg uint64, pos int64) {
	if g.n == 0 || g.n >= MaxGroupPoints || seg != g.seg || offset <= g.last || pos <= g.lastPos {
		g.first, g.seg, g.n = offset, seg, 0
		g.val = binary.AppendUvarint(g.val[:0], seg)
		g.val = binary.AppendUvarint(g.val, uint64(pos))
	} else {
		g.val = binary.AppendUvarint(g.val, offset-g.last)
		g.val = binary.AppendUvarint(g.val, uint64(pos-g.lastPos))
	}
	g.last, g.lastPos = offset, pos
	g.n++
}

// Reset makes the next point start a new group.
func (g *OffsetGroup) Reset() { g.n = 0 }

// First is the offset of the group's first point: its key.
func (g *OffsetGroup) First() uint64 { return g.first }

// Value is the group's encoding; it is valid until the next Add.
func (g *OffsetGroup) Value() []byte { return g.val }

// DecodeOffsetGroup calls point for each point of the group stored under
// first with value v, in ascending order, until point returns false.
func DecodeOffsetGroup(first uint64, v []byte, point func(offset, seg uint64, pos int64) bool) error {
	seg, n := binary.Uvarint(v)
	if n <= 0 {
		return errors.New("offset index: bad segment number")
	}
	v = v[n:]
	p, n := binary.Uvarint(v)
	if n <= 0 || p > math.MaxInt64 {
		return errors.New("offset index: bad position")
	}
	v = v[n:]
	off, pos := first, int64(p)
	for {
		if !point(off, seg, pos) || len(v) == 0 {
			return nil
		}
		do, n := binary.Uvarint(v)
		if n <= 0 || do == 0 || do > math.MaxUint64-off {
			return fmt.Errorf("offset index: bad offset step after offset %d", off)
		}
		v = v[n:]
		dp, m := binary.Uvarint(v)
		if m <= 0 || dp == 0 || dp > uint64(math.MaxInt64-pos) {
			return fmt.Errorf("offset index: bad position step after offset %d", off)
		}
		v = v[m:]
		off, pos = off+do, pos+int64(dp)
	}
}

// floorInGroup is the last point of a group at or below offset. It is
// DecodeOffsetGroup without the callback, which would cost every lookup
// an allocation.
func floorInGroup(first uint64, v []byte, offset uint64) (at, seg uint64, pos int64, err error) {
	seg, n := binary.Uvarint(v)
	if n <= 0 {
		return 0, 0, 0, errors.New("offset index: bad segment number")
	}
	v = v[n:]
	p, n := binary.Uvarint(v)
	if n <= 0 || p > math.MaxInt64 {
		return 0, 0, 0, errors.New("offset index: bad position")
	}
	v = v[n:]
	at, pos = first, int64(p)
	for len(v) > 0 {
		do, n := binary.Uvarint(v)
		if n <= 0 || do == 0 || do > math.MaxUint64-at {
			return 0, 0, 0, fmt.Errorf("offset index: bad offset step after offset %d", at)
		}
		v = v[n:]
		dp, m := binary.Uvarint(v)
		if m <= 0 || dp == 0 || dp > uint64(math.MaxInt64-pos) {
			return 0, 0, 0, fmt.Errorf("offset index: bad position step after offset %d", at)
		}
		v = v[m:]
		if at+do > offset {
			break
		}
		at, pos = at+do, pos+int64(dp)
	}
	return at, seg, pos, nil
}

// orderedTS maps a signed timestamp to an unsigned one that sorts the same.
func orderedTS(ts int64) uint64 { return uint64(ts) ^ (1 << 63) }

// TimeKey is a time-index entry: the shard's running-max timestamp reached
// ts at offset.
func TimeKey(shard string, ts int64, offset uint64) []byte {
	b := binary.BigEndian.AppendUint64(Prefix(KindTime, shard), orderedTS(ts))
	return binary.BigEndian.AppendUint64(b, offset)
}

// KeyPrefix precedes the offsets of records with key.
func KeyPrefix(shard string, key []byte) []byte {
	b := binary.BigEndian.AppendUint32(Prefix(KindKey, shard), uint32(len(key)))
	return append(b, key...)
}

// TagPrefix precedes the offsets of records with tag.
func TagPrefix(shard, tag string) []byte {
	b := binary.BigEndian.AppendUint16(Prefix(KindTag, shard), uint16(len(tag)))
	return append(b, tag...)
}

// WithOffset appends an offset to a key or tag prefix.
func WithOffset(prefix []byte, offset uint64) []byte {
	return binary.BigEndian.AppendUint64(append([]byte(nil), prefix...), offset)
}

// UpperBound is the smallest key above every key that starts with prefix.
func UpperBound(prefix []byte) []byte {
	end := append([]byte(nil), prefix...)
	for i := len(end) - 1; i >= 0; i-- {
		if end[i] < 0xff {
			end[i]++
			return end[:i+1]
		}
	}
	return nil
}

// FloorOffset finds the sparse offset index's point at or below offset:
// the group whose first point is the last at or below it, then the last
// of its points at or below it (groups never interleave).
func FloorOffset(db pebble.Reader, shard string, offset uint64) (entryOffset, segNo uint64, pos int64, ok bool, err error) {
	// The bounds, the seek key and the options come from a pool: a lookup
	// is a hot path, and what it allocates is what the GC stops it for.
	fa := floorPool.Get().(*floorAlloc)
	defer floorPool.Put(fa)
	prefix := append(fa.buf[:0], KindOffset)
	prefix = append(prefix, shard...)
	prefix = append(prefix, 0)
	n := len(prefix)
	fa.buf = append(prefix, prefix...)
	fa.buf[len(fa.buf)-1]++ // the 0x00 after the shard name: never 0xff
	fa.buf = binary.BigEndian.AppendUint64(append(fa.buf, prefix...), offset+1)
	prefix, upper, seek := fa.buf[:n], fa.buf[n:2*n], fa.buf[2*n:]
	fa.opts = pebble.IterOptions{LowerBound: prefix, UpperBound: upper}
	it, err := db.NewIter(&fa.opts)
	if err != nil {
		return 0, 0, 0, false, err
	}
	defer it.Close() // before the pool gets the bounds back (defers run last first)
	if offset == math.MaxUint64 {
		if !it.Last() {
			return 0, 0, 0, false, it.Error()
		}
	} else if !it.SeekLT(seek) {
		return 0, 0, 0, false, it.Error()
	}
	k := it.Key()
	entryOffset, segNo, pos, err = floorInGroup(binary.BigEndian.Uint64(k[len(k)-8:]), it.Value(), offset)
	return entryOffset, segNo, pos, err == nil, err
}

// OffsetPoints calls point for each point of segment seg of the shard at
// offsets in [from, to), ascending: the points a segment's in-memory index
// starts from when the segment was written before the engine opened.
func OffsetPoints(db pebble.Reader, shard string, seg, from, to uint64, point func(offset uint64, pos int64)) error {
	prefix := Prefix(KindOffset, shard)
	it, err := db.NewIter(&pebble.IterOptions{LowerBound: prefix, UpperBound: OffsetKey(shard, to)})
	if err != nil {
		return err
	}
	defer it.Close()
	// The group holding from may start below it.
	ok := it.SeekLT(OffsetKey(shard, from+1))
	if !ok {
		ok = it.First()
	}
	for ; ok; ok = it.Next() {
		k := it.Key()
		if err := DecodeOffsetGroup(binary.BigEndian.Uint64(k[len(k)-8:]), it.Value(), func(o, sg uint64, p int64) bool {
			if sg == seg && o >= from && o < to {
				point(o, p)
			}
			return o < to
		}); err != nil {
			return err
		}
	}
	return it.Error()
}

type floorAlloc struct {
	buf  []byte
	opts pebble.IterOptions
}

var floorPool = sync.Pool{New: func() any { return new(floorAlloc) }}

// DeleteOffsetsFrom adds to b the deletion of the shard's offset-index
// points at offsets from end on: the groups that start there or later go,
// and the group before them is written again with its points below end.
func DeleteOffsetsFrom(db pebble.Reader, b *pebble.Batch, shard string, end uint64) error {
	if err := b.DeleteRange(OffsetKey(shard, end), OffsetKey(shard, math.MaxUint64), nil); err != nil {
		return err
	}
	if err := b.Delete(OffsetKey(shard, math.MaxUint64), nil); err != nil {
		return err
	}
	if end == 0 {
		return nil
	}
	prefix := Prefix(KindOffset, shard)
	it, err := db.NewIter(&pebble.IterOptions{LowerBound: prefix, UpperBound: OffsetKey(shard, end)})
	if err != nil {
		return err
	}
	defer it.Close()
	if !it.Last() {
		return it.Error()
	}
	k := it.Key()
	first := binary.BigEndian.Uint64(k[len(k)-8:])
	var g OffsetGroup
	cut := false
	if err := DecodeOffsetGroup(first, it.Value(), func(o, s uint64, p int64) bool {
		if o >= end {
			cut = true
			return false
		}
		g.Add(o, s, p)
		return true
	}); err != nil {
		return err
	}
	if !cut {
		return nil
	}
	return b.Set(append([]byte(nil), k...), g.Value(), nil)
}

// HasOffsetsV1 reports whether the shard has points of the first offset
// index (KindOffsetV1), which are no longer read.
func HasOffsetsV1(db pebble.Reader, shard string) (bool, error) {
	prefix := Prefix(KindOffsetV1, shard)
	it, err := db.NewIter(&pebble.IterOptions{LowerBound: prefix, UpperBound: UpperBound(prefix)})
	if err != nil {
		return false, err
	}
	defer it.Close()
	return it.First(), it.Error()
}

// OffsetsFrom lists the offsets stored after prefix, from offset on, at most limit.
func OffsetsFrom(db *pebble.DB, prefix []byte, from uint64, limit int) ([]uint64, error) {
	it, err := db.NewIter(&pebble.IterOptions{LowerBound: prefix, UpperBound: UpperBound(prefix)})
	if err != nil {
		return nil, err
	}
	defer it.Close()
	var out []uint64
	for ok := it.SeekGE(WithOffset(prefix, from)); ok && (limit <= 0 || len(out) < limit); ok = it.Next() {
		k := it.Key()
		if len(k) != len(prefix)+8 { // a longer key of which prefix is a prefix
			continue
		}
		out = append(out, binary.BigEndian.Uint64(k[len(k)-8:]))
	}
	return out, it.Error()
}

// TimeFloor finds the last time-index entry with a timestamp below ts.
func TimeFloor(db *pebble.DB, shard string, ts int64) (offset uint64, ok bool, err error) {
	prefix := Prefix(KindTime, shard)
	it, err := db.NewIter(&pebble.IterOptions{LowerBound: prefix, UpperBound: UpperBound(prefix)})
	if err != nil {
		return 0, false, err
	}
	defer it.Close()
	if !it.SeekLT(TimeKey(shard, ts, 0)) {
		return 0, false, it.Error()
	}
	k := it.Key()
	return binary.BigEndian.Uint64(k[len(k)-8:]), true, nil
}

// LastTime returns the shard's time-index entry with the largest timestamp.
func LastTime(db *pebble.DB, shard string) (ts int64, offset uint64, ok bool, err error) {
	prefix := Prefix(KindTime, shard)
	it, err := db.NewIter(&pebble.IterOptions{LowerBound: prefix, UpperBound: UpperBound(prefix)})
	if err != nil {
		return 0, 0, false, err
	}
	defer it.Close()
	if !it.Last() {
		return 0, 0, false, it.Error()
	}
	k := it.Key()
	ts = int64(binary.BigEndian.Uint64(k[len(k)-16:]) ^ (1 << 63))
	return ts, binary.BigEndian.Uint64(k[len(k)-8:]), true, nil
}

// DeleteTimeFrom adds to b the deletion of the shard's time-index entries
// at offsets from end on (a truncated suffix). An entry holds its record's
// timestamp, so only those at or above minTS, the smallest timestamp of
// the truncated records, are looked at.
func DeleteTimeFrom(db *pebble.DB, b *pebble.Batch, shard string, minTS int64, end uint64) error {
	prefix := Prefix(KindTime, shard)
	it, err := db.NewIter(&pebble.IterOptions{LowerBound: TimeKey(shard, minTS, 0), UpperBound: UpperBound(prefix)})
	if err != nil {
		return err
	}
	defer it.Close()
	for ok := it.First(); ok; ok = it.Next() {
		k := it.Key()
		if binary.BigEndian.Uint64(k[len(k)-8:]) >= end {
			if err := b.Delete(k, nil); err != nil {
				return err
			}
		}
	}
	return it.Error()
}

// ChunkEntry is one chunk of a shared-model shard: its records' offsets
// [First, First+Count) lie in shared file File, the chunk's header at byte
// Pos. Count may be below the chunk header's when a truncation cut the
// chunk: the records past it are not the shard's any more. The value is
// 20 bytes: file u64 | pos u64 | count u32, big-endian.
type ChunkEntry struct {
	First uint64
	File  uint64
	Pos   int64
	Count uint32
}

// End is the offset after the entry's last record.
func (c ChunkEntry) End() uint64 { return c.First + uint64(c.Count) }

// ChunkKey is the key of the shard's chunk entry whose first offset is first.
func ChunkKey(shard string, first uint64) []byte {
	return binary.BigEndian.AppendUint64(Prefix(KindChunk, shard), first)
}

// ChunkValue encodes the entry's value.
func ChunkValue(c ChunkEntry) []byte {
	v := make([]byte, 0, 20)
	v = binary.BigEndian.AppendUint64(v, c.File)
	v = binary.BigEndian.AppendUint64(v, uint64(c.Pos))
	return binary.BigEndian.AppendUint32(v, c.Count)
}

func decodeChunk(k, v []byte) (ChunkEntry, error) {
	if len(v) != 20 || len(k) < 8 {
		return ChunkEntry{}, fmt.Errorf("index: chunk entry %q: %d value bytes, want 20", k, len(v))
	}
	return ChunkEntry{First: binary.BigEndian.Uint64(k[len(k)-8:]), File: binary.BigEndian.Uint64(v),
		Pos: int64(binary.BigEndian.Uint64(v[8:])), Count: binary.BigEndian.Uint32(v[16:])}, nil
}

// ChunksFrom calls fn with the shard's chunk entries in offset order,
// starting with the last one at or below from (the one that holds it, if
// any), until fn returns false.
func ChunksFrom(db pebble.Reader, shard string, from uint64, fn func(ChunkEntry) bool) error {
	prefix := Prefix(KindChunk, shard)
	it, err := db.NewIter(&pebble.IterOptions{LowerBound: prefix, UpperBound: UpperBound(prefix)})
	if err != nil {
		return err
	}
	defer it.Close()
	ok := false
	if from < math.MaxUint64 {
		ok = it.SeekLT(ChunkKey(shard, from+1))
	} else {
		ok = it.Last()
	}
	if !ok {
		ok = it.First()
	}
	for ; ok; ok = it.Next() {
		c, err := decodeChunk(it.Key(), it.Value())
		if err != nil {
			return err
		}
		if !fn(c) {
			break
		}
	}
	return it.Error()
}

// LastChunk is the shard's chunk entry with the highest first offset.
func LastChunk(db pebble.Reader, shard string) (ChunkEntry, bool, error) {
	prefix := Prefix(KindChunk, shard)
	it, err := db.NewIter(&pebble.IterOptions{LowerBound: prefix, UpperBound: UpperBound(prefix)})
	if err != nil {
		return ChunkEntry{}, false, err
	}
	defer it.Close()
	if !it.Last() {
		return ChunkEntry{}, false, it.Error()
	}
	c, err := decodeChunk(it.Key(), it.Value())
	return c, err == nil, err
}

// DeleteChunksFrom adds to b the deletion of the shard's chunk entries at
// offsets from end on: the entries that start there or later go, and the
// one before them, if it runs past end, is written again ending there.
func DeleteChunksFrom(db pebble.Reader, b *pebble.Batch, shard string, end uint64) error {
	if err := b.DeleteRange(ChunkKey(shard, end), UpperBound(Prefix(KindChunk, shard)), nil); err != nil {
		return err
	}
	if end == 0 {
		return nil
	}
	var last ChunkEntry
	found := false
	if err := ChunksFrom(db, shard, end-1, func(c ChunkEntry) bool {
		last, found = c, c.First < end
		return false
	}); err != nil {
		return err
	}
	if found && last.End() > end {
		last.Count = uint32(end - last.First)
		return b.Set(ChunkKey(shard, last.First), ChunkValue(last), nil)
	}
	return nil
}
