package segment

import (
	"errors"
	"fmt"
	"hash/crc32"
	"os"
	"path/filepath"
	"sync"
	"sync/atomic"
	"syscall"
	"time"

	"github.com/cockroachdb/pebble/vfs"
	"github.com/edsrzf/mmap-go"

	"strata/engine/record"
)

// The write side of the engine goes through Config.FS, a Pebble vfs.FS, so
// tests can record the order of file operations and inject failures
// (errorfs); see "Faults through a filesystem" in docs/engine.md. The read
// side (the mmap view, the recovery scanner, the offline tools) reads the
// OS files at the same paths: mmap-go needs an *os.File, and a crash is
// about what was written and synced, not how it is read back. So Config.FS
// must be backed by the OS files (vfs.Default or a wrapper of it).

// createSegmentFile creates a new segment file. A new segment never reuses
// a file: bytes left by an earlier shard of the same name must not become
// this one's records. vfs.FS has no exclusive create (its Create replaces
// an existing file), so an existing file is refused after a Stat; only the
// process holding the data folder's LOCK writes there, so nothing can
// create the file in between.
func createSegmentFile(fs vfs.FS, path string) (vfs.File, error) {
	if _, err := fs.Stat(path); err == nil {
		return nil, &os.PathError{Op: "create", Path: path, Err: os.ErrExist}
	} else if !errors.Is(err, os.ErrNotExist) {
		return nil, err
	}
	return fs.Create(path)
}

// truncateFile cuts f to size bytes. vfs.File (Pebble v1.1) has no
// Truncate: a file that has one is asked (vfs.Default's files embed an
// *os.File, and a test's recording wrapper logs it), else the descriptor
// is truncated with ftruncate(2), bypassing the wrappers in between.
func truncateFile(f vfs.File, size int64) error {
	if t, ok := f.(interface{ Truncate(int64) error }); ok {
		return t.Truncate(size)
	}
	fd := f.Fd()
	if fd == vfs.InvalidFd {
		return fmt.Errorf("truncate: the file (%T) has neither a Truncate method nor a descriptor", f)
	}
	return syscall.Ftruncate(int(fd), size)
}

// syncDir fsyncs a directory, so the names created, renamed or removed in
// it last through a crash.
func syncDir(fs vfs.FS, dir string) error {
	d, err := fs.OpenDir(dir)
	if err != nil {
		return err
	}
	if err := d.Sync(); err != nil {
		d.Close()
		return err
	}
	return d.Close()
}

var castagnoli = crc32.MakeTable(crc32.Castagnoli)

// segment is one file of a shard. Readers use the mmap view; only the
// shard's I/O worker touches the write side and the running statistics.
type segment struct {
	no       uint64
	start    uint64 // first offset
	path     string
	created  time.Time
	sealedAt time.Time
	// cleaned is how many cleanings rewrote the segment (its file's
	// generation, clean.go); firstCleaned when the first did.
	cleaned      uint64
	firstCleaned time.Time

	// Read side: a read-only mapping, re-made when the file has grown.
	mu sync.RWMutex
	rf *os.File
	mm *mapping
	// pf is the file opened for point lookups' preads (read.go,
	// scanWindow), on the first; noPread: none is to be opened (the read
	// side is closed, the segment retired, or the open failed), and
	// lookups walk the mapping.
	pf      *os.File
	noPread bool
	// verified: the sealed file's bytes matched its checksum once, so
	// reads skip the per-record CRC (verifySealed).
	verified, verifying atomic.Bool
	mismatch            atomic.Bool // the check found other bytes than the checksum's
	// gen counts the truncations of this (active) segment's file and keep
	// is the length the last one left (replica.go); changed under mu and
	// the shard's lock.
	gen  uint64
	keep int64
	// populated is the mapping size whose resident pages were last
	// populated (populateLater); under mu.
	populated int64

	// firstFile and lastFile bound the shared files a shared shard's
	// segment has chunks in (0: none yet); read by the file sweep.
	firstFile, lastFile atomic.Uint64

	// Write side, owned by the worker (nil once sealed; always nil for a
	// shared shard, whose size and crc count its record bytes).
	wf     vfs.File
	size   int64 // bytes written
	synced int64 // the synced mark last set (synced.go)
	// marked: the shard's mark file names this segment, written before
	// its first byte (synced.go), so recovery can tell a mark lost from
	// one never written.
	marked  bool
	next    uint64 // offset after the last record
	crc     uint32 // CRC-32C of the whole file so far
	count   uint64
	minTS   int64
	maxTS   int64
	firstAt time.Time // wall time of the first append, for max age
	sealed  bool

	// points: the in-memory offset index of the records written since the
	// engine opened (points.go).
	points memPoints
}

