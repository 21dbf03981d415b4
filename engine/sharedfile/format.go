// Package sharedfile is the file layer of the shared-file model
// (docs/engine.md, "The shared-file model"): many shards append
// to one file, each batch of an I/O worker writing one chunk per shard it
// touched and fsyncing once for all of them. A chunk is a 32-byte header
// followed by records in the unchanged binding record format
// (engine/record), so one shard's record bytes, taken chunk by chunk in
// offset order, are the bytes its own segment file would hold in the
// partition-per-file model, and checksum the same. The format is in
// docs/format.md, "Shared files".
package sharedfile

import (
	"encoding/binary"
	"fmt"
	"hash/crc32"

	"strata/engine/integrity"
	"strata/engine/record"
)

const (
	// HeaderSize is the size of a chunk header, and of the seal trailer:
	// one size, so the last HeaderSize bytes of a sealed file are its
	// trailer.
	HeaderSize = 32
	// Magic starts every chunk header and the trailer. It is not zero, so
	// zeros a crash left (preallocation, unwritten pages) never read as a
	// chunk.
	Magic = 0xCB
	// KindRecords is a chunk of one shard's records.
	KindRecords = 1
	// KindSeal is the trailer that closes a sealed file.
	KindSeal = 2
	// KindCommit closes a batch: the record a writer appends after the
	// chunks of one Commit, in the same write, naming their bytes and
	// CRC. Power loss can persist a later page of the last (unsynced)
	// write without an earlier one; a batch whose commit record checks
	// out against its bytes is whole, so damage with a committed batch
	// after it lies in synced data, and damage with none after it is the
	// torn last write.
	KindCommit = 3
	// FlagCommits, in the flags of every chunk, commit record and trailer
	// of a file, says its batches end with commit records; a file written
	// before them has flags 0 everywhere and is read as it always was.
	FlagCommits = 0x0001
	// MaxChunkBytes bounds the records of one chunk; the writer splits a
	// larger append into several chunks. It holds a record of the
	// format's maximum size.
	MaxChunkBytes = 128 << 20
)

var castagnoli = crc32.MakeTable(crc32.Castagnoli)

// ErrCorrupt is wrapped by every decoding error of a chunk or trailer; a
// damaged record inside a chunk also wraps record.ErrCorrupt. It answers
// integrity.IsCorruption.
var ErrCorrupt = integrity.Sentinel("corrupt shared-file chunk")

// ErrShort means the bytes end inside a chunk: at the tail of a file, a
// torn write.
var ErrShort = fmt.Errorf("%w: truncated", ErrCorrupt)

// Header is a chunk header: Count records of shard Shard, offsets First to
// First+Count-1, in Length bytes after the header.
type Header struct {
	// Flags is FlagCommits in a file with commit records, else 0.
	Flags  uint16
	Shard  uint64
	First  uint64
	Count  uint32
	Length uint32
}

// Last is the offset of the chunk's last record.
func (h Header) Last() uint64 { return h.First + uint64(h.Count) - 1 }

// Size is the chunk's size in the file, header included.
func (h Header) Size() int64 { return HeaderSize + int64(h.Length) }

// AppendHeader encodes h at the end of dst.
//
//	magic u8 | kind u8 | flags u16 | shard u64 | first_offset u64 |
//	count u32 | length u32 | crc32c u32 (of the 28 bytes before it)
func AppendHeader(dst []byte, h Header) []byte {
	start := len(dst)
	dst = append(dst, Magic, KindRecords)
	dst = binary.BigEndian.AppendUint16(dst, h.Flags)
	dst = binary.BigEndian.AppendUint64(dst, h.Shard)
	dst = binary.BigEndian.AppendUint64(dst, h.First)
	dst = binary.BigEndian.AppendUint32(dst, h.Count)
	dst = binary.BigEndian.AppendUint32(dst, h.Length)
	return binary.BigEndian.AppendUint32(dst, crc32.Checksum(dst[start:], castagnoli))
}

// kindOf checks the magic, flags and CRC of the HeaderSize bytes at the
// start of b and returns their kind.
func kindOf(b []byte) (byte, error) {
	k, _, err := kindFlags(b)
	return k, err
}

