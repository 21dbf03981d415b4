package sharedfile

import (
	"bytes"
	"errors"
	"hash/crc32"
	"testing"

	"strata/engine/record"
)

// fuzzSeeds are whole files and pieces of them: a sealed file of three
// chunks, the same unsealed, torn, and with damage inside.
func fuzzSeeds(t testing.TB) [][]byte {
	var file []byte
	for s := uint64(0); s < 3; s++ {
		file = append(file, chunkBytes(t, s, testRecords(5*s, 2, "z"))...)
	}
	sealed := AppendTrailer(append([]byte(nil), file...), Trailer{Chunks: 3, DataLen: uint64(len(file)), CRC: crc32.Checksum(file, castagnoli)})
	damaged := append([]byte(nil), file...)
	damaged[HeaderSize+20] ^= 1
	return [][]byte{
		sealed, file, file[:len(file)-7], damaged, chunkBytes(t, 7, []record.Record{record.DocExample}),
		append(append([]byte(nil), file...), make([]byte, 100)...), {}, {Magic}, AppendTrailer(nil, Trailer{}),
	}
}

// Whatever the bytes, DecodeChunk either refuses them with ErrCorrupt or
// returns a chunk that encodes back to the same bytes.
func FuzzDecodeChunk(f *testing.F) {
	for _, s := range fuzzSeeds(f) {
		f.Add(s)
	}
	f.Fuzz(func(t *testing.T, b []byte) {
		h, recs, err := DecodeChunk(b)
		if err != nil {
			if !errors.Is(err, ErrCorrupt) {
				t.Fatalf("error %v does not wrap ErrCorrupt", err)
			}
			return
		}
		var again []byte
		pos := 0
		for i := uint32(0); i < h.Count; i++ {
			r, n, err := record.Decode(recs[pos:])
			if err != nil {
				t.Fatalf("record %d of a whole chunk does not decode: %v", i, err)
			}
			if r.Offset != h.First+uint64(i) {
				t.Fatalf("record %d has offset %d in a chunk from %d", i, r.Offset, h.First)
			}
			if again, err = record.Append(again, &r); err != nil {
				t.Fatal(err)
			}
			pos += n
		}
		whole := append(AppendHeader(nil, h), again...)
		if !bytes.Equal(whole, b[:h.Size()]) {
			t.Fatalf("decode then encode changed the bytes:\n in %x\nout %x", b[:h.Size()], whole)
		}
	})
}

// Whatever the bytes, the recovery scan stops cleanly: the chunks it
// returns are whole, back to back from byte 0, and end where it says; its
// CRC is the CRC of those bytes; a clean end is the end of the file or a
// trailer that names them; damage inside names a whole chunk after it.
func FuzzScan(f *testing.F) {
	for _, s := range fuzzSeeds(f) {
		f.Add(s)
	}
	f.Fuzz(func(t *testing.T, b []byte) {
		res := Scan(1, "fuzz.msg", bytes.NewReader(b), int64(len(b)))
		pos := int64(0)
		for _, c := range res.Chunks {
			if c.Pos != pos || c.File != 1 {
				t.Fatalf("chunk at %d (file %d) after chunks up to %d", c.Pos, c.File, pos)
			}
			h, _, err := DecodeChunk(b[pos:])
			if err != nil || h != c.Header {
				t.Fatalf("chunk at %d: %+v, %v; the scan said %+v", pos, h, err, c.Header)
			}
			pos += c.Size()
		}
		if res.End != pos || pos > int64(len(b)) {
			t.Fatalf("End %d after chunks up to %d of %d bytes", res.End, pos, len(b))
		}
		if res.CRC != crc32.Checksum(b[:pos], castagnoli) {
			t.Fatalf("CRC %08x; the bytes' is %08x", res.CRC, crc32.Checksum(b[:pos], castagnoli))
		}
		var ce *CorruptError
		switch {
		case res.Err == nil && res.Sealed != nil:
			if pos+HeaderSize != int64(len(b)) || res.Sealed.DataLen != uint64(pos) || res.Sealed.Chunks != uint64(len(res.Chunks)) {
				t.Fatalf("a trailer %+v accepted after %d bytes of chunks in a %d-byte file", *res.Sealed, pos, len(b))
			}
		case res.Err == nil:
			if pos != int64(len(b)) {
				t.Fatalf("a clean end at %d of %d bytes", pos, len(b))
			}
		case !errors.As(res.Err, &ce) || !errors.Is(res.Err, ErrCorrupt) || ce.Pos != pos:
			t.Fatalf("damage reported as %v at %d; the chunks end at %d", res.Err, ce.Pos, pos)
		case !ce.Torn:
			if ce.NextValid <= pos || ce.NextValid > int64(len(b))-HeaderSize {
				t.Fatalf("damage at %d with the next whole chunk at %d of %d bytes", pos, ce.NextValid, len(b))
			}
			if _, _, err := DecodeChunk(b[ce.NextValid:]); err != nil {
				if _, terr := ParseTrailer(b[ce.NextValid:]); terr != nil {
					t.Fatalf("the next whole chunk at %d is not one: %v", ce.NextValid, err)
				}
			}
		}
	})
}
