package sharedfile

import (
	"bytes"
	"encoding/binary"
	"encoding/hex"
	"errors"
	"hash/crc32"
	"os"
	"strings"
	"testing"

	"strata/engine/record"
)

// chunkBytes encodes a whole chunk of recs (offsets set) for shard.
func chunkBytes(t testing.TB, shard uint64, recs []record.Record) []byte {
	t.Helper()
	var body []byte
	for i := range recs {
		var err error
		if body, err = record.Append(body, &recs[i]); err != nil {
			t.Fatal(err)
		}
	}
	h := Header{Shard: shard, First: recs[0].Offset, Count: uint32(len(recs)), Length: uint32(len(body))}
	return append(AppendHeader(nil, h), body...)
}

func testRecords(first uint64, n int, tag string) []record.Record {
	out := make([]record.Record, n)
	for i := range out {
		out[i] = record.Record{Offset: first + uint64(i), Timestamp: int64(1764460800000 + i),
			Key: []byte(tag), Value: []byte(strings.Repeat(tag, 1+i%7)), Tags: []string{tag}}
	}
	return out
}

// reheader rewrites the header fields of a chunk and fixes its CRC, so a
// case tests the field's check, not the CRC's.
func reheader(b []byte, edit func(h []byte)) []byte {
	c := append([]byte(nil), b...)
	edit(c)
	binary.BigEndian.PutUint32(c[28:], crc32.Checksum(c[:28], castagnoli))
	return c
}

func TestDecodeChunk(t *testing.T) {
	good := chunkBytes(t, 9, testRecords(100, 3, "a"))
	cases := []struct {
		name string
		b    []byte
		want string // in the error; "" for none
	}{
		{"whole", good, ""},
		{"trailing bytes belong to the next chunk", append(append([]byte(nil), good...), 0xCB, 1), ""},
		{"empty", nil, "truncated"},
		{"header cut", good[:20], "truncated"},
		{"records cut", good[:len(good)-1], "truncated"},
		{"zeros", make([]byte, 64), "magic 0x00"},
		{"header bit flipped", func() []byte { c := append([]byte(nil), good...); c[13] ^= 1; return c }(), "header crc32c"},
		{"unknown flags", reheader(good, func(h []byte) { h[3] = 2 }), "flags"},
		{"unknown kind", reheader(good, func(h []byte) { h[1] = 9 }), "kind 9"},
		{"a trailer where a chunk was expected", AppendTrailer(nil, Trailer{}), "kind 2"},
		{"no records", reheader(good, func(h []byte) { binary.BigEndian.PutUint32(h[20:], 0) }), "no records"},
		{"more records than fit", reheader(good, func(h []byte) { binary.BigEndian.PutUint32(h[20:], 1000) }), "cannot fit"},
		{"fewer records than bytes", reheader(good, func(h []byte) { binary.BigEndian.PutUint32(h[20:], 2) }), "bytes after them"},
		{"length over the limit", reheader(good, func(h []byte) { binary.BigEndian.PutUint32(h[24:], MaxChunkBytes+1) }), "over the"},
		{"offsets overflow", reheader(good, func(h []byte) { binary.BigEndian.PutUint64(h[12:], 1<<64-2) }), "overflow"},
		{"first offset not the records'", reheader(good, func(h []byte) { binary.BigEndian.PutUint64(h[12:], 99) }), "carries offset 100, want 99"},
		{"record damaged", func() []byte { c := append([]byte(nil), good...); c[len(c)-2] ^= 1; return c }(), "record 2 of 3"},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			h, recs, err := DecodeChunk(tc.b)
			if tc.want == "" {
				if err != nil {
					t.Fatal(err)
				}
				if h != (Header{Shard: 9, First: 100, Count: 3, Length: uint32(len(good) - HeaderSize)}) || !bytes.Equal(recs, good[HeaderSize:]) {
					t.Fatalf("decoded %+v and %d record bytes", h, len(recs))
				}
				return
			}
			if err == nil || !errors.Is(err, ErrCorrupt) || !strings.Contains(err.Error(), tc.want) {
				t.Fatalf("err %v; want ErrCorrupt mentioning %q", err, tc.want)
			}
		})
	}
}

