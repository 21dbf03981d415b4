package segment

import (
	"bytes"
	"errors"
	"testing"

	"strata/engine/record"
	"strata/engine/store/storetest"
)

// segmentBytes encodes n records from offset 0 as a segment file holds them.
func segmentBytes(t testing.TB, n int) ([]byte, []int64) {
	var b []byte
	var starts []int64
	for i, r := range storetest.Records(n, 3) {
		r.Offset = uint64(i)
		starts = append(starts, int64(len(b)))
		var err error
		if b, err = record.Append(b, &r); err != nil {
			t.Fatal(err)
		}
	}
	return b, starts
}

// The scanner reads every record of a whole file and tells a torn tail
// from damage inside the file, naming where and which offset.
func TestScanner(t *testing.T) {
	whole, starts := segmentBytes(t, 20)
	flip := func(at int64) []byte {
		b := bytes.Clone(whole)
		b[at] ^= 0xff
		return b
	}
	gap := bytes.Clone(whole[:starts[5]])
	gap = append(gap, whole[starts[6]:]...) // offset 5 missing
	for _, tc := range []struct {
		name    string
		data    []byte
		records int
		pos     int64 // where the scan stops
		torn    bool
		damaged bool
	}{
		{"a whole file", whole, 20, int64(len(whole)), false, false},
		{"cut inside the last record", whole[:len(whole)-3], 19, starts[19], true, true},
		{"cut inside a record header", whole[:starts[19]+5], 19, starts[19], true, true},
		{"a flipped byte in record 7", flip(starts[7] + 20), 7, starts[7], false, true},
		{"a flipped byte in the last record", flip(int64(len(whole)) - 2), 19, starts[19], true, true},
		{"an offset missing", gap, 5, starts[5], false, true},
	} {
		for _, views := range []bool{false, true} {
			name := tc.name
			if views {
				name += ", views"
			}
			t.Run(name, func(t *testing.T) {
				next := uint64(0)
				sc := NewScanner("test.msg", bytes.NewReader(tc.data), 0, int64(len(tc.data)), &next)
				if views {
					sc.Views()
				}
				n := 0
				for sc.Next() {
					r, _, _ := sc.Record()
					if r.Offset != uint64(n) {
						t.Fatalf("record %d has offset %d", n, r.Offset)
					}
					n++
				}
				var ce *CorruptError
				switch {
				case n != tc.records || sc.Pos() != tc.pos:
					t.Fatalf("read %d records up to byte %d; want %d up to %d (%v)", n, sc.Pos(), tc.records, tc.pos, sc.Err())
				case !tc.damaged && sc.Err() != nil:
					t.Fatalf("a whole file: %v", sc.Err())
				case tc.damaged && (!errors.As(sc.Err(), &ce) || !errors.Is(sc.Err(), record.ErrCorrupt)):
					t.Fatalf("damage reported as %v", sc.Err())
				case tc.damaged && (ce.Torn != tc.torn || ce.Pos != tc.pos || ce.Offset == nil || *ce.Offset != uint64(tc.records)):
					t.Fatalf("damage reported as %+v; want torn=%t at byte %d, offset %d", ce, tc.torn, tc.pos, tc.records)
				}
			})
		}
	}
}

// With views, each record read encodes to exactly the bytes the file holds
// there, also a record larger than the read buffer.
func TestScannerViews(t *testing.T) {
	var data []byte
	var want [][]byte
	for i, r := range storetest.Records(40, 9) {
		r.Offset = uint64(i)
		if i == 17 {
			r.Value = bytes.Repeat([]byte("large "), 300_000) // 1.8 MB: more than the 1 MiB read buffer
		}
		start := len(data)
		var err error
		if data, err = record.Append(data, &r); err != nil {
			t.Fatal(err)
		}
		want = append(want, data[start:])
	}
	sc := NewScanner("views.msg", bytes.NewReader(data), 0, int64(len(data)), nil)
	sc.Views()
	n := 0
	for sc.Next() {
		r, _, _ := sc.Record()
		got, err := record.Append(nil, r)
		if err != nil || n >= len(want) || !bytes.Equal(got, want[n]) {
			t.Fatalf("record %d read as %d bytes (%v), the file holds %d others", n, len(got), err, len(want[min(n, len(want)-1)]))
		}
		n++
	}
	if sc.Err() != nil || n != len(want) || sc.Pos() != int64(len(data)) {
		t.Fatalf("read %d records up to byte %d (%v); the file holds %d in %d bytes", n, sc.Pos(), sc.Err(), len(want), len(data))
	}
}

// Whatever the bytes, the scanner stops cleanly: records it returns are
// whole, contiguous, and end where it says.
func FuzzScanner(f *testing.F) {
	whole, starts := segmentBytes(f, 5)
	badOffset := bytes.Clone(whole)
	badOffset[starts[2]] ^= 0x80 // an offset far past the others
	for _, views := range []bool{false, true} {
		f.Add(whole, views)
		f.Add(whole[:len(whole)/2], views)
		f.Add([]byte{}, views)
		f.Add(badOffset, views)
		for _, tail := range tornTailSeeds(f) {
			f.Add(append(bytes.Clone(whole), tail...), views)
		}
	}
	f.Fuzz(func(t *testing.T, data []byte, views bool) {
		sc := NewScanner("fuzz.msg", bytes.NewReader(data), 0, int64(len(data)), nil)
		if views {
			sc.Views()
		}
		var end int64
		var last *uint64
		for sc.Next() {
			r, pos, size := sc.Record()
			if pos != end || size < record.MinSize {
				t.Fatalf("record at %d of %d bytes after %d", pos, size, end)
			}
			if last != nil && r.Offset != *last+1 {
				t.Fatalf("offset %d after %d", r.Offset, *last)
			}
			o := r.Offset
			last = &o
			end = pos + int64(size)
		}
		if sc.Pos() != end || end > int64(len(data)) {
			t.Fatalf("stopped at %d after records up to %d of %d bytes", sc.Pos(), end, len(data))
		}
		if sc.Err() == nil && end != int64(len(data)) {
			t.Fatalf("a clean end at %d of %d bytes", end, len(data))
		}
	})
}
