package cleaner

import (
	"fmt"
	"testing"
)

func TestOffsetMapKeepsEachKeysNewestOffset(t *testing.T) {
	m := NewOffsetMap(100_000 * slotBytes)
	want := map[string]uint64{}
	for off := range uint64(200_000) {
		k := fmt.Sprintf("key-%d", off*7919%50_000)
		if !m.Put([]byte(k), off) {
			t.Fatalf("full at offset %d with %d keys; capacity %d", off, m.Len(), m.Capacity())
		}
		want[k] = off
	}
	if m.Len() != len(want) {
		t.Errorf("holds %d keys; want %d", m.Len(), len(want))
	}
	for k, off := range want {
		if got, ok := m.Get([]byte(k)); !ok || got != off {
			t.Fatalf("%s at %d (%v); want %d", k, got, ok, off)
		}
	}
	if off, ok := m.Get([]byte("never put")); ok {
		t.Errorf("a key never put is at %d", off)
	}
	// Offset 0 and an empty key are values like any other.
	m2 := NewOffsetMap(1 << 10)
	m2.Put([]byte{}, 0)
	if off, ok := m2.Get([]byte{}); !ok || off != 0 {
		t.Errorf("the empty key at offset 0 reads back as %d, %v", off, ok)
	}
	// A record without a key is not mapped, even in a full map, and is
	// not the empty key (both hash alike).
	full := NewOffsetMap(0)
	for n := 0; full.Put(fmt.Appendf(nil, "k%d", n), uint64(n)); n++ {
	}
	if !full.Put(nil, 9) || full.Len() != full.Capacity() {
		t.Errorf("a keyless record refused by a full map, or mapped (%d of %d keys)", full.Len(), full.Capacity())
	}
	if off, ok := m2.Get(nil); ok {
		t.Errorf("no key reads as the empty key's offset %d", off)
	}
}

func TestOffsetMapFillsAtItsBudget(t *testing.T) {
	for _, bytes := range []int{0, 1, slotBytes * 2, slotBytes * 10, 1 << 20} {
		m := NewOffsetMap(bytes)
		if used := len(m.slots); bytes >= 2*slotBytes && used > bytes {
			t.Errorf("a %d-byte budget uses %d bytes", bytes, used)
		}
		n := 0
		for m.Put(fmt.Appendf(nil, "k%d", n), uint64(n)) {
			n++
		}
		if n != m.Capacity() || n == 0 || n >= len(m.slots)/slotBytes {
			t.Errorf("budget %d: took %d keys; capacity %d of %d slots", bytes, n, m.Capacity(), len(m.slots)/slotBytes)
		}
		// Full, it still takes a newer offset of a key it holds, and
		// answers for keys it does not.
		if !m.Put([]byte("k0"), 1<<40) {
			t.Errorf("budget %d: a full map refused a key it holds", bytes)
		}
		if off, _ := m.Get([]byte("k0")); off != 1<<40 {
			t.Errorf("budget %d: k0 at %d after its update", bytes, off)
		}
		if _, ok := m.Get([]byte("absent")); ok {
			t.Errorf("budget %d: a full map holds a key never put", bytes)
		}
	}
}