func TestTrailer(t *testing.T) {
	tr := Trailer{Chunks: 3, DataLen: 4096, CRC: 0xdeadbeef}
	b := AppendTrailer(nil, tr)
	if len(b) != HeaderSize {
		t.Fatalf("trailer of %d bytes", len(b))
	}
	if got, err := ParseTrailer(b); err != nil || got != tr {
		t.Fatalf("got %+v, %v", got, err)
	}
	for i := range b {
		c := append([]byte(nil), b...)
		c[i] ^= 0x10
		if _, err := ParseTrailer(c); !errors.Is(err, ErrCorrupt) {
			t.Fatalf("flipping byte %d: %v", i, err)
		}
	}
	if _, err := ParseTrailer(reheader(b, func(h []byte) { h[24] = 1 })); err == nil || !strings.Contains(err.Error(), "reserved") {
		t.Fatalf("reserved bytes set: %v", err)
	}
}

func TestCommitRecord(t *testing.T) {
	c := Commit{Seq: 7, Length: 4096, Chunks: 3, CRC: 0xdeadbeef}
	b := AppendCommit(nil, c)
	if len(b) != HeaderSize {
		t.Fatalf("commit record of %d bytes", len(b))
	}
	if got, err := ParseCommit(b); err != nil || got != c {
		t.Fatalf("got %+v, %v", got, err)
	}
	for i := range b {
		d := append([]byte(nil), b...)
		d[i] ^= 0x10
		if _, err := ParseCommit(d); !errors.Is(err, ErrCorrupt) {
			t.Fatalf("flipping byte %d: %v", i, err)
		}
	}
	cases := []struct {
		name string
		b    []byte
		want string
	}{
		{"without the flag", reheader(b, func(h []byte) { h[3] = 0 }), "without flag"},
		{"no chunks", reheader(b, func(h []byte) { binary.BigEndian.PutUint32(h[20:], 0) }), "commit of 0 chunks"},
		{"more chunks than fit", reheader(b, func(h []byte) { binary.BigEndian.PutUint64(h[12:], 40) }), "commit of 3 chunks in 40 bytes"},
		{"a chunk where a commit record was expected", chunkBytes(t, 1, testRecords(0, 1, "a")), "kind 1 where a commit record"},
		{"a commit record where a chunk was expected", nil, ""},
	}
	for _, tc := range cases {
		if tc.b == nil {
			if _, err := ParseHeader(b); err == nil || !strings.Contains(err.Error(), "kind 3 where a records chunk") {
				t.Fatalf("%s: %v", tc.name, err)
			}
			continue
		}
		if _, err := ParseCommit(tc.b); !errors.Is(err, ErrCorrupt) || !strings.Contains(err.Error(), tc.want) {
			t.Fatalf("%s: %v; want ErrCorrupt mentioning %q", tc.name, err, tc.want)
		}
	}
}

// docs/format.md dumps a batch of one chunk holding record.DocExample, as a
// writer writes it; this keeps it true.
func TestFormatDocChunkExample(t *testing.T) {
	doc, err := os.ReadFile("../../docs/format.md")
	if err != nil {
		t.Fatal(err)
	}
	_, shared, ok := strings.Cut(string(doc), "## Shared files")
	if !ok {
		t.Fatal("docs/format.md has no section ## Shared files")
	}
	_, after, ok := strings.Cut(shared, "```hexdump\n")
	if !ok {
		t.Fatal("docs/format.md's shared-file section has no ```hexdump block")
	}
	block, _, _ := strings.Cut(after, "```")
	var want []byte
	for _, line := range strings.Split(strings.TrimSpace(block), "\n") {
		for _, f := range strings.Fields(line)[1:] {
			if strings.HasPrefix(f, "|") {
				break
			}
			v, err := hex.DecodeString(f)
			if err != nil {
				t.Fatalf("hex dump: %q: %v", f, err)
			}
			want = append(want, v...)
		}
	}
	// What a writer writes for one batch: the chunk, then its commit
	// record.
	dir := t.TempDir()
	d, _ := openDir(t, dir, 1<<20)
	w := d.NewWriter()
	if _, err := w.Add(nil, 7, []record.Record{record.DocExample}); err != nil {
		t.Fatal(err)
	}
	if _, err := w.Commit(true); err != nil {
		t.Fatal(err)
	}
	got, err := os.ReadFile(w.f.path)
	if err != nil {
		t.Fatal(err)
	}
	if !bytes.Equal(got, want) {
		t.Fatalf("docs/format.md shows a chunk that differs from the encoder's; regenerate it:\n%s", hex.Dump(got))
	}
}