func segmentPath(dir string, no uint64) string {
	return filepath.Join(dir, fmt.Sprintf("%d.msg", no))
}

// track updates the running statistics with one appended record.
func (s *segment) track(r *record.Record) {
	if s.count == 0 || r.Timestamp < s.minTS {
		s.minTS = r.Timestamp
	}
	if s.count == 0 || r.Timestamp > s.maxTS {
		s.maxTS = r.Timestamp
	}
	s.count++
}

// mapping is one read-only mmap of a segment file. Reads that hand out
// records aliasing it (Engine.ReadView) hold a reference, and so does the
// segment while the mapping is its current one: the mapping is unmapped
// when the last reference goes, never under a reader's feet (a segment
// deleted by retention or tiering, or re-mapped as it grew, while a fetch
// still encodes its records).
type mapping struct {
	mm   mmap.MMap
	refs atomic.Int64
	// filled: the page tables of the pages cached when it was made are
	// filled in (populateLater), or it is too small to need it: a point
	// lookup walks it then (read.go, scanWindow), with no fault.
	filled atomic.Bool
}

// liveMappings counts mappings not yet unmapped (tests check that the
// last release unmaps).
var liveMappings atomic.Int64

func newMapping(mm mmap.MMap) *mapping {
	m := &mapping{mm: mm}
	m.refs.Store(1) // the segment's
	liveMappings.Add(1)
	return m
}

func (m *mapping) acquire() { m.refs.Add(1) }

// release drops one reference; the last one unmaps.
func (m *mapping) release() {
	if n := m.refs.Add(-1); n == 0 {
		m.mm.Unmap()
		m.mm = nil
		liveMappings.Add(-1)
	} else if n < 0 {
		panic("segment mapping released more often than acquired")
	}
}

// dropMapLocked lets go of the segment's reference to its mapping; the
// caller holds s.mu.
func (s *segment) dropMapLocked() {
	if s.mm != nil {
		s.mm.release()
		s.mm = nil
	}
}

// mapped is the length of the current mapping.
func (s *segment) mapped() int64 {
	if s.mm == nil {
		return 0
	}
	return int64(len(s.mm.mm))
}

// view returns the first n bytes of the file, mapping or re-mapping it as
// needed; n was read in a view of truncation generation gen, and is cut
// to what a later truncation kept (segment.readable). The caller must hold
// s.mu.RLock until done with the bytes (or a reference to s.mm); view
// takes the write lock itself when it has to re-map, so a truncation may
// come in between: the length is checked again after.
func (s *segment) view(limit int64, gen uint64) ([]byte, error) {
	for try := 0; ; try++ {
		n := s.readable(limit, gen)
		if n == 0 {
			return nil, nil
		}
		if s.mapped() >= n {
			return s.mm.mm[:n], nil
		}
		if try == 3 {
			return nil, fmt.Errorf("segment %s: mapped %d bytes, need %d", s.path, s.mapped(), n)
		}
		s.mu.RUnlock()
		s.mu.Lock()
		err := s.remapLocked(s.readable(limit, gen))
		s.mu.Unlock()
		s.mu.RLock()
		if err != nil {
			return nil, err
		}
	}
}

