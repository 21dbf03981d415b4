package segment

import (
	"context"
	"encoding/binary"
	"errors"
	"fmt"
	"hash/crc32"
	"math"
	"os"
	"path/filepath"

	"github.com/cockroachdb/pebble/vfs"

	"strata/engine/record"
	"strata/engine/store"
)

// The replication seam (store.Replica, docs/engine.md "Log end and high
// watermark"). A shard's log end (sh.end) is published after each durable
// write; its high watermark (sh.high, what readers see) follows it until the
// first SetHighWatermark, which makes it managed. A managed high watermark is
// kept in the shard's folder, in the file highWatermarkFile: 8 bytes
// big-endian and their CRC-32C. The file's creation is synced (so a managed
// shard never comes back unmanaged); later updates are not (so after a
// machine crash the high watermark may come back lower, never higher, as
// Kafka's checkpointed one does). A damaged file reads as the low
// watermark: nothing above it is shown until the next SetHighWatermark.

const highWatermarkFile = "high-watermark"

// publishEnd publishes a new durable log end; the caller holds sh.mu.
func (sh *shard) publishEnd(end uint64) {
	sh.end = end
	if !sh.managed {
		sh.high = end
	}
}

// LogEnd returns the next offset to be written.
func (e *Engine) LogEnd(ctx context.Context, name string) (uint64, error) {
	sh, err := e.shard(name)
	if err != nil {
		return 0, err
	}
	sh.mu.RLock()
	defer sh.mu.RUnlock()
	return sh.end, nil
}

// SetHighWatermark raises the high watermark and makes it managed.
func (e *Engine) SetHighWatermark(ctx context.Context, name string, hw uint64) error {
	sh, err := e.shard(name)
	if err != nil {
		return err
	}
	sh.hwMu.Lock()
	defer sh.hwMu.Unlock()
	sh.mu.Lock()
	if hw > sh.end {
		end := sh.end
		sh.mu.Unlock()
		return store.HighWatermarkPastLogEndError(name, hw, end)
	}
	if sh.managed && hw <= sh.high && sh.hwSaved {
		sh.mu.Unlock()
		return nil
	}
	// Shown before it is saved: the records below it are durable already,
	// and a lost save only brings it back lower.
	sh.high, sh.managed = max(sh.high, hw), true
	hw = sh.high
	sh.mu.Unlock()
	if err := saveHighWatermark(e.cfg.FS, sh.dir, hw, !sh.hwSaved); err != nil {
		return fmt.Errorf("shard %s: saving the high watermark: %w", name, err)
	}
	sh.hwSaved = true
	return nil
}

func saveHighWatermark(fs vfs.FS, dir string, hw uint64, sync bool) error {
	var buf [12]byte
	binary.BigEndian.PutUint64(buf[:8], hw)
	binary.BigEndian.PutUint32(buf[8:], crc32.Checksum(buf[:8], castagnoli))
	f, err := fs.OpenReadWrite(filepath.Join(dir, highWatermarkFile)) // created if missing
	if err != nil {
		return err
	}
	if _, err := f.WriteAt(buf[:], 0); err != nil {
		f.Close()
		return err
	}
	if sync {
		if err := f.Sync(); err != nil {
			f.Close()
			return err
		}
	}
	if err := f.Close(); err != nil {
		return err
	}
	if sync {
		return syncDir(fs, dir)
	}
	return nil
}

