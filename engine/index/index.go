// Package index holds the Pebble key layouts of the engines' indexes
// (docs/indexes.md) and the lookups on them. Every key starts with a kind
// byte and the shard name, then 0x00 (shard names never hold 0x00), so one
// shard's entries of one kind are contiguous and ordered for one seek.
package index

import (
	"encoding/binary"
	"errors"
	"math"

	"github.com/cockroachdb/pebble"
)

// Key kinds.
const (
	KindOffset = 'o' // offset (sparse)      -> segment no, byte position
	KindTime   = 't' // running-max ts bucket -> (offset in key)
	KindKey    = 'k' // key, offset           -> (empty)
	KindTag    = 'g' // tag, offset           -> (empty)
)

// Prefix starts every key of one kind for one shard.
func Prefix(kind byte, shard string) []byte {
	b := make([]byte, 0, 2+len(shard)+8+8)
	b = append(b, kind)
	b = append(b, shard...)
	return append(b, 0)
}

// OffsetKey is the sparse offset index's key for offset.
func OffsetKey(shard string, offset uint64) []byte {
	return binary.BigEndian.AppendUint64(Prefix(KindOffset, shard), offset)
}

// OffsetValue locates a record: its segment and byte position.
func OffsetValue(segNo uint64, pos int64) []byte {
	v := binary.AppendUvarint(nil, segNo)
	return binary.AppendUvarint(v, uint64(pos))
}

// DecodeOffsetValue reads what OffsetValue wrote.
func DecodeOffsetValue(v []byte) (segNo uint64, pos int64, err error) {
	no, n := binary.Uvarint(v)
	if n <= 0 {
		return 0, 0, errors.New("offset index: bad segment number")
	}
	p, m := binary.Uvarint(v[n:])
	if m <= 0 || p > math.MaxInt64 {
		return 0, 0, errors.New("offset index: bad position")
	}
	return no, int64(p), nil
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

// FloorOffset finds the sparse offset-index entry at or below offset.
func FloorOffset(db *pebble.DB, shard string, offset uint64) (entryOffset, segNo uint64, pos int64, ok bool, err error) {
	prefix := Prefix(KindOffset, shard)
	it, err := db.NewIter(&pebble.IterOptions{LowerBound: prefix, UpperBound: UpperBound(prefix)})
	if err != nil {
		return 0, 0, 0, false, err
	}
	defer it.Close()
	if offset == math.MaxUint64 {
		if !it.Last() {
			return 0, 0, 0, false, it.Error()
		}
	} else if !it.SeekLT(OffsetKey(shard, offset+1)) {
		return 0, 0, 0, false, it.Error()
	}
	k := it.Key()
	entryOffset = binary.BigEndian.Uint64(k[len(k)-8:])
	segNo, pos, err = DecodeOffsetValue(it.Value())
	return entryOffset, segNo, pos, err == nil, err
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
