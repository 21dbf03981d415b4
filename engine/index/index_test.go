package index

import (
	"bytes"
	"math"
	"slices"
	"sort"
	"testing"

	"github.com/cockroachdb/pebble"
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
}

type point struct {
	off, seg uint64
	pos      int64
}

func groupPoints(t *testing.T, first uint64, v []byte) []point {
	t.Helper()
	var got []point
	if err := DecodeOffsetGroup(first, v, func(o, s uint64, p int64) bool {
		got = append(got, point{o, s, p})
		return true
	}); err != nil {
		t.Fatal(err)
	}
	return got
}

// Points go into groups of one segment, at most MaxGroupPoints each, and
// come back as they went in; each group is what its key's FloorOffset
// decodes.
func TestOffsetGroups(t *testing.T) {
	var in []point
	for i := 0; i < 150; i++ {
		in = append(in, point{uint64(i) * 1000, 3, int64(i) * 38000})
	}
	in = append(in, point{150_000, 4, 0}, point{151_000, 4, 1 << 33}) // a roll, then a large position
	var g OffsetGroup
	groups := map[uint64][]byte{}
	var firsts []uint64
	for _, p := range in {
		g.Add(p.off, p.seg, p.pos)
		if _, ok := groups[g.First()]; !ok {
			firsts = append(firsts, g.First())
		}
		groups[g.First()] = append([]byte(nil), g.Value()...)
	}
	if want := []uint64{0, 64_000, 128_000, 150_000}; !slices.Equal(firsts, want) {
		t.Fatalf("groups start at %v, want %v", firsts, want)
	}
	var out []point
	for _, f := range firsts {
		out = append(out, groupPoints(t, f, groups[f])...)
	}
	if !slices.Equal(out, in) {
		t.Fatalf("points came back as %v, want %v", out, in)
	}
	if n := len(groups[64_000]); n > 5*MaxGroupPoints {
		t.Fatalf("a full group of 1000-record steps takes %d bytes, want at most %d", n, 5*MaxGroupPoints)
	}
	for _, tc := range []struct {
		name string
		v    []byte
	}{
		{"empty", nil},
		{"no position", []byte{3}},
		{"truncated step", append(groups[0][:len(groups[0]):len(groups[0])], 0x80)},
		{"zero offset step", append(groups[0][:len(groups[0]):len(groups[0])], 0, 5)},
		{"no position step", append(groups[0][:len(groups[0]):len(groups[0])], 5)},
	} {
		if err := DecodeOffsetGroup(0, tc.v, func(uint64, uint64, int64) bool { return true }); err == nil {
			t.Errorf("%s: decoded without an error", tc.name)
		}
	}
}

// FloorOffset finds the last point at or below an offset across groups,
// and DeleteOffsetsFrom cuts the points from an offset on, inside a group
// too.
func TestFloorOffsetAndCut(t *testing.T) {
	db, err := pebble.Open(t.TempDir(), &pebble.Options{})
	if err != nil {
		t.Fatal(err)
	}
	defer db.Close()
	var g OffsetGroup
	for i := 0; i < 200; i++ {
		g.Add(uint64(i)*10, 0, int64(i)*100)
		if err := db.Set(OffsetKey("s-0", g.First()), g.Value(), pebble.NoSync); err != nil {
			t.Fatal(err)
		}
	}
	for _, tc := range []struct {
		offset, at uint64
		ok         bool
	}{{0, 0, true}, {9, 0, true}, {10, 10, true}, {645, 640, true}, {1999, 1990, true}, {math.MaxUint64, 1990, true}} {
		at, seg, pos, ok, err := FloorOffset(db, "s-0", tc.offset)
		if err != nil || ok != tc.ok || at != tc.at || seg != 0 || pos != int64(at)*10 {
			t.Errorf("FloorOffset(%d) = %d, %d, %d, %v, %v; want %d at byte %d", tc.offset, at, seg, pos, ok, err, tc.at, tc.at*10)
		}
	}
	if _, _, _, ok, err := FloorOffset(db, "s-1", 5); ok || err != nil {
		t.Errorf("another shard's points found: %v %v", ok, err)
	}
	b := db.NewBatch()
	if err := DeleteOffsetsFrom(db, b, "s-0", 655); err != nil {
		t.Fatal(err)
	}
	if err := b.Commit(pebble.NoSync); err != nil {
		t.Fatal(err)
	}
	for _, tc := range []struct{ offset, at uint64 }{{654, 650}, {655, 650}, {5000, 650}, {math.MaxUint64, 650}, {639, 630}} {
		if at, _, _, ok, err := FloorOffset(db, "s-0", tc.offset); err != nil || !ok || at != tc.at {
			t.Errorf("after the cut, FloorOffset(%d) = %d, %v, %v; want %d", tc.offset, at, ok, err, tc.at)
		}
	}
}

