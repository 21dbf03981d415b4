package sharedfile

import (
	"fmt"
	"hash/crc32"
	"os"

	"strata/engine/record"
)

// ReadChunk checks the chunk at ref (header, records, offsets) and calls
// fn with its header and record bytes. The bytes are the file's mapping:
// valid only during fn, and fn must not keep them. Only committed chunks
// can be read; a ref past them, or one whose header is not a chunk of the
// shard it names (when shard is not nil), is an error.
func (d *Dir) ReadChunk(ref Ref, shard *uint64, fn func(h Header, recs []byte) error) error {
	f, err := d.file(ref.File)
	if err != nil {
		return err
	}
	f.mu.RLock()
	defer f.mu.RUnlock()
	n := f.readable.Load()
	if ref.Pos < 0 || ref.Pos+HeaderSize > n {
		return fmt.Errorf("sharedfile: %s: no chunk at byte %d (%d bytes readable)", f.path, ref.Pos, n)
	}
	b, err := f.view(n)
	if err != nil {
		return err
	}
	h, recs, err := DecodeChunk(b[ref.Pos:])
	if err != nil {
		return fmt.Errorf("sharedfile: %s at byte %d: %w", f.path, ref.Pos, err)
	}
	if shard != nil && h.Shard != *shard {
		return fmt.Errorf("sharedfile: %s at byte %d: a chunk of shard %d, not %d", f.path, ref.Pos, h.Shard, *shard)
	}
	return fn(h, recs)
}

// Chunks lists the committed chunks of a file by hopping from header to
// header (checking headers, not records): what rebuilds a lost index of a
// sealed file, and what Shards reads.
func (d *Dir) Chunks(no uint64) ([]Chunk, error) {
	f, err := d.file(no)
	if err != nil {
		return nil, err
	}
	f.mu.RLock()
	defer f.mu.RUnlock()
	n := f.readable.Load()
	b, err := f.view(n)
	if err != nil {
		return nil, err
	}
	var out []Chunk
	for pos := int64(0); pos < n; {
		h, err := ParseHeader(b[pos:])
		if err == nil && pos+h.Size() > n {
			err = ErrShort
		}
		if err != nil {
			return out, fmt.Errorf("sharedfile: %s at byte %d: %w", f.path, pos, err)
		}
		out = append(out, Chunk{Ref: Ref{File: no, Pos: pos}, Header: h})
		pos += h.Size()
	}
	return out, nil
}

// Checksum re-reads the committed bytes of file no from disk and returns
// their CRC-32C, to compare with the one recorded at its seal (a scrub).
func (d *Dir) Checksum(no uint64) (uint32, int64, error) {
	f, err := d.file(no)
	if err != nil {
		return 0, 0, err
	}
	n := f.readable.Load()
	rf, err := os.Open(f.path)
	if err != nil {
		return 0, 0, err
	}
	defer rf.Close()
	crc, err := crcOf(rf, n)
	return crc, n, err
}

// ShardScanner reads one shard's records out of its chunks, across files,
// in the order given (the engine's per-shard index, in offset order),
// checking each chunk whole, that it is the shard's, and that offsets
// follow each other across chunks. It has segment.Scanner's shape, so the
// converter reads a shard's segment from shared files the way it reads a
// segment file; CRC is the running CRC-32C of the record bytes, equal to
// the checksum of the same records in a segment file.
type ShardScanner struct {
	d      *Dir
	shard  uint64
	chunks []Ref
	next   *uint64

	i      int    // next chunk to load
	ref    Ref    // the loaded chunk
	recs   []byte // its records (a copy: records handed out alias it)
	pos    int    // next record in recs
	crc    uint32
	rec    record.Record
	recRef Ref
	size   int
	err    error
}

// NewShardScanner scans shard's records in chunks; next, when not nil, is
// the offset the first record must carry.
func (d *Dir) NewShardScanner(shard uint64, chunks []Ref, next *uint64) *ShardScanner {
	return &ShardScanner{d: d, shard: shard, chunks: chunks, next: next}
}

// Next reads the next record; false at the end or at an error (Err).
func (s *ShardScanner) Next() bool {
	if s.err != nil {
		return false
	}
	for s.pos >= len(s.recs) {
		if s.i == len(s.chunks) {
			return false
		}
		s.ref = s.chunks[s.i]
		s.i++
		err := s.d.ReadChunk(s.ref, &s.shard, func(h Header, recs []byte) error {
			if s.next != nil && h.First != *s.next {
				return fmt.Errorf("%w: chunk of shard %d starts at offset %d where %d was expected", ErrCorrupt, s.shard, h.First, *s.next)
			}
			s.recs = append([]byte(nil), recs...)
			return nil
		})
		if err != nil {
			s.err = err
			return false
		}
		s.pos = 0
	}
	r, n, err := record.Decode(s.recs[s.pos:])
	if err != nil { // checked by ReadChunk: only a decoder disagreement lands here
		s.err = fmt.Errorf("sharedfile: file %d chunk at byte %d: %w", s.ref.File, s.ref.Pos, err)
		return false
	}
	s.crc = crc32.Update(s.crc, castagnoli, s.recs[s.pos:s.pos+n])
	s.rec, s.size = r, n
	s.recRef = Ref{File: s.ref.File, Pos: s.ref.Pos + HeaderSize + int64(s.pos)}
	s.pos += n
	following := r.Offset + 1
	s.next = &following
	return true
}

// Record is the record Next read (its byte slices alias memory the scanner
// gives up: callers may keep them), where it lies and its size.
func (s *ShardScanner) Record() (*record.Record, Ref, int) { return &s.rec, s.recRef, s.size }

// Err is nil after a clean end.
func (s *ShardScanner) Err() error { return s.err }

// CRC is the CRC-32C of the record bytes read so far.
func (s *ShardScanner) CRC() uint32 { return s.crc }
