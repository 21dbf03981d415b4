package segment

import (
	"bufio"
	"errors"
	"fmt"
	"hash/crc32"
	"io"

	"strata/engine/integrity"
	"strata/engine/record"
)

// CorruptError is damage found in a segment file: where, which offset was
// expected there, and whether it is a torn tail (the damaged record runs to
// the end of the file: a write cut short) or lies inside the file. It
// unwraps to record.ErrCorrupt.
type CorruptError struct {
	Path   string
	Pos    int64   // byte position of the damaged record
	Offset *uint64 // the offset expected there, when known
	Torn   bool
	Err    error
}

func (e *CorruptError) Error() string {
	where := fmt.Sprintf("%s at byte %d", e.Path, e.Pos)
	if e.Offset != nil {
		where += fmt.Sprintf(" (offset %d)", *e.Offset)
	}
	kind := "damaged record"
	if e.Torn {
		kind = "torn tail"
	}
	return fmt.Sprintf("%s: %s: %v", where, kind, e.Err)
}

func (e *CorruptError) Unwrap() error { return e.Err }

// Is makes it answer integrity.IsCorruption, whatever it wraps.
func (e *CorruptError) Is(target error) bool { return target == integrity.ErrCorruption }

// Scanner reads a segment file's records one after another, from byte
// from up to size, in the memory of one record (nothing holds the file
// whole), checking each record's length and CRC and, given the first
// expected offset, that offsets follow each other. It is the one loop
// over a segment's records that recovery, reindexing, verification, dumps
// and tiering's conversion share.
type Scanner struct {
	path string
	br   *bufio.Reader
	pos  int64 // byte position of the next record
	end  int64
	next *uint64
	crc  uint32

	rec     record.Record
	recPos  int64
	recSize int
	err     error

	// views: a record's bytes are valid until the next call of Next only
	// (Views); big holds a record larger than the read buffer.
	views bool
	big   []byte
	// gaps: offsets only increase, below gapsEnd (a cleaned segment).
	gaps    bool
	gapsEnd uint64
}

// Gaps makes the scanner take a cleaned segment's offsets, which have gaps:
// each one after the expected offset (the first, then the one after the
// last) and below end, the segment's end, is taken.
func (s *Scanner) Gaps(end uint64) { s.gaps, s.gapsEnd = true, end }

// Views makes the records Next returns views of the scanner's buffer,
// valid until the next call of Next: a caller that copies what it keeps
// (the tiering conversion) saves a copy and an allocation per record.
func (s *Scanner) Views() { s.views = true }

// NewScanner scans r (a segment file named path, for errors) from byte
// from to byte size; next, when not nil, is the offset the first record
// must carry.
func NewScanner(path string, r io.ReaderAt, from, size int64, next *uint64) *Scanner {
	return &Scanner{path: path, br: bufio.NewReaderSize(io.NewSectionReader(r, from, size-from), 1<<20),
		pos: from, end: size, next: next}
}

// Next reads the next record; false at the end of the file or at damage
// (Err says which).
func (s *Scanner) Next() bool {
	if s.err != nil || s.pos >= s.end {
		return false
	}
	head, err := s.br.Peek(record.HeaderSize)
	if err != nil {
		return s.fail(record.ErrShort, true)
	}
	off, n, err := record.Peek(head)
	if err != nil {
		return s.fail(err, s.pos+record.HeaderSize >= s.end)
	}
	if s.pos+int64(n) > s.end {
		return s.fail(record.ErrShort, true)
	}
	var buf []byte
	switch {
	case !s.views:
		buf = make([]byte, n) // each record owns its memory: callers keep them
		if _, err := io.ReadFull(s.br, buf); err != nil {
			return s.fail(fmt.Errorf("%w: %v", record.ErrShort, err), true)
		}
	case n <= s.br.Size():
		// A view of the read buffer: no copy, no allocation.
		if buf, err = s.br.Peek(n); err != nil {
			return s.fail(fmt.Errorf("%w: %v", record.ErrShort, err), true)
		}
		s.br.Discard(n)
	default:
		if cap(s.big) < n {
			s.big = make([]byte, n)
		}
		buf = s.big[:n]
		if _, err := io.ReadFull(s.br, buf); err != nil {
			return s.fail(fmt.Errorf("%w: %v", record.ErrShort, err), true)
		}
	}
	r, _, err := record.Decode(buf)
	switch {
	case err != nil || s.next == nil:
	case s.gaps && (off < *s.next || off >= s.gapsEnd):
		err = fmt.Errorf("%w: offset %d where one from %d to %d was expected", record.ErrCorrupt, off, *s.next, s.gapsEnd-1)
	case !s.gaps && off != *s.next:
		err = fmt.Errorf("%w: offset %d where %d was expected", record.ErrCorrupt, off, *s.next)
	}
	if err != nil {
		return s.fail(err, s.pos+int64(n) >= s.end)
	}
	s.rec, s.recPos, s.recSize = r, s.pos, n
	s.crc = crc32.Update(s.crc, castagnoli, buf)
	s.pos += int64(n)
	following := off + 1
	s.next = &following
	return true
}

func (s *Scanner) fail(err error, torn bool) bool {
	if !errors.Is(err, record.ErrCorrupt) {
		err = fmt.Errorf("%w: %v", record.ErrCorrupt, err)
	}
	var expected *uint64
	if s.next != nil {
		v := *s.next
		expected = &v
	}
	s.err = &CorruptError{Path: s.path, Pos: s.pos, Offset: expected, Torn: torn, Err: err}
	return false
}

// Record is the record Next read, its byte position and size.
func (s *Scanner) Record() (*record.Record, int64, int) { return &s.rec, s.recPos, s.recSize }

// Err is nil after a clean end; a *CorruptError otherwise.
func (s *Scanner) Err() error { return s.err }

// Pos is the end of the last whole record: where a torn file is cut.
func (s *Scanner) Pos() int64 { return s.pos }

// CRC is the CRC-32C of the whole records read, from the start position.
func (s *Scanner) CRC() uint32 { return s.crc }

// checkBudget bounds the bytes validRecordAfter checks as candidates.
const checkBudget = 256 << 20

// validRecordAfter looks past damage at byte pos, up to end, for a whole
// record (length and CRC intact) carrying an offset above expected, and
// returns its position, or -1. It only tells an operator where the log
// may go on: it proves nothing (a record's value may hold a valid-looking
// record), so recovery decides by the synced mark, not by this. Bytes
// crafted to look like many large records would make each look costly
// (a CRC of up to 64 MiB), so it gives up after checkBudget bytes of them.
func validRecordAfter(r io.ReaderAt, pos, end int64, expected uint64) int64 {
	const chunk = 1 << 20
	buf := make([]byte, chunk+record.HeaderSize)
	var rec []byte
	checked := 0
	for start := pos + 1; start+record.HeaderSize <= end && checked < checkBudget; start += chunk {
		n, _ := r.ReadAt(buf[:min(int64(len(buf)), end-start)], start)
		for i := 0; i+record.HeaderSize <= n; i++ {
			off, size, err := record.Peek(buf[i:n])
			if err != nil || off <= expected || off > expected+1<<20 || start+int64(i)+int64(size) > end {
				continue
			}
			if checked += size; checked > checkBudget {
				return -1
			}
			if cap(rec) < size {
				rec = make([]byte, size)
			}
			if _, err := r.ReadAt(rec[:size], start+int64(i)); err != nil {
				continue
			}
			if _, _, err := record.Check(rec[:size]); err == nil {
				return start + int64(i)
			}
		}
	}
	return -1
}
