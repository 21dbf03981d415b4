// Package record is the binding on-disk record format of a segment file
// (docs/format.md): size first so a reader can skip a record, CRC-32C so a
// torn or corrupt record is caught, then metadata, protocol data and data.
//
//	offset u64 | total_len u32 | crc32c u32 | metadata_len u32 | metadata
//	           | protocol_data_len u32 | protocol_data | data_len u32 | data
//
// All integers are big-endian. total_len counts every byte of the record,
// from the first byte of offset to the last of data; the CRC covers every
// byte after the crc field.
package record

import (
	"encoding/binary"
	"fmt"
	"hash/crc32"

	"strata/engine/integrity"
)

// Record is one message, protocol-neutral.
type Record struct {
	// Offset is assigned by the engine on append.
	Offset uint64
	// Timestamp in milliseconds since the Unix epoch, UTC.
	Timestamp int64
	// Key is nil for a null key; an empty non-nil slice is an empty key.
	Key []byte
	// Value is nil for a null value (a Kafka tombstone).
	Value   []byte
	Headers []Header
	Tags    []string
	// ProtocolData holds protocol-specific fields (e.g. Kafka producer id,
	// epoch, sequence), opaque to the engine.
	ProtocolData []byte
}

// Header is a Kafka-style record header; a nil Value is a null value.
type Header struct {
	Key   string
	Value []byte
}

const (
	// HeaderSize is offset, total_len and crc32c.
	HeaderSize = 8 + 4 + 4
	// MinSize is a record with empty sections.
	MinSize = HeaderSize + 3*4
	// MaxSize bounds one record; a larger total_len is corruption.
	MaxSize = 64 << 20
)

var castagnoli = crc32.MakeTable(crc32.Castagnoli)

// ErrCorrupt is wrapped by every decoding error: the bytes are not a whole,
// intact record. Recovery truncates the log at the first one. It answers
// integrity.IsCorruption.
var ErrCorrupt = integrity.Sentinel("corrupt record")

// ErrShort means the buffer ends inside a record: at the tail of a log, a
// torn write.
var ErrShort = fmt.Errorf("%w: truncated", ErrCorrupt)

// Size is the encoded size of r.
func Size(r *Record) int {
	return MinSize + MetadataSize(r) + len(r.ProtocolData) + len(r.Value)
}

// Append encodes r at the end of dst and returns the extended slice.
func Append(dst []byte, r *Record) ([]byte, error) {
	size := Size(r)
	if size > MaxSize {
		return dst, fmt.Errorf("record at offset %d is %d bytes, more than the %d allowed", r.Offset, size, MaxSize)
	}
	start := len(dst)
	dst = binary.BigEndian.AppendUint64(dst, r.Offset)
	dst = binary.BigEndian.AppendUint32(dst, uint32(size))
	dst = binary.BigEndian.AppendUint32(dst, 0) // crc, filled below
	dst = binary.BigEndian.AppendUint32(dst, uint32(MetadataSize(r)))
	var err error
	if dst, err = appendMetadata(dst, r); err != nil {
		return dst[:start], err
	}
	dst = binary.BigEndian.AppendUint32(dst, uint32(len(r.ProtocolData)))
	dst = append(dst, r.ProtocolData...)
	dst = binary.BigEndian.AppendUint32(dst, uint32(len(r.Value)))
	dst = append(dst, r.Value...)
	binary.BigEndian.PutUint32(dst[start+12:], crc32.Checksum(dst[start+HeaderSize:], castagnoli))
	return dst, nil
}

// Peek reads the offset and total length at the start of b without checking
// the rest; it lets a scanner skip records it does not want.
func Peek(b []byte) (offset uint64, size int, err error) {
	if len(b) < HeaderSize {
		return 0, 0, ErrShort
	}
	size = int(binary.BigEndian.Uint32(b[8:]))
	if size < MinSize || size > MaxSize {
		return 0, 0, fmt.Errorf("%w: total_len %d outside [%d, %d]", ErrCorrupt, size, MinSize, MaxSize)
	}
	return binary.BigEndian.Uint64(b), size, nil
}