// loadHighWatermark reads a recovering shard's managed high watermark, if
// it has one, after its log end is known.
func (e *Engine) loadHighWatermark(sh *shard) error {
	b, err := readFile(e.cfg.FS, filepath.Join(sh.dir, highWatermarkFile))
	if errors.Is(err, os.ErrNotExist) {
		return nil
	}
	if err != nil {
		return fmt.Errorf("shard %s: reading the high watermark: %w", sh.name, err)
	}
	sh.managed, sh.hwSaved = true, true
	if len(b) != 12 || crc32.Checksum(b[:8], castagnoli) != binary.BigEndian.Uint32(b[8:]) {
		e.log.Warn("the high watermark file is damaged: showing nothing above the low watermark until the next SetHighWatermark",
			"shard", sh.name, "low", sh.low)
		sh.high = sh.low
		return nil
	}
	hw := binary.BigEndian.Uint64(b)
	if hw > sh.end {
		// Records below the high watermark were acknowledged: a log that
		// ends before it lost some, whatever the synced mark says (a mark
		// not yet written, a file cut by the disk). The copy is damaged
		// from its end on, so replication refills it from the leader and
		// the controller does not elect it (docs/replication.md).
		var seg uint64
		if n := len(sh.segments); n > 0 {
			seg = sh.segments[n-1].no
		}
		e.noteDamage(sh, &LocalDamage{Segment: seg, From: sh.end,
			Cause: fmt.Errorf("the saved high watermark %d is past the recovered log end %d: acknowledged records are missing", hw, sh.end)})
		e.stats.Damaged.Add(1)
		e.log.Error("the saved high watermark is past the recovered log end: the copy lost acknowledged records and is marked damaged",
			"shard", sh.name, "high_watermark", hw, "log_end", sh.end)
	}
	sh.high = max(min(hw, sh.end), sh.low)
	return nil
}

// ReadToLogEnd reads as Read does, up to the log end instead of the high
// watermark.
func (e *Engine) ReadToLogEnd(ctx context.Context, name string, offset uint64, b store.Budget) ([]record.Record, error) {
	v, err := e.view(name)
	if err != nil {
		return nil, err
	}
	v.high = v.end
	if offset < v.low || offset > v.high {
		return nil, &store.OutOfRangeError{Shard: name, Offset: offset, Low: v.low, High: v.high}
	}
	return e.scan(ctx, v, offset, b)
}

// TruncateTo cuts the log so that it ends at end, durably. Only the active
// segment is cut: a cut inside a sealed segment is refused (a follower's
// unreplicated suffix is normally within its active segment; a sealed
// segment may already be tiered).
func (e *Engine) TruncateTo(ctx context.Context, name string, end uint64) error {
	return e.ask(ctx, name, request{truncateTo: &end})
}

// anyGen marks a limit that no truncation can shorten (a sealed segment's).
const anyGen uint64 = math.MaxUint64

// readable shortens a reader's limit taken before a truncation of the
// file, which may now be shorter: the caller holds s.mu. What such a reader
// may show lies below the high watermark, which no truncation goes under.
func (s *segment) readable(limit int64, gen uint64) int64 {
	if gen != anyGen && gen != s.gen {
		return min(limit, s.keep)
	}
	return limit
}

// segmentOf names the local segment holding offset, for errors.
func (sh *shard) segmentOf(offset uint64) uint64 {
	for i := len(sh.segments) - 1; i >= 0; i-- {
		if sh.segments[i].start <= offset {
			return sh.segments[i].no
		}
	}
	return 0
}

// SegmentStarts is the first offset of each local segment, oldest first: a
// follower rolls where its leader's segments start (RollAt).
func (e *Engine) SegmentStarts(ctx context.Context, name string) ([]uint64, error) {
	v, err := e.view(name)
	if err != nil {
		return nil, err
	}
	starts := make([]uint64, len(v.segments))
	for i, s := range v.segments {
		starts[i] = s.start
	}
	return starts, nil
}

// startTruncate decides a truncation of sh to offset end, both models',
// under sh's hwMu and epochMu: refused below the high watermark or inside
// a sealed segment; with nothing past end, only the leader epochs past it
// go (cut is false). Otherwise the epochs are cut and the caller cuts the
// active segment's records at end.
func (e *Engine) startTruncate(sh *shard, end uint64) (cut bool, err error) {
	s := sh.active()
	switch {
	case end < sh.high:
		return false, store.TruncateCommittedError(sh.name, end, sh.high)
	case end >= s.next:
		return false, e.cutEpochs(sh, end)
	case end < s.start:
		return false, fmt.Errorf("shard %s: truncate to offset %d refused: it falls in sealed segment %d (the active segment %d starts at offset %d): %w",
			sh.name, end, sh.segmentOf(end), s.no, s.start, store.ErrSealedSegment)
	}
	if err := e.cutEpochs(sh, end); err != nil {
		return false, err
	}
	return true, nil
}
