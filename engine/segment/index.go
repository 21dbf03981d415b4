package segment

import (
	"encoding/binary"
	"errors"
	"math"

	"github.com/cockroachdb/pebble"
)

// Index keys (docs/indexes.md). Every key starts with a kind byte and the
// shard name, then 0x00 (shard names never hold 0x00), so one shard's
// entries of one kind are contiguous and ordered for a single floor seek.
const (
	kindOffset = 'o' // offset (sparse)      -> segment no, byte position
	kindTime   = 't' // running-max ts bucket -> (offset in key)
	kindKey    = 'k' // key, offset           -> (empty)
	kindTag    = 'g' // tag, offset           -> (empty)
)

func keyPrefix(kind byte, shard string) []byte {
	b := make([]byte, 0, 2+len(shard)+8+8)
	b = append(b, kind)
	b = append(b, shard...)
	return append(b, 0)
}

func offsetKey(shard string, offset uint64) []byte {
	return binary.BigEndian.AppendUint64(keyPrefix(kindOffset, shard), offset)
}

func offsetValue(segNo uint64, pos int64) []byte {
	v := binary.AppendUvarint(nil, segNo)
	return binary.AppendUvarint(v, uint64(pos))
}

func decodeOffsetValue(v []byte) (segNo uint64, pos int64, err error) {
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

func timeKey(shard string, ts int64, offset uint64) []byte {
	b := binary.BigEndian.AppendUint64(keyPrefix(kindTime, shard), orderedTS(ts))
	return binary.BigEndian.AppendUint64(b, offset)
}

func keyIndexPrefix(shard string, key []byte) []byte {
	b := binary.BigEndian.AppendUint32(keyPrefix(kindKey, shard), uint32(len(key)))
	return append(b, key...)
}

func tagIndexPrefix(shard, tag string) []byte {
	b := binary.BigEndian.AppendUint16(keyPrefix(kindTag, shard), uint16(len(tag)))
	return append(b, tag...)
}

func withOffset(prefix []byte, offset uint64) []byte {
	return binary.BigEndian.AppendUint64(append([]byte(nil), prefix...), offset)
}

// upperBound is the smallest key above every key that starts with prefix.
func upperBound(prefix []byte) []byte {
	end := append([]byte(nil), prefix...)
	for i := len(end) - 1; i >= 0; i-- {
		if end[i] < 0xff {
			end[i]++
			return end[:i+1]
		}
	}
	return nil
}

// floorOffset finds the sparse offset-index entry at or below offset.
func floorOffset(db *pebble.DB, shard string, offset uint64) (entryOffset, segNo uint64, pos int64, ok bool, err error) {
	prefix := keyPrefix(kindOffset, shard)
	it, err := db.NewIter(&pebble.IterOptions{LowerBound: prefix, UpperBound: upperBound(prefix)})
	if err != nil {
		return 0, 0, 0, false, err
	}
	defer it.Close()
	if offset == math.MaxUint64 {
		if !it.Last() {
			return 0, 0, 0, false, it.Error()
		}
	} else if !it.SeekLT(offsetKey(shard, offset+1)) {
		return 0, 0, 0, false, it.Error()
	}
	k := it.Key()
	entryOffset = binary.BigEndian.Uint64(k[len(k)-8:])
	segNo, pos, err = decodeOffsetValue(it.Value())
	return entryOffset, segNo, pos, err == nil, err
}

// offsetsFrom lists the offsets stored after prefix, from offset on, at most limit.
func offsetsFrom(db *pebble.DB, prefix []byte, from uint64, limit int) ([]uint64, error) {
	it, err := db.NewIter(&pebble.IterOptions{LowerBound: prefix, UpperBound: upperBound(prefix)})
	if err != nil {
		return nil, err
	}
	defer it.Close()
	var out []uint64
	for ok := it.SeekGE(withOffset(prefix, from)); ok && (limit <= 0 || len(out) < limit); ok = it.Next() {
		k := it.Key()
		if len(k) != len(prefix)+8 { // a longer key of which prefix is a prefix
			continue
		}
		out = append(out, binary.BigEndian.Uint64(k[len(k)-8:]))
	}
	return out, it.Error()
}

// timeFloor finds the last time-index entry with a timestamp below ts.
func timeFloor(db *pebble.DB, shard string, ts int64) (offset uint64, ok bool, err error) {
	prefix := keyPrefix(kindTime, shard)
	it, err := db.NewIter(&pebble.IterOptions{LowerBound: prefix, UpperBound: upperBound(prefix)})
	if err != nil {
		return 0, false, err
	}
	defer it.Close()
	if !it.SeekLT(timeKey(shard, ts, 0)) {
		return 0, false, it.Error()
	}
	k := it.Key()
	return binary.BigEndian.Uint64(k[len(k)-8:]), true, nil
}