func (s *segment) remapLocked(n int64) error {
	if s.mapped() >= n {
		return nil
	}
	s.dropMapLocked()
	if s.rf == nil {
		f, err := os.Open(s.path)
		if err != nil {
			return fmt.Errorf("segment %s: %w", s.path, err)
		}
		s.rf = f
	}
	mm, err := mmap.Map(s.rf, mmap.RDONLY, 0)
	// The mapping outlives the descriptor: holding no fd per segment lets a
	// deleted segment's mapping linger for late readers at no cost in fds.
	s.rf.Close()
	s.rf = nil
	if err != nil {
		return fmt.Errorf("segment %s: mmap: %w", s.path, err)
	}
	s.mm = newMapping(mm)
	s.populateLater()
	return nil
}

// populateMin is the smallest mapping whose resident pages are populated:
// below it a lookup's faults are few.
const populateMin = 4 << 20

// populateLater fills the page tables of the new mapping's resident pages
// in the background (populateResident), when the mapping is at least
// twice the size last populated: an active segment re-mapped at every
// growth is populated a logarithmic number of times, for work in all
// about twice its size. The caller holds s.mu.
func (s *segment) populateLater() {
	n := int64(len(s.mm.mm))
	if n < populateMin {
		s.mm.filled.Store(true)
		return
	}
	if n < 2*s.populated {
		return
	}
	s.populated = n
	m := s.mm
	// The populate holds the mapping as a read does: it is unmapped when
	// the populate ends, also after the engine closed.
	m.acquire()
	go func() {
		defer m.release()
		if populateResident(m.mm) {
			m.filled.Store(true)
		}
	}()
}

// verifyLater checks a sealed segment's bytes against the checksum its
// writer (or recovery) computed over the whole file, once, in the
// background: a match stands for every record's CRC, and later reads
// decode without checking each one (record.DecodeVerified). Until then,
// and for good after a mismatch, reads check every record, so the read
// that meets a bad one names it. data is the whole file, in s.mm; the
// caller holds s.mu.RLock.
func (s *segment) verifyLater(data []byte, sum uint32) {
	if !s.verifying.CompareAndSwap(false, true) {
		return
	}
	m := s.mm
	m.acquire()
	go func() {
		defer m.release()
		if crc32.Checksum(data, castagnoli) == sum {
			s.verified.Store(true)
		} else {
			s.mismatch.Store(true)
		}
	}()
}

// closeRead drops the segment's hold on its mapping (unmapped now, or when
// the last read holding records in it lets go) and its read handle.
func (s *segment) closeRead() {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.dropMapLocked()
	if s.rf != nil {
		s.rf.Close()
		s.rf = nil
	}
	s.closePreadLocked()
}

// closePreadLocked gives the pread file back (its count in preadFiles
// with it) and opens none again. The caller holds s.mu.
func (s *segment) closePreadLocked() {
	if s.pf != nil {
		s.pf.Close()
		s.pf = nil
		preadFiles.Add(-1)
	}
	s.noPread = true
}

// retire unmaps deleted segments once no read can still be using them.
func (e *Engine) retire(s *segment) {
	e.points.drop(s)
	// Its pread file now, not with the read side a minute on: until
	// then it holds a descriptor (counted against maxPreadFiles) and the
	// unlinked file's disk space; lookups in flight walk the mapping.
	s.mu.Lock()
	s.closePreadLocked()
	s.mu.Unlock()
	e.retiredMu.Lock()
	defer e.retiredMu.Unlock()
	now := time.Now()
	kept := e.retired[:0]
	for _, r := range e.retired {
		if now.Sub(r.at) > time.Minute {
			r.s.closeRead()
		} else {
			kept = append(kept, r)
		}
	}
	e.retired = append(kept, retiredSegment{s, now})
}

type retiredSegment struct {
	s  *segment
	at time.Time
}
