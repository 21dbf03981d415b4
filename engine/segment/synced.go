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
//	'y' shard 0x00 -> created (unix ns) i64 | segment no u64 | position i64 | next offset u64
//
// (a mark of 24 bytes, from before the next offset was kept, has none).
// It is set in a batch committed after the fsync it follows, so it never
// says more than was synced, and under fsync=batch that commit is synced
// before the appends are answered: Pebble keeps an unsynced commit in its
// log's buffer until a block of it fills, so a process killed even long
// after its last append lost every unsynced mark, and recovery took the
// acknowledged records a later fault cut off for a torn tail (issue #24).
// It may still say less (an index rebuilt or lost), which only widens the
// span recovery treats as a torn tail. created tells incarnations of a
// shard's name apart, and a mark of another segment than the active one
// counts as 0.
const kindSynced = 'y'

func syncedKey(shard string) []byte { return index.Prefix(kindSynced, shard) }

// syncedMark is a decoded mark.
type syncedMark struct {
	created int64
	seg     uint64
	pos     int64
	next    uint64 // the offset after the records before pos
	hasNext bool   // a mark of 24 bytes has no next offset
}

func decodeSynced(v []byte) (syncedMark, bool) {
	if len(v) != 24 && len(v) != 32 {
		return syncedMark{}, false
	}
	m := syncedMark{created: int64(binary.BigEndian.Uint64(v)), seg: binary.BigEndian.Uint64(v[8:]), pos: int64(binary.BigEndian.Uint64(v[16:]))}
	if len(v) == 32 {
		m.next, m.hasNext = binary.BigEndian.Uint64(v[24:]), true
	}
	return m, m.pos >= 0
}

// appendSynced appends to b the key of sh's synced mark, then the value
// of a mark at byte pos of segment no, before offset next, and returns it
// with the key's length.
func appendSynced(b []byte, sh *shard, no uint64, pos int64, next uint64) ([]byte, int) {
	b = append(b, syncedKey(sh.name)...)
	k := len(b)
	b = binary.BigEndian.AppendUint64(b, uint64(sh.created.UnixNano()))
	b = binary.BigEndian.AppendUint64(b, no)
	b = binary.BigEndian.AppendUint64(b, uint64(pos))
	return binary.BigEndian.AppendUint64(b, next), k
}

// setSynced records in b that the shard's active segment is on disk up to
// pos, where offset next begins; the caller commits b only once that is
// true, then sets the segment's synced to pos (before a failed commit it
// would claim the mark lowered, and a retry would skip lowering it).
func (sh *shard) setSynced(b *pebble.Batch, pos int64, next uint64) {
	s := sh.active()
	kv, k := appendSynced(nil, sh, s.no, pos, next)
	b.Set(kv[:k], kv[k:], nil)
}

// markSynced records in b the synced mark of a file-per-partition shard
// whose active segment was just fsynced whole (a failed shard's file is
// not known to be on disk, and a damaged one's length is not the file's),
// and reports whether it did. It runs after every worker batch under
// fsync=batch.
func markSynced(b *pebble.Batch, sh *shard) bool {
	s := sh.active()
	if sh.failed != nil || s.synced == s.size {
		return false
	}
	s.synced = s.size
	kv, k := appendSynced(nil, sh, s.no, s.size, s.next)
	b.Set(kv[:k], kv[k:], nil)
	return true
}

// loadSynced reads the synced mark of segment no of sh: 0 when there is
// none (never synced, a shard of the name before this one, an earlier
// segment, the index rebuilt).
func (e *Engine) loadSynced(sh *shard, no uint64) (syncedMark, error) {
	v, closer, err := e.index.Get(syncedKey(sh.name))
	if errors.Is(err, pebble.ErrNotFound) {
		return syncedMark{}, nil
	}
	if err != nil {
		return syncedMark{}, fmt.Errorf("shard %s: reading the synced mark: %w", sh.name, err)
	}
	defer closer.Close()
	m, ok := decodeSynced(v)
	if !ok {
		e.log.Warn("ignoring a synced mark of the wrong size", "shard", sh.name, "bytes", len(v))
		return syncedMark{}, nil
	}
	if m.created != sh.created.UnixNano() || m.seg != no {
		return syncedMark{}, nil
	}
	return m, nil
}

// commitSynced commits the synced marks of shards just fsynced outside a
// worker batch (the interval policy's tick), synced for the reason the
// worker's are: once per tick, not per append.
func (w *worker) commitSynced(shards []*shard) {
	b := w.e.index.NewBatch()
	defer b.Close()
	marked := false
	for _, sh := range shards {
		marked = markSynced(b, sh) || marked
	}
	if !marked {
		return
	}
	if err := b.Commit(pebble.Sync); err != nil {
		w.e.log.Warn("recording synced marks failed; recovery treats more of a damaged tail as torn", "err", err)
	}
}

// The shared files' synced marks are the same promise for a shared file:
// how far it was on disk at its writer's last synced commit, one key per
// file, set in the batch of the commit's chunk entries, which is
// committed synced before the commit's appends are answered
// (fsync=batch). sharedfile.Open takes a file that ends before its mark
// for damage, not a torn tail (docs/engine.md, "Recovery").
//
//	'Y' file no u64 -> position i64
const kindSharedSynced = 'Y'

func sharedSyncedKey(no uint64) []byte {
	return binary.BigEndian.AppendUint64([]byte{kindSharedSynced}, no)
}

// setSharedSynced records in b that shared file no is on disk up to pos.
func setSharedSynced(b *pebble.Batch, no uint64, pos int64) {
	b.Set(sharedSyncedKey(no), binary.BigEndian.AppendUint64(nil, uint64(pos)), nil)
}

// sharedSyncedTo is shared file no's mark, 0 if none (never synced under
// fsync=batch, the index lost).
func (e *Engine) sharedSyncedTo(no uint64) int64 {
	v, closer, err := e.index.Get(sharedSyncedKey(no))
	if err != nil {
		if !errors.Is(err, pebble.ErrNotFound) {
			e.log.Warn("reading a shared file's synced mark; taking it as unknown", "file", no, "err", err)
		}
		return 0
	}
	defer closer.Close()
	if len(v) != 8 {
		return 0
	}
	return int64(binary.BigEndian.Uint64(v))
}
