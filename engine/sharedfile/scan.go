package sharedfile

import (
	"bufio"
	"errors"
	"fmt"
	"hash/crc32"
	"io"

	"strata/engine/integrity"
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
	// Lost: the file ends at Pos, before the bytes up to NextValid that
	// were on disk (Config.SyncedTo), and no whole chunk follows.
	Lost bool
	Err  error

	nextSeq uint64 // the commit record number of the batch at NextValid
}

func (e *CorruptError) Error() string {
	if e.Torn {
		return fmt.Sprintf("%s at byte %d: torn tail: %v", e.Path, e.Pos, e.Err)
	}
	if e.Lost {
		return fmt.Sprintf("%s at byte %d: bytes lost that were on disk up to byte %d: %v", e.Path, e.Pos, e.NextValid, e.Err)
	}
	return fmt.Sprintf("%s at byte %d: damaged chunk, whole chunks follow at byte %d: %v", e.Path, e.Pos, e.NextValid, e.Err)
}

func (e *CorruptError) Unwrap() error { return e.Err }

// Is makes it answer integrity.IsCorruption, whatever it wraps.
func (e *CorruptError) Is(target error) bool { return target == integrity.ErrCorruption }

// ScanResult is what a scan of a whole shared file found.
type ScanResult struct {
	// Chunks are the whole chunks from the start of the file, in order: in
	// a file with commit records, those of committed batches (and, at
	// damage inside, the whole ones of the damaged batch before it).
	Chunks []Chunk
	// End is where the valid data ends: after a clean end, the end of the
	// file or the trailer's position; at a torn tail, where the file is cut
	// (the end of the last committed batch); at damage inside, where the
	// damage starts.
	End int64
	// CRC is the CRC-32C of the bytes before End.
	CRC uint32
	// Sealed is the trailer found at End, if the file ends with one.
	Sealed *Trailer
	// Commits says the file's batches end with commit records (its chunks
	// carry FlagCommits).
	Commits bool
	// Err is nil after a clean end (a trailer, or the end of the file right
	// after a chunk or commit record); a *CorruptError otherwise.
	Err error
	// After damage inside (Err not torn): the whole chunks after it, from
	// the batch that proved it on (past further damage inside too), the
	// end of what checks out there, and every damage inside, in order
	// (Damages[0] is Err).
	After    []Chunk
	AfterEnd int64
	Damages  []*CorruptError

	format int
}

// The format of a file is fixed by its first chunk's flags.
const (
	formatUnknown = iota
	formatLegacy  // no commit records: every whole chunk counts
	formatCommits // batches closed by commit records
)

// Scan reads a shared file (file number no, named path for errors) from
// its start to size, checking every chunk whole (header, records, offsets)
// and every commit record against its batch, in the memory of one chunk.
// It stops at the trailer, at the end, or at the first damage. It is the
// recovery scan: its result says what the file holds and where to cut it.
//
// Damage is told apart by what follows it. Batches are written one at a
// time, each fsynced before the next is written, so only the last write
// can be torn, and power loss may keep any of its pages and lose others:
// whole chunks can follow the damage and prove nothing. A committed batch
// after the damage (its commit record checks out against the whole chunks
// before it) proves the damage lies in synced data: damage inside, kept
// and reported. Without one it is the torn last write: the file is cut at
// the end of the last committed batch (nothing of the torn batch was
// acknowledged: a commit is answered after its write, and its fsync,
// returned). A file without commit records keeps the old rule: any whole
// chunk after the damage makes it damage inside.
//
// After damage inside, the scan goes on from the batch that proved it, as
// far as the data checks out: the chunks there (After) belong to shards
// whose logs may go on past the damage, and every further damage inside
// is listed (Damages).
func Scan(no uint64, path string, r io.ReaderAt, size int64) ScanResult {
	res := scanFrom(no, path, r, size, 0, 0, formatUnknown)
	var ce *CorruptError
	if !errors.As(res.Err, &ce) || ce.Torn {
		return res
	}
	res.Damages = []*CorruptError{ce}
	res.AfterEnd = res.End
	for from, seq := ce.NextValid, ce.nextSeq; ; {
		more := scanFrom(no, path, r, size, from, seq, res.format)
		res.After = append(res.After, more.Chunks...)
		res.AfterEnd = more.End
		var next *CorruptError
		if !errors.As(more.Err, &next) || next.Torn {
			return res
		}
		res.Damages = append(res.Damages, next)
		from, seq = next.NextValid, next.nextSeq
	}
}

