package segment

import (
	"fmt"
	"hash/crc32"
	"os"
	"path/filepath"
	"sync"
	"time"

	"github.com/edsrzf/mmap-go"

	"strata/engine/record"
)

// File is the write side of a segment file. The engine writes through it so
// tests can inject failed writes and fsyncs (see FS).
type File interface {
	Write(p []byte) (int, error)
	Sync() error
	Truncate(size int64) error
	Close() error
}

// FS opens segment files for writing. The default is the OS; tests wrap it.
type FS interface {
	// OpenAppend opens a segment file for appending: a new one (fresh),
	// which must not exist yet, or one a restart recovers.
	OpenAppend(path string, fresh bool) (File, error)
}

type osFS struct{}

func (osFS) OpenAppend(path string, fresh bool) (File, error) {
	// O_APPEND: after a restart (and a truncation) writes must land at the end.
	flags := os.O_RDWR | os.O_APPEND
	if fresh {
		// A new segment never reuses a file: bytes left by an earlier
		// shard of the same name must not become this one's records.
		flags |= os.O_CREATE | os.O_EXCL
	}
	return os.OpenFile(path, flags, 0o644)
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

	// Read side: a read-only mapping, re-made when the file has grown.
	mu sync.RWMutex
	rf *os.File
	mm mmap.MMap
	// gen counts the truncations of this (active) segment's file and keep
	// is the length the last one left (replica.go); changed under mu and
	// the shard's lock.
	gen  uint64
	keep int64

	// Write side, owned by the worker (nil once sealed).
	wf      File
	size    int64  // bytes written
	next    uint64 // offset after the last record
	crc     uint32 // CRC-32C of the whole file so far
	count   uint64
	minTS   int64
	maxTS   int64
	firstAt time.Time // wall time of the first append, for max age
	sealed  bool
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

// view returns the first n bytes of the file, mapping or re-mapping it as
// needed; n was read in a view of truncation generation gen, and is cut
// to what a later truncation kept (segment.readable). The caller must hold
// s.mu.RLock until done with the bytes; view takes the write lock itself
// when it has to re-map, so a truncation may come in between: the length
// is checked again after.
func (s *segment) view(limit int64, gen uint64) ([]byte, error) {
	for try := 0; ; try++ {
		n := s.readable(limit, gen)
		if n == 0 {
			return nil, nil
		}
		if int64(len(s.mm)) >= n {
			return s.mm[:n], nil
		}
		if try == 3 {
			return nil, fmt.Errorf("segment %s: mapped %d bytes, need %d", s.path, len(s.mm), n)
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
	if int64(len(s.mm)) >= n {
		return nil
	}
	if s.mm != nil {
		if err := s.mm.Unmap(); err != nil {
			return fmt.Errorf("segment %s: unmap: %w", s.path, err)
		}
		s.mm = nil
	}
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
	s.mm = mm
	return nil
}

// closeRead drops the mapping and read handle.
func (s *segment) closeRead() {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.mm != nil {
		s.mm.Unmap()
		s.mm = nil
	}
	if s.rf != nil {
		s.rf.Close()
		s.rf = nil
	}
}