// Check verifies the record at the start of b (length and CRC) and returns
// its offset and size.
func Check(b []byte) (offset uint64, size int, err error) {
	offset, size, err = Peek(b)
	if err != nil {
		return 0, 0, err
	}
	if len(b) < size {
		return 0, 0, ErrShort
	}
	want := binary.BigEndian.Uint32(b[12:])
	if got := crc32.Checksum(b[HeaderSize:size], castagnoli); got != want {
		return 0, 0, fmt.Errorf("%w: crc32c %08x, stored %08x", ErrCorrupt, got, want)
	}
	return offset, size, nil
}

// Decode checks and decodes the record at the start of b. The returned
// record's byte slices alias b; copy them to keep them past b's life.
func Decode(b []byte) (Record, int, error) {
	offset, size, err := Check(b)
	if err != nil {
		return Record{}, 0, err
	}
	return decodeBody(b, offset, size)
}

// DecodeVerified decodes the record at the start of b as Decode does but
// without its CRC: for bytes already checked in bulk (a sealed segment whose
// whole-file checksum matched). Lengths and structure are still checked, so
// no input makes it read outside b.
func DecodeVerified(b []byte) (Record, int, error) {
	offset, size, err := Peek(b)
	if err != nil {
		return Record{}, 0, err
	}
	if len(b) < size {
		return Record{}, 0, ErrShort
	}
	return decodeBody(b, offset, size)
}

func decodeBody(b []byte, offset uint64, size int) (Record, int, error) {
	body := b[HeaderSize:size]
	var r Record
	r.Offset = offset
	meta, body, err := section(body, "metadata")
	if err != nil {
		return Record{}, 0, err
	}
	flags, err := decodeMetadata(meta, &r)
	if err != nil {
		return Record{}, 0, err
	}
	if r.ProtocolData, body, err = section(body, "protocol_data"); err != nil {
		return Record{}, 0, err
	}
	if len(r.ProtocolData) == 0 {
		r.ProtocolData = nil
	}
	value, body, err := section(body, "data")
	if err != nil {
		return Record{}, 0, err
	}
	if len(body) != 0 {
		return Record{}, 0, fmt.Errorf("%w: %d bytes after data", ErrCorrupt, len(body))
	}
	switch {
	case flags&flagNullValue == 0:
		r.Value = value
	case len(value) != 0:
		return Record{}, 0, fmt.Errorf("%w: null value with %d data bytes", ErrCorrupt, len(value))
	}
	return r, size, nil
}

func section(b []byte, what string) (sec, rest []byte, err error) {
	if len(b) < 4 {
		return nil, nil, fmt.Errorf("%w: %s length missing", ErrCorrupt, what)
	}
	n := binary.BigEndian.Uint32(b)
	if uint64(n) > uint64(len(b)-4) {
		return nil, nil, fmt.Errorf("%w: %s length %d past the record's end", ErrCorrupt, what, n)
	}
	return b[4 : 4+n], b[4+n:], nil
}

// Sum is what a sealed segment records of its records: their count, the
// bytes of their encoding and its CRC-32C. A copy of a segment made from
// decoded records (a cold object read back, a replica's copy) is that
// segment when its Sum matches.
type Sum struct {
	Records uint64
	Bytes   int64
	crc     uint32
	enc     []byte
}

// Add encodes r as a segment stores it, counts it, and returns the
// encoding (valid until the next Add).
func (s *Sum) Add(r *Record) ([]byte, error) {
	var err error
	if s.enc, err = Append(s.enc[:0], r); err != nil {
		return nil, err
	}
	s.crc = crc32.Update(s.crc, castagnoli, s.enc)
	s.Records++
	s.Bytes += int64(len(s.enc))
	return s.enc, nil
}

// Checksum is the CRC-32C of every encoding added.
func (s *Sum) Checksum() uint32 { return s.crc }
