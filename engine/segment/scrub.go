package segment

import (
	"context"
	"errors"
	"fmt"
	"hash/crc32"
	"io"
	"os"
)

// Checksum returns the CRC-32C and length of a local segment as far as it
// is durable, for two replicas to compare.
func (e *Engine) Checksum(ctx context.Context, name string, no uint64) (crc uint32, size int64, err error) {
	v, err := e.view(name)
	if err != nil {
		return 0, 0, err
	}
	return v.files.checksum(e, v, no)
}

// fileCRC is the CRC-32C of the first n bytes of a file, read as a stream.
func fileCRC(path string, n int64) (uint32, error) {
	f, err := os.Open(path)
	if err != nil {
		return 0, err
	}
	defer f.Close()
	h := crc32.New(castagnoli)
	if got, err := io.Copy(h, io.LimitReader(f, n)); err != nil || got != n {
		return 0, fmt.Errorf("read %s: %d of %d bytes: %v", path, got, n, err)
	}
	return h.Sum32(), nil
}

// Scrub verifies every sealed local segment of a shard against the checksum
// the manifest recorded when it was sealed. Recovery trusts sealed segments;
// this is how their bytes are checked. Damage found is kept (Damage), for
// replication to refill the copy from its leader.
func (e *Engine) Scrub(ctx context.Context, name string) error {
	sh, err := e.shard(name)
	if err != nil {
		return err
	}
	err = e.scrub(ctx, sh, name)
	var bad *scrubbed
	if errors.As(err, &bad) {
		e.noteDamage(sh, &LocalDamage{Segment: bad.no, From: bad.start, Cause: bad.err})
		return bad.err
	}
	return err
}

// stillSealedLocal reports whether the manifest still holds segment no of
// shard name as a local sealed segment.
func (e *Engine) stillSealedLocal(name string, no, generation uint64) bool {
	segs, err := loadSegments(e.manifest, name)
	if err != nil {
		return true // unknown: a missing file is damage until shown otherwise
	}
	for _, c := range segs {
		if c.No == no {
			// A cleaning replaced the file since the list was read: its
			// new generation is the next scrub's.
			return c.State == SegmentSealed && c.Cleaned == generation
		}
	}
	return false
}

// scrubbed is a segment a scrub found damaged.
type scrubbed struct {
	no, start uint64
	err       error
}

func (s *scrubbed) Error() string { return s.err.Error() }

func (e *Engine) scrub(ctx context.Context, sh *shard, name string) error {
	segs, err := loadSegments(e.manifest, name)
	if err != nil {
		return err
	}
	for _, c := range segs {
		if c.State != SegmentSealed {
			continue
		}
		if err := sh.files.scrubSegment(e, sh, c); err != nil {
			return err
		}
	}
	return nil
}