// kindFlags is kindOf with the flags.
func kindFlags(b []byte) (byte, uint16, error) {
	if len(b) < HeaderSize {
		return 0, 0, ErrShort
	}
	if b[0] != Magic {
		return 0, 0, fmt.Errorf("%w: magic %#02x, want %#02x", ErrCorrupt, b[0], Magic)
	}
	if want, got := binary.BigEndian.Uint32(b[28:]), crc32.Checksum(b[:28], castagnoli); got != want {
		return 0, 0, fmt.Errorf("%w: header crc32c %08x, stored %08x", ErrCorrupt, got, want)
	}
	flags := binary.BigEndian.Uint16(b[2:])
	if flags&^FlagCommits != 0 {
		return 0, 0, fmt.Errorf("%w: flags %#04x, want 0 or %#04x", ErrCorrupt, flags, FlagCommits)
	}
	switch b[1] {
	case KindRecords, KindSeal:
	case KindCommit:
		if flags != FlagCommits {
			return 0, 0, fmt.Errorf("%w: a commit record without flag %#04x", ErrCorrupt, FlagCommits)
		}
	default:
		return 0, 0, fmt.Errorf("%w: kind %d", ErrCorrupt, b[1])
	}
	return b[1], flags, nil
}

// ParseHeader decodes and checks the chunk header at the start of b (not
// the records after it).
func ParseHeader(b []byte) (Header, error) {
	kind, flags, err := kindFlags(b)
	if err != nil {
		return Header{}, err
	}
	if kind != KindRecords {
		return Header{}, fmt.Errorf("%w: kind %d where a records chunk was expected", ErrCorrupt, kind)
	}
	h := Header{Flags: flags, Shard: binary.BigEndian.Uint64(b[4:]), First: binary.BigEndian.Uint64(b[12:]),
		Count: binary.BigEndian.Uint32(b[20:]), Length: binary.BigEndian.Uint32(b[24:])}
	return h, h.check()
}

func (h Header) check() error {
	switch {
	case h.Count == 0:
		return fmt.Errorf("%w: a chunk of shard %d with no records", ErrCorrupt, h.Shard)
	case h.Length > MaxChunkBytes:
		return fmt.Errorf("%w: chunk length %d over the %d allowed", ErrCorrupt, h.Length, MaxChunkBytes)
	case uint64(h.Length) < uint64(h.Count)*record.MinSize:
		return fmt.Errorf("%w: %d records cannot fit in %d bytes", ErrCorrupt, h.Count, h.Length)
	case h.First+uint64(h.Count)-1 < h.First:
		return fmt.Errorf("%w: offsets %d + %d records overflow", ErrCorrupt, h.First, h.Count)
	}
	return nil
}

// DecodeChunk checks the chunk at the start of b, header and every record
// (length, CRC, offsets First, First+1, ... filling Length exactly), and
// returns its header and its record bytes, which alias b.
func DecodeChunk(b []byte) (Header, []byte, error) {
	h, err := ParseHeader(b)
	if err != nil {
		return Header{}, nil, err
	}
	if int64(len(b)) < h.Size() {
		return Header{}, nil, ErrShort
	}
	recs := b[HeaderSize:h.Size()]
	if err := checkRecords(h, recs); err != nil {
		return Header{}, nil, err
	}
	return h, recs, nil
}

// checkRecords verifies that recs holds exactly h's records.
func checkRecords(h Header, recs []byte) error {
	pos := 0
	for i := uint32(0); i < h.Count; i++ {
		off, n, err := record.Check(recs[pos:])
		if err != nil {
			return fmt.Errorf("%w: shard %d record %d of %d at chunk byte %d: %w", ErrCorrupt, h.Shard, i, h.Count, pos, err)
		}
		if want := h.First + uint64(i); off != want {
			return fmt.Errorf("%w: shard %d record %d carries offset %d, want %d", ErrCorrupt, h.Shard, i, off, want)
		}
		pos += n
	}
	if pos != len(recs) {
		return fmt.Errorf("%w: shard %d chunk of %d records has %d bytes after them", ErrCorrupt, h.Shard, h.Count, len(recs)-pos)
	}
	return nil
}

