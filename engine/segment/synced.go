package segment

import (
	"encoding/binary"
	"errors"
	"fmt"

	"github.com/cockroachdb/pebble"

	"strata/engine/index"
)

// The synced mark of a file-per-partition shard is how far its active
// segment was on disk at its last fsync: recovery tells a torn tail (bytes
// written after the last fsync, nothing of it acknowledged under
// fsync=batch) from damage to bytes that were on disk (docs/engine.md,
// "Recovery"). Nothing in a segment's bytes can tell the two apart: a
// record's value may hold any bytes, a valid-looking record among them,
// and after a power cut the pages of the last write reach the disk in any
// order, so whole records can follow torn ones.
//
// The mark lives in the index database, one key per shard:
//
//	'y' shard 0x00 -> created (unix ns) i64 | segment no u64 | position i64
//
// It is set in a batch committed after the fsync it follows, so it never
// says more than was synced; it may say less (a commit not yet on disk at
// a power cut, an index rebuilt or lost), which only widens the span
// recovery treats as a torn tail. created tells incarnations of a shard's
// name apart, and a mark of another segment than the active one counts
// as 0.
const kindSynced = 'y'

func syncedKey(shard string) []byte { return index.Prefix(kindSynced, shard) }

// appendSynced appends to b the key of sh's synced mark, then the value
// of a mark at byte pos of segment no, and returns it with the key's length.
func appendSynced(b []byte, sh *shard, no uint64, pos int64) ([]byte, int) {
	b = append(b, syncedKey(sh.name)...)
	k := len(b)
	b = binary.BigEndian.AppendUint64(b, uint64(sh.created.UnixNano()))
	b = binary.BigEndian.AppendUint64(b, no)
	return binary.BigEndian.AppendUint64(b, uint64(pos)), k
}

// setSynced records in b that the shard's active segment is on disk up to
// pos; the caller commits b only once that is true, then sets the
// segment's synced to pos (before a failed commit it would claim the mark
// lowered, and a retry would skip lowering it).
func (sh *shard) setSynced(b *pebble.Batch, pos int64) {
	s := sh.active()
	kv, k := appendSynced(nil, sh, s.no, pos)
	b.Set(kv[:k], kv[k:], nil)
}

// markSynced records the synced marks of the file-per-partition shards
// whose active segment was just fsynced whole (a failed shard's file is
// not known to be on disk, and a damaged one's length is not the file's).
// It runs after every worker batch under fsync=batch: one buffer for all
// (the batch copies what it is given).
func markSynced(b *pebble.Batch, shards map[*shard]bool) {
	var kv []byte
	for sh := range shards {
		if s := sh.active(); !sh.shared && sh.failed == nil && s.synced != s.size {
			s.synced = s.size
			var k int
			kv, k = appendSynced(kv[:0], sh, s.no, s.size)
			b.Set(kv[:k], kv[k:], nil)
		}
	}
}

// loadSynced reads the synced mark of segment no of sh: 0 when there is
// none (never synced, a shard of the name before this one, an earlier
// segment, the index rebuilt).
func (e *Engine) loadSynced(sh *shard, no uint64) (int64, error) {
	v, closer, err := e.index.Get(syncedKey(sh.name))
	if errors.Is(err, pebble.ErrNotFound) {
		return 0, nil
	}
	if err != nil {
		return 0, fmt.Errorf("shard %s: reading the synced mark: %w", sh.name, err)
	}
	defer closer.Close()
	if len(v) != 24 {
		e.log.Warn("ignoring a synced mark of the wrong size", "shard", sh.name, "bytes", len(v))
		return 0, nil
	}
	created, seg, pos := int64(binary.BigEndian.Uint64(v)), binary.BigEndian.Uint64(v[8:]), int64(binary.BigEndian.Uint64(v[16:]))
	if created != sh.created.UnixNano() || seg != no || pos < 0 {
		return 0, nil
	}
	return pos, nil
}

// commitSynced commits the synced marks of shards just fsynced outside a
// worker batch (the interval policy's tick); unsynced, as the index is.
func (w *worker) commitSynced(shards map[*shard]bool) {
	if len(shards) == 0 {
		return
	}
	b := w.e.index.NewBatch()
	defer b.Close()
	markSynced(b, shards)
	if err := b.Commit(pebble.NoSync); err != nil {
		w.e.log.Warn("recording synced marks failed; recovery treats more of a damaged tail as torn", "err", err)
	}
}
