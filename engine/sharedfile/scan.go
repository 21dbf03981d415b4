package sharedfile

import (
	"bufio"
	"errors"
	"fmt"
	"hash/crc32"
	"io"
)

// Ref locates a chunk: its file and the byte position of its header.
type Ref struct {
	File uint64
	Pos  int64
}

// Chunk is a chunk's place and header.
type Chunk struct {
	Ref
	Header
}

// CorruptError is damage found in a shared file: where, and whether it is
// a torn tail (no whole chunk follows it: a write cut short, to cut off)
// or lies inside the file, with a whole chunk at NextValid after it
// (acknowledged data of other shards may follow: not to cut). It unwraps
// to ErrCorrupt.
type CorruptError struct {
	Path      string
	Pos       int64
	Torn      bool
	NextValid int64 // when !Torn: the position of the first whole chunk after the damage
	Err       error
}

func (e *CorruptError) Error() string {
	if e.Torn {
		return fmt.Sprintf("%s at byte %d: torn tail: %v", e.Path, e.Pos, e.Err)
	}
	return fmt.Sprintf("%s at byte %d: damaged chunk, whole chunks follow at byte %d: %v", e.Path, e.Pos, e.NextValid, e.Err)
}

func (e *CorruptError) Unwrap() error { return e.Err }

// ScanResult is what a scan of a whole shared file found.
type ScanResult struct {
	// Chunks are the whole chunks from the start of the file, in order.
	Chunks []Chunk
	// End is the end of the last whole chunk: where a torn file is cut and
	// where a sealed file's trailer starts.
	End int64
	// CRC is the CRC-32C of the bytes before End.
	CRC uint32
	// Sealed is the trailer found at End, if the file ends with one.
	Sealed *Trailer
	// Err is nil after a clean end (a trailer, or the end of the file right
	// after a chunk); a *CorruptError otherwise.
	Err error
}

// Scan reads a shared file (file number no, named path for errors) from
// its start to size, checking every chunk whole (header, records, offsets),
// in the memory of one chunk. It stops at the trailer, at the end, or at
// the first damage. It is the recovery scan: its result says what the
// file holds and where to cut it.
func Scan(no uint64, path string, r io.ReaderAt, size int64) ScanResult {
	var res ScanResult
	// Small chunks are the shared model's common case: reading each with
	// its own ReadAt made the scan two syscalls per chunk (~100 MB/s on
	// 100-byte records); a buffered reader makes it a memory scan.
	br := bufio.NewReaderSize(io.NewSectionReader(r, 0, size), 1<<20)
	var big []byte
	pos := int64(0)
	// skip is where the search for a whole chunk after damage starts: past
	// a damaged chunk whose header checked out (its length is known, and
	// a record's payload cannot pass for a chunk), else the next byte.
	skip := int64(1)
	fail := func(err error) ScanResult {
		if !errors.Is(err, ErrCorrupt) {
			err = fmt.Errorf("%w: %v", ErrCorrupt, err)
		}
		ce := &CorruptError{Path: path, Pos: pos, Torn: true, Err: err}
		if next, ok := chunkAfter(r, pos+skip, size); ok {
			ce.Torn, ce.NextValid = false, next
		}
		res.End, res.Err = pos, ce
		return res
	}
	for pos < size {
		skip = 1
		if size-pos < HeaderSize {
			return fail(ErrShort)
		}
		head, err := br.Peek(HeaderSize)
		if err != nil {
			return fail(fmt.Errorf("%w: %v", ErrShort, err))
		}
		kind, err := kindOf(head)
		if err != nil {
			return fail(err)
		}
		if kind == KindSeal {
			t, err := ParseTrailer(head)
			switch {
			case err != nil:
				return fail(err)
			case t.DataLen != uint64(pos) || t.Chunks != uint64(len(res.Chunks)) || t.CRC != res.CRC:
				return fail(fmt.Errorf("%w: trailer says %d chunks in %d bytes, crc32c %08x; the file has %d in %d, %08x",
					ErrCorrupt, t.Chunks, t.DataLen, t.CRC, len(res.Chunks), pos, res.CRC))
			case pos+HeaderSize != size:
				return fail(fmt.Errorf("%w: %d bytes after the seal trailer", ErrCorrupt, size-pos-HeaderSize))
			}
			res.End, res.Sealed = pos, &t
			return res
		}
		h, err := ParseHeader(head)
		if err != nil {
			return fail(err)
		}
		if pos+h.Size() > size {
			skip = size - pos // a torn tail: nothing whole can follow
			return fail(fmt.Errorf("%w: chunk of %d bytes runs past the end of the file (%d)", ErrShort, h.Size(), size))
		}
		skip = h.Size()
		var c []byte
		if h.Size() <= int64(br.Size()) {
			c, err = br.Peek(int(h.Size()))
		} else {
			if cap(big) < int(h.Size()) {
				big = make([]byte, h.Size())
			}
			c = big[:h.Size()]
			_, err = io.ReadFull(br, c)
		}
		if err != nil {
			return fail(fmt.Errorf("%w: %v", ErrShort, err))
		}
		if _, _, err := DecodeChunk(c); err != nil {
			return fail(err)
		}
		res.Chunks = append(res.Chunks, Chunk{Ref: Ref{File: no, Pos: pos}, Header: h})
		res.CRC = crc32.Update(res.CRC, castagnoli, c)
		if h.Size() <= int64(br.Size()) {
			br.Discard(int(h.Size()))
		}
		pos += h.Size()
	}
	res.End = pos
	return res
}

// chunkAfter looks from byte pos on, past damage, for a whole chunk (header and
// records check out) or a valid trailer: proof that the damage lies inside
// the file rather than at a torn tail (a cut write, zeros, or bytes that
// continue nothing).
func chunkAfter(r io.ReaderAt, pos, end int64) (int64, bool) {
	const window = 1 << 20
	buf := make([]byte, min(window+HeaderSize, max(0, end-pos)))
	for start := pos; start+HeaderSize <= end; start += window {
		n, _ := r.ReadAt(buf[:min(int64(len(buf)), end-start)], start)
		for i := 0; i+HeaderSize <= n; i++ {
			if buf[i] != Magic {
				continue
			}
			kind, err := kindOf(buf[i:n])
			if err != nil {
				continue
			}
			at := start + int64(i)
			if kind == KindSeal {
				if t, err := ParseTrailer(buf[i:n]); err == nil && t.DataLen == uint64(at) && at+HeaderSize == end {
					return at, true
				}
				continue
			}
			h, err := ParseHeader(buf[i:n])
			if err != nil || at+h.Size() > end {
				continue
			}
			c := make([]byte, h.Size())
			if _, err := r.ReadAt(c, at); err != nil {
				continue
			}
			if _, _, err := DecodeChunk(c); err == nil {
				return at, true
			}
		}
	}
	return 0, false
}
