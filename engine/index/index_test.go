package index

import (
	"bytes"
	"sort"
	"testing"
)

// Keys sort as their numbers do, negatives before positives, one shard's
// entries never interleaved with another's.
func TestKeysSortNumerically(t *testing.T) {
	ts := []int64{-5000, -1, 0, 1, 1700000000000}
	var keys [][]byte
	for i := len(ts) - 1; i >= 0; i-- {
		keys = append(keys, TimeKey("a-0", ts[i], 0))
	}
	sort.Slice(keys, func(i, j int) bool { return bytes.Compare(keys[i], keys[j]) < 0 })
	for i := range ts {
		if !bytes.Equal(keys[i], TimeKey("a-0", ts[i], 0)) {
			t.Fatalf("time keys out of numeric order at %d", i)
		}
	}
	if bytes.Compare(OffsetKey("a-0", 1<<40), OffsetKey("a-00", 0)) >= 0 {
		t.Fatal("shard a-0's offsets sort after shard a-00's")
	}
	if !bytes.HasPrefix(WithOffset(KeyPrefix("a-0", []byte("k")), 7), KeyPrefix("a-0", []byte("k"))) {
		t.Fatal("a key entry does not start with its prefix")
	}
	if KeyPrefix("a-0", []byte("k"))[len(Prefix(KindKey, "a-0"))+3] != 1 {
		t.Fatal("key length not stored before the key")
	}
}

func TestUpperBound(t *testing.T) {
	for _, tc := range []struct{ in, want []byte }{
		{[]byte("ab"), []byte("ac")},
		{[]byte{1, 0xff}, []byte{2}},
		{[]byte{0xff, 0xff}, nil},
	} {
		if got := UpperBound(tc.in); !bytes.Equal(got, tc.want) {
			t.Errorf("UpperBound(%x) = %x, want %x", tc.in, got, tc.want)
		}
	}
	v := OffsetValue(12, 1<<33)
	if no, pos, err := DecodeOffsetValue(v); err != nil || no != 12 || pos != 1<<33 {
		t.Fatalf("offset value round trip: %d %d %v", no, pos, err)
	}
	if _, _, err := DecodeOffsetValue([]byte{0x80}); err == nil {
		t.Fatal("a truncated offset value decoded")
	}
}