// Trailer closes a sealed file: the chunks before it, their bytes and the
// CRC-32C of every byte before it.
type Trailer struct {
	// Flags is FlagCommits in a file with commit records, else 0.
	Flags   uint16
	Chunks  uint64
	DataLen uint64
	CRC     uint32
}

// AppendTrailer encodes t at the end of dst.
//
//	magic u8 | kind u8 = 2 | flags u16 | chunks u64 | data_len u64 |
//	data_crc32c u32 | reserved u32 = 0 | crc32c u32 (of the 28 bytes before it)
func AppendTrailer(dst []byte, t Trailer) []byte {
	start := len(dst)
	dst = append(dst, Magic, KindSeal)
	dst = binary.BigEndian.AppendUint16(dst, t.Flags)
	dst = binary.BigEndian.AppendUint64(dst, t.Chunks)
	dst = binary.BigEndian.AppendUint64(dst, t.DataLen)
	dst = binary.BigEndian.AppendUint32(dst, t.CRC)
	dst = binary.BigEndian.AppendUint32(dst, 0)
	return binary.BigEndian.AppendUint32(dst, crc32.Checksum(dst[start:], castagnoli))
}

// ParseTrailer decodes and checks a trailer at the start of b.
func ParseTrailer(b []byte) (Trailer, error) {
	kind, flags, err := kindFlags(b)
	if err != nil {
		return Trailer{}, err
	}
	if kind != KindSeal {
		return Trailer{}, fmt.Errorf("%w: kind %d where the seal trailer was expected", ErrCorrupt, kind)
	}
	if r := binary.BigEndian.Uint32(b[24:]); r != 0 {
		return Trailer{}, fmt.Errorf("%w: trailer's reserved field %#x, want 0", ErrCorrupt, r)
	}
	return Trailer{Flags: flags, Chunks: binary.BigEndian.Uint64(b[4:]), DataLen: binary.BigEndian.Uint64(b[12:]),
		CRC: binary.BigEndian.Uint32(b[20:])}, nil
}

// Commit is a commit record: the Seq-th commit of its file (from 0) closes
// the Chunks chunks in the Length bytes right before it, whose CRC-32C is
// CRC. The batch starts where the previous commit record ended (or at the
// start of the file).
type Commit struct {
	Seq    uint64
	Length uint64
	Chunks uint32
	CRC    uint32
}

// AppendCommit encodes c at the end of dst.
//
//	magic u8 | kind u8 = 3 | flags u16 = 1 | seq u64 | batch_len u64 |
//	chunks u32 | batch_crc32c u32 | crc32c u32 (of the 28 bytes before it)
func AppendCommit(dst []byte, c Commit) []byte {
	start := len(dst)
	dst = append(dst, Magic, KindCommit)
	dst = binary.BigEndian.AppendUint16(dst, FlagCommits)
	dst = binary.BigEndian.AppendUint64(dst, c.Seq)
	dst = binary.BigEndian.AppendUint64(dst, c.Length)
	dst = binary.BigEndian.AppendUint32(dst, c.Chunks)
	dst = binary.BigEndian.AppendUint32(dst, c.CRC)
	return binary.BigEndian.AppendUint32(dst, crc32.Checksum(dst[start:], castagnoli))
}

// ParseCommit decodes and checks a commit record at the start of b (not
// the batch it names).
func ParseCommit(b []byte) (Commit, error) {
	kind, err := kindOf(b)
	if err != nil {
		return Commit{}, err
	}
	if kind != KindCommit {
		return Commit{}, fmt.Errorf("%w: kind %d where a commit record was expected", ErrCorrupt, kind)
	}
	c := Commit{Seq: binary.BigEndian.Uint64(b[4:]), Length: binary.BigEndian.Uint64(b[12:]),
		Chunks: binary.BigEndian.Uint32(b[20:]), CRC: binary.BigEndian.Uint32(b[24:])}
	if c.Chunks == 0 || c.Length < uint64(c.Chunks)*(HeaderSize+record.MinSize) {
		return Commit{}, fmt.Errorf("%w: a commit of %d chunks in %d bytes", ErrCorrupt, c.Chunks, c.Length)
	}
	return c, nil
}
