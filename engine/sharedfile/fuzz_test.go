package sharedfile

import (
	"bytes"
	"errors"
	"hash/crc32"
	"testing"

	"strata/engine/record"
)

// committedBatch is a batch of a file with commit records: the chunks of
// recs (one per shard, from shard 0), then the commit record seq.
func committedBatch(t testing.TB, seq uint64, recs ...[]record.Record) []byte {
	var b []byte
	for s, r := range recs {
		b = append(b, reheader(chunkBytes(t, uint64(s), r), func(h []byte) { h[3] = FlagCommits })...)
	}
	return AppendCommit(b, Commit{Seq: seq, Length: uint64(len(b)), Chunks: uint32(len(recs)), CRC: crc32.Checksum(b, castagnoli)})
}

// fuzzSeeds are whole files and pieces of them, by name: a sealed file of
// three chunks without commit records, the same unsealed, torn, and with
// damage inside; and files with commit records, sealed, unsealed, with a
// torn last batch (its commit record kept, an earlier page lost), with a
// batch missing its commit record, and with damage in a committed batch.
func fuzzSeeds(t testing.TB) map[string][]byte {
	var file []byte
	for s := uint64(0); s < 3; s++ {
		file = append(file, chunkBytes(t, s, testRecords(5*s, 2, "z"))...)
	}
	sealed := AppendTrailer(append([]byte(nil), file...), Trailer{Chunks: 3, DataLen: uint64(len(file)), CRC: crc32.Checksum(file, castagnoli)})
	damaged := append([]byte(nil), file...)
	damaged[HeaderSize+20] ^= 1

	var cfile []byte
	for b := uint64(0); b < 3; b++ {
		cfile = append(cfile, committedBatch(t, b, testRecords(2*b, 2, "c"), testRecords(b, 1, "d"))...)
	}
	csealed := AppendTrailer(append([]byte(nil), cfile...), Trailer{Flags: FlagCommits, Chunks: 6, DataLen: uint64(len(cfile)), CRC: crc32.Checksum(cfile, castagnoli)})
	lastAt := len(cfile) - len(committedBatch(t, 2, testRecords(4, 2, "c"), testRecords(2, 1, "d")))
	ctorn := append([]byte(nil), cfile...)
	clear(ctorn[lastAt+10 : lastAt+HeaderSize+40]) // an earlier page of the last write lost, its commit record kept
	cdamaged := append([]byte(nil), cfile...)
	cdamaged[HeaderSize+30] ^= 1 // inside the first batch
	return map[string][]byte{
		"sealed": sealed, "unsealed": file, "torn-tail": file[:len(file)-7], "damage-inside": damaged,
		"doc-chunk":   chunkBytes(t, 7, []record.Record{record.DocExample}),
		"zeros-after": append(append([]byte(nil), file...), make([]byte, 100)...), "empty": {}, "magic-only": {Magic},
		"bare-trailer":   AppendTrailer(nil, Trailer{}),
		"commits-sealed": csealed, "commits-unsealed": cfile, "commits-torn-last-batch": ctorn,
		"commits-no-commit-record": cfile[:len(cfile)-HeaderSize], "commits-damage-inside": cdamaged,
		"commits-doc-batch": committedBatch(t, 0, []record.Record{record.DocExample}),
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
// returns are whole, in order from byte 0 with nothing but commit records
// between them, and end where it says; its CRC is the CRC of the bytes
// before End; a clean end is the end of the file or a trailer that names
// them; damage inside names a whole chunk or committed batch after it; a
// torn tail lies at or after End.
func FuzzScan(f *testing.F) {
	for _, s := range fuzzSeeds(f) {
		f.Add(s)
	}
	f.Fuzz(func(t *testing.T, b []byte) {
		res := Scan(1, "fuzz.msg", bytes.NewReader(b), int64(len(b)))
		pos := int64(0)
		skipCommits := func(to int64) {
			for pos < to {
				if _, err := ParseCommit(b[pos:]); err != nil || !res.Commits {
					t.Fatalf("bytes %d to %d between chunks are not commit records: %v", pos, to, err)
				}
				pos += HeaderSize
			}
		}
		for _, c := range res.Chunks {
			if c.Pos < pos || c.File != 1 {
				t.Fatalf("chunk at %d (file %d) after chunks up to %d", c.Pos, c.File, pos)
			}
			skipCommits(c.Pos)
			h, _, err := DecodeChunk(b[pos:])
			if err != nil || h != c.Header {
				t.Fatalf("chunk at %d: %+v, %v; the scan said %+v", pos, h, err, c.Header)
			}
			if (h.Flags == FlagCommits) != res.Commits {
				t.Fatalf("chunk at %d has flags %#x in a file with commit records: %t", pos, h.Flags, res.Commits)
			}
			pos += c.Size()
		}
		if res.End < pos || res.End > int64(len(b)) {
			t.Fatalf("End %d after chunks up to %d of %d bytes", res.End, pos, len(b))
		}
		var ce *CorruptError
		if !(res.Err != nil && errors.As(res.Err, &ce) && !ce.Torn) {
			skipCommits(res.End) // damage inside may lie in a commit record
		}
		if res.CRC != crc32.Checksum(b[:res.End], castagnoli) {
			t.Fatalf("CRC %08x; the bytes' is %08x", res.CRC, crc32.Checksum(b[:res.End], castagnoli))
		}
		switch {
		case res.Err == nil && res.Sealed != nil:
			if res.End+HeaderSize != int64(len(b)) || res.Sealed.DataLen != uint64(res.End) || res.Sealed.Chunks != uint64(len(res.Chunks)) {
				t.Fatalf("a trailer %+v accepted after %d bytes of chunks in a %d-byte file", *res.Sealed, res.End, len(b))
			}
		case res.Err == nil:
			if res.End != int64(len(b)) {
				t.Fatalf("a clean end at %d of %d bytes", res.End, len(b))
			}
		case !errors.As(res.Err, &ce) || !errors.Is(res.Err, ErrCorrupt):
			t.Fatalf("damage reported as %v", res.Err)
		case ce.Torn:
			if ce.Pos < res.End {
				t.Fatalf("a torn tail at %d, before the end of the data kept (%d)", ce.Pos, res.End)
			}
		default:
			if ce.Pos != res.End || ce.NextValid <= ce.Pos || ce.NextValid > int64(len(b))-HeaderSize {
				t.Fatalf("damage at %d (data kept to %d) with the next whole chunk at %d of %d bytes", ce.Pos, res.End, ce.NextValid, len(b))
			}
			prev := ce.NextValid - 1
			for _, c := range res.After {
				if h, _, err := DecodeChunk(b[c.Pos:]); c.Pos <= prev || err != nil || h != c.Header {
					t.Fatalf("a chunk after the damage at %d (after %d): %+v, %v; the scan said %+v", c.Pos, prev, h, err, c.Header)
				}
				prev = c.Pos
			}
			if res.AfterEnd < ce.NextValid || res.AfterEnd > int64(len(b)) || len(res.Damages) == 0 || res.Damages[0] != ce {
				t.Fatalf("after the damage: data to %d of %d bytes, damages %v", res.AfterEnd, len(b), res.Damages)
			}
			if h, _, err := DecodeChunk(b[ce.NextValid:]); err != nil || (res.Commits && h.Flags != FlagCommits) {
				if _, terr := ParseTrailer(b[ce.NextValid:]); terr != nil || res.Commits {
					t.Fatalf("the next whole chunk at %d is not one: %v", ce.NextValid, err)
				}
			}
		}
	})
}