// FuzzDecodeOffsetGroup: any bytes decode to ascending points or an error,
// never a panic or a loop, and the lookup's own decoder (floorInGroup)
// finds the same floor point as a walk of the points.
func FuzzDecodeOffsetGroup(f *testing.F) {
	var g OffsetGroup
	for i := 0; i < 5; i++ {
		g.Add(uint64(i)*1000, 2, int64(i)*38000)
	}
	f.Add(uint64(0), append([]byte(nil), g.Value()...))
	f.Add(uint64(math.MaxUint64-1), []byte{0, 0, 1, 1, 1, 1})
	f.Add(uint64(7), []byte{0x80})
	f.Fuzz(func(t *testing.T, first uint64, v []byte) {
		prev, prevPos, n := uint64(0), int64(-1), 0
		var all []point
		err := DecodeOffsetGroup(first, v, func(o, s uint64, p int64) bool {
			all = append(all, point{o, s, p})
			if n > 0 && (o <= prev || p <= prevPos) {
				t.Fatalf("point %d (%d, %d) not after (%d, %d)", n, o, p, prev, prevPos)
			}
			if p < 0 {
				t.Fatalf("negative position %d", p)
			}
			prev, prevPos = o, p
			n++
			return true
		})
		for _, x := range []uint64{first, first + 1, first + 999, first + 1000, first * 2, math.MaxUint64} {
			at, seg, pos, ferr := floorInGroup(first, v, x)
			// The lookup stops at the first point past x, so damage after it
			// may go unseen; damage before it may not.
			if ferr != nil && err == nil {
				t.Fatalf("floor of %d: error %v, the walk found none", x, ferr)
			}
			if ferr != nil || x < first {
				continue
			}
			var want point
			for _, p := range all {
				if p.off <= x {
					want = p
				}
			}
			if (point{at, seg, pos}) != want {
				t.Fatalf("floor of %d: %d %d %d, the walk's %v", x, at, seg, pos, want)
			}
		}
	})
}

// OffsetPoints lists one segment's points in an offset range, across
// groups and starting inside a group that began below the range, and
// none of another segment's or shard's.
func TestOffsetPoints(t *testing.T) {
	db, err := pebble.Open(t.TempDir(), &pebble.Options{})
	if err != nil {
		t.Fatal(err)
	}
	defer db.Close()
	// Segment 0: offsets 0-990 step 10 (two groups); segment 1: 1000-1990.
	for _, sh := range []string{"s-0", "s-00"} {
		var g OffsetGroup
		for i := 0; i < 200; i++ {
			g.Add(uint64(i)*10, uint64(i/100), int64(i%100)*100)
			if err := db.Set(OffsetKey(sh, g.First()), g.Value(), pebble.NoSync); err != nil {
				t.Fatal(err)
			}
		}
	}
	for _, tc := range []struct {
		name          string
		seg, from, to uint64
		first, last   uint64
		n             int
	}{
		{"segment 0", 0, 0, 1000, 0, 990, 100},
		{"segment 1", 1, 1000, 2000, 1000, 1990, 100},
		{"inside a group", 0, 645, 700, 650, 690, 5},
		{"segment 1 asked for segment 0's range", 1, 0, 1000, 0, 0, 0},
		{"past the end", 1, 2000, 3000, 0, 0, 0},
	} {
		var got []point
		if err := OffsetPoints(db, "s-0", tc.seg, tc.from, tc.to, func(o uint64, p int64) { got = append(got, point{o, tc.seg, p}) }); err != nil {
			t.Fatalf("%s: %v", tc.name, err)
		}
		if len(got) != tc.n {
			t.Fatalf("%s: %d points, want %d", tc.name, len(got), tc.n)
		}
		if tc.n == 0 {
			continue
		}
		if got[0].off != tc.first || got[len(got)-1].off != tc.last {
			t.Errorf("%s: points %d..%d, want %d..%d", tc.name, got[0].off, got[len(got)-1].off, tc.first, tc.last)
		}
		for _, p := range got {
			if p.pos != int64(p.off%1000)*10 {
				t.Errorf("%s: point %d at byte %d, want %d", tc.name, p.off, p.pos, (p.off%1000)*10)
			}
		}
	}
}
