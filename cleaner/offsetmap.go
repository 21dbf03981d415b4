package cleaner

import (
	"crypto/md5"
	"encoding/binary"
)

// OffsetMap maps each key of a cleaning's dirty part to its newest offset,
// in a fixed budget of memory, as Kafka's cleaner does with
// log.cleaner.dedupe.buffer.size: an open-addressed table of 24-byte
// slots (a key's 128-bit hash and its offset) filled to at most 90%, so
// a cleaning's memory is known before it starts however many keys the log
// holds. Two keys whose hashes collide would share a slot; at 128 bits
// that takes about 2^64 keys.
type OffsetMap struct {
	slots []byte
	max   int // entries it takes before it is full
	n     int
}

const slotBytes = md5.Size + 8

// NewOffsetMap makes a map that uses bytes of memory (at least two slots:
// one always stays empty, where a probe for a missing key ends).
func NewOffsetMap(bytes int) *OffsetMap {
	n := max(bytes/slotBytes, 2)
	return &OffsetMap{slots: make([]byte, n*slotBytes), max: min(max(n*9/10, 1), n-1)}
}

// Capacity is how many keys it takes.
func (m *OffsetMap) Capacity() int { return m.max }

// Len is how many keys it holds.
func (m *OffsetMap) Len() int { return m.n }

// Put records offset as key's newest. Offsets come in increasing order.
// It is false, and the map unchanged, when the map is full and key is not
// in it yet. A record without a key (nil) is not mapped: it has nothing
// to be compacted by, so Put takes it as done. The empty key is a key.
func (m *OffsetMap) Put(key []byte, offset uint64) bool {
	if key == nil {
		return true
	}
	h := md5.Sum(key)
	i, found := m.find(&h)
	if !found {
		if m.n >= m.max {
			return false
		}
		m.n++
		copy(m.slots[i:], h[:])
	}
	// Stored plus one: an all-zero slot is an empty one.
	binary.BigEndian.PutUint64(m.slots[i+md5.Size:], offset+1)
	return true
}

// Get returns key's newest offset, if the map holds the key.
func (m *OffsetMap) Get(key []byte) (uint64, bool) {
	if key == nil {
		return 0, false
	}
	h := md5.Sum(key)
	i, found := m.find(&h)
	if !found {
		return 0, false
	}
	return binary.BigEndian.Uint64(m.slots[i+md5.Size:]) - 1, true
}

// find returns the slot holding h, or the empty slot where it would go.
// The table is never full, so the probe ends.
func (m *OffsetMap) find(h *[md5.Size]byte) (int, bool) {
	slots := len(m.slots) / slotBytes
	i := int(binary.BigEndian.Uint64(h[:8]) % uint64(slots))
	for {
		at := i * slotBytes
		if binary.BigEndian.Uint64(m.slots[at+md5.Size:]) == 0 {
			return at, false
		}
		if [md5.Size]byte(m.slots[at:at+md5.Size]) == *h {
			return at, true
		}
		i = (i + 1) % slots
	}
}