// scanFrom is Scan from byte from, where a batch starts: the next commit
// record there is number seq, and the file's format is format.
func scanFrom(no uint64, path string, r io.ReaderAt, size, from int64, seq uint64, format int) ScanResult {
	var res ScanResult
	// Small chunks are the shared model's common case: reading each with
	// its own ReadAt made the scan two syscalls per chunk (~100 MB/s on
	// 100-byte records); a buffered reader makes it a memory scan.
	br := bufio.NewReaderSize(io.NewSectionReader(r, from, size-from), int(min(1<<20, max(size-from, 64))))
	var big []byte
	pos := from
	// skip is where the search for a whole chunk after damage starts: past
	// a damaged chunk whose header checked out (its length is known, and
	// a record's payload cannot pass for a chunk), else the next byte.
	skip := int64(1)
	var (
		batchAt      = from // where the open batch starts
		batchCRC     uint32 // of its bytes so far
		pending      []Chunk
		all          uint32 // CRC-32C of the bytes from from to pos
		committedCRC uint32 // CRC-32C of the bytes from from to batchAt
	)
	fail := func(err error) ScanResult {
		if !errors.Is(err, ErrCorrupt) {
			err = fmt.Errorf("%w: %v", ErrCorrupt, err)
		}
		ce := &CorruptError{Path: path, Pos: pos, Torn: true, Err: err}
		if next, nextSeq, ok := afterDamage(r, pos+skip, size, format, seq); ok {
			ce.Torn, ce.NextValid, ce.nextSeq = false, next, nextSeq
		}
		res.format = format
		res.Commits = format == formatCommits
		if ce.Torn {
			res.End, res.CRC = batchAt, committedCRC
		} else {
			// Synced data: what is whole before the damage was acknowledged.
			res.Chunks = append(res.Chunks, pending...)
			res.End, res.CRC = pos, all
		}
		res.Err = ce
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
		kind, flags, err := kindFlags(head)
		if err != nil {
			return fail(err)
		}
		switch {
		case format == formatUnknown && flags == FlagCommits:
			format = formatCommits
		case format == formatUnknown:
			format = formatLegacy
		case (format == formatCommits) != (flags == FlagCommits):
			return fail(fmt.Errorf("%w: flags %#04x in a file whose first chunk has %#04x", ErrCorrupt, flags, flags^FlagCommits))
		}
		switch kind {
		case KindSeal:
			t, err := ParseTrailer(head)
			switch {
			case err != nil:
				return fail(err)
			case len(pending) > 0:
				return fail(fmt.Errorf("%w: a trailer after %d chunks with no commit record", ErrCorrupt, len(pending)))
			case t.DataLen != uint64(pos) || t.Chunks != uint64(len(res.Chunks)) || t.CRC != all:
				return fail(fmt.Errorf("%w: trailer says %d chunks in %d bytes, crc32c %08x; the file has %d in %d, %08x",
					ErrCorrupt, t.Chunks, t.DataLen, t.CRC, len(res.Chunks), pos, all))
			case pos+HeaderSize != size:
				return fail(fmt.Errorf("%w: %d bytes after the seal trailer", ErrCorrupt, size-pos-HeaderSize))
			}
			res.End, res.CRC, res.Sealed, res.Commits, res.format = pos, all, &t, format == formatCommits, format
			return res
		case KindCommit:
			c, err := ParseCommit(head)
			switch {
			case err != nil:
				return fail(err)
			case c.Seq != seq || c.Length != uint64(pos-batchAt) || c.Chunks != uint32(len(pending)) || c.CRC != batchCRC:
				return fail(fmt.Errorf("%w: commit record %d names %d chunks in %d bytes, crc32c %08x; before it are commit %d's %d chunks in %d bytes, %08x",
					ErrCorrupt, c.Seq, c.Chunks, c.Length, c.CRC, seq, len(pending), pos-batchAt, batchCRC))
			}
			all = crc32.Update(all, castagnoli, head)
			br.Discard(HeaderSize)
			pos += HeaderSize
			res.Chunks = append(res.Chunks, pending...)
			pending = pending[:0]
			batchAt, committedCRC, batchCRC = pos, all, 0
			seq++
			continue
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
		ch := Chunk{Ref: Ref{File: no, Pos: pos}, Header: h}
		all = crc32.Update(all, castagnoli, c)
		if h.Size() <= int64(br.Size()) {
			br.Discard(int(h.Size()))
		}
		pos += h.Size()
		if format == formatLegacy {
			res.Chunks = append(res.Chunks, ch)
			batchAt, committedCRC = pos, all
		} else {
			pending = append(pending, ch)
			batchCRC = crc32.Update(batchCRC, castagnoli, c)
		}
	}
	if len(pending) > 0 {
		return fail(fmt.Errorf("%w: %d chunks from byte %d have no commit record: their batch's write was cut short", ErrShort, len(pending), batchAt))
	}
	res.End, res.CRC, res.Commits, res.format = pos, all, format == formatCommits, format
	return res
}

// afterDamage looks from byte pos on, past damage, for proof that the
// damage lies inside the file rather than at a torn tail: a committed
// batch (a commit record, numbered past seq, whose batch starts at or
// after pos and checks out whole) in a file with commit records; in a
// file without them, a whole chunk or a valid trailer. A torn tail is a
// cut write, zeros, or bytes that continue nothing. It returns where the
// proof starts.
func afterDamage(r io.ReaderAt, pos, end int64, format int, seq uint64) (int64, uint64, bool) {
	const window = 1 << 20
	buf := make([]byte, min(window+HeaderSize, max(0, end-pos)))
	for start := pos; start+HeaderSize <= end; start += window {
		n, _ := r.ReadAt(buf[:min(int64(len(buf)), end-start)], start)
		for i := 0; i+HeaderSize <= n; i++ {
			if buf[i] != Magic {
				continue
			}
			kind, flags, err := kindFlags(buf[i:n])
			if err != nil || (format == formatCommits && flags != FlagCommits) || (format == formatLegacy && flags != 0) {
				continue
			}
			at := start + int64(i)
			switch {
			case kind == KindCommit:
				c, err := ParseCommit(buf[i:n])
				if err == nil && c.Seq > seq && c.Length <= uint64(at-pos) && committed(r, at-int64(c.Length), at, c) {
					return at - int64(c.Length), c.Seq, true
				}
			case flags == FlagCommits:
				// A chunk or trailer of a file with commit records proves
				// nothing alone: the torn write may have kept it.
			case kind == KindSeal:
				if t, err := ParseTrailer(buf[i:n]); err == nil && t.DataLen == uint64(at) && at+HeaderSize == end {
					return at, 0, true
				}
			default:
				h, err := ParseHeader(buf[i:n])
				if err != nil || at+h.Size() > end {
					continue
				}
				b := make([]byte, h.Size())
				if _, err := r.ReadAt(b, at); err != nil {
					continue
				}
				if _, _, err := DecodeChunk(b); err == nil {
					return at, 0, true
				}
			}
		}
	}
	return 0, 0, false
}

// committed says whether the bytes [from, to) are the whole batch that
// commit record c (at to) closes: c.Chunks whole chunks of a file with
// commit records, back to back, with c.CRC.
func committed(r io.ReaderAt, from, to int64, c Commit) bool {
	b := make([]byte, to-from)
	if _, err := r.ReadAt(b, from); err != nil || crc32.Checksum(b, castagnoli) != c.CRC {
		return false
	}
	n := uint32(0)
	for p := int64(0); p < int64(len(b)); n++ {
		h, _, err := DecodeChunk(b[p:])
		if err != nil || h.Flags != FlagCommits {
			return false
		}
		p += h.Size()
	}
	return n == c.Chunks
}
