package segment

import (
	"bytes"
	"encoding/binary"
	"os"
	"testing"

	"strata/engine/record"
	"strata/engine/store/storetest"
)

// tornTailSeeds are tails a crash can leave after a segment's synced
// bytes, the cases recovery once took for damage among them.
func tornTailSeeds(t testing.TB) [][]byte {
	next, _ := encodeAt(t, storetest.Records(3, 7), 5)
	inner, _ := encodeAt(t, storetest.Records(1, 8), 6)
	outer := storetest.Records(1, 7)
	outer[0].Value = append(bytes.Clone(inner), bytes.Repeat([]byte("p"), 100)...)
	embedding, _ := encodeAt(t, outer, 5)
	at := bytes.Index(embedding, inner)
	lostPage, _ := encodeAt(t, storetest.Records(120, 9), 5)
	clear(lostPage[1000:5096])
	badOffset := bytes.Clone(next)
	binary.BigEndian.PutUint64(badOffset, 1<<60)
	return [][]byte{
		nil,
		{0, 0, 0, 0, 0, 0, 0, 20, 0},
		make([]byte, 4096),
		next,
		next[:len(next)-3],
		embedding[:at+len(inner)+10], // a value holding a valid record, torn after it
		lostPage,                     // whole records after a lost page
		badOffset,
	}
}

// Whatever a crash left past the synced bytes, recovery takes none of it
// for damage: the shard keeps its synced records and the whole records
// that continue them, takes writes at the next offset, and a second start
// finds the file as the first left it.
func FuzzRecoverTail(f *testing.F) {
	for _, s := range tornTailSeeds(f) {
		f.Add(s)
	}
	f.Fuzz(func(t *testing.T, tail []byte) {
		cfg := testConfig(t.TempDir())
		e := open(t, cfg)
		want := fill(t, e, "z-0", 5)
		path := segmentPath(e.shards["z-0"].dir, 0)
		e.Close()
		base, _ := os.ReadFile(path)
		if err := os.WriteFile(path, append(bytes.Clone(base), tail...), 0o644); err != nil {
			t.Fatal(err)
		}
		e = open(t, cfg)
		defer e.Close()
		if n := e.Stats().Damaged.Load(); n != 0 {
			t.Fatalf("a tail past the synced bytes taken for damage (%d shards)", n)
		}
		got := storetest.ReadAll(t, e, "z-0", 0)
		storetest.Equal(t, got[:5], want)
		for i, r := range got {
			if r.Offset != uint64(i) {
				t.Fatalf("record %d has offset %d", i, r.Offset)
			}
		}
		if b, err := e.Append(ctx, "z-0", storetest.Records(1, 1)); err != nil || b != uint64(len(got)) {
			t.Fatalf("append after recovery: base %d, %v; want %d", b, err, len(got))
		}
	})
}

// The search past damage, which only informs an operator, never reads
// outside [pos, end) and names only a whole record carrying a later
// offset, however the bytes are made.
func FuzzValidRecordAfter(f *testing.F) {
	whole, starts := segmentBytes(f, 6)
	for _, s := range tornTailSeeds(f) {
		f.Add(append(bytes.Clone(whole[:starts[3]]), s...), uint16(starts[2]), uint16(0))
	}
	f.Add(whole, uint16(starts[2]+3), uint16(0))
	f.Add(whole, uint16(0), uint16(10))
	f.Fuzz(func(t *testing.T, data []byte, pos, cut uint16) {
		end := int64(len(data)) - int64(cut)
		if int64(pos) >= end {
			return
		}
		const expected = 2
		at := validRecordAfter(bytes.NewReader(data[:end]), int64(pos), end, expected)
		if at == -1 {
			return
		}
		if at <= int64(pos) || at >= end {
			t.Fatalf("a record at byte %d, outside (%d, %d)", at, pos, end)
		}
		off, size, err := record.Check(data[at:end])
		if err != nil || off <= expected || at+int64(size) > end {
			t.Fatalf("byte %d holds no whole record past offset %d: offset %d, %d bytes, %v", at, expected, off, size, err)
		}
	})
}
