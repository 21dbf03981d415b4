package segment

import (
	"context"

	"github.com/cockroachdb/pebble"

	"strata/engine/record"
	"strata/engine/store"
)

// fileModel is where a shard's records live on disk (strata.file.model,
// docs/engine.md): in segment files of its own (partitionFiles) or as
// chunks in the shared files (sharedFiles, shared.go). Everything above
// the bytes is the same for both: the manifest's segments, rolled and
// sealed by the same gates, the watermarks, the time, key and tag index
// entries, the events. A shard's model is fixed when it is made.
//
// The worker calls the write side (append through repair) on the shard's
// worker goroutine; the read side (scan, scanSegment, checksum,
// scrubSegment) runs on any goroutine, from a view or under the shard's
// lock as each says.
type fileModel interface {
	// meta fills in the model's part of the shard's manifest entry.
	meta(m *ShardMeta)
	// openActive makes the in-memory active segment seg, opening its file
	// (a new one when fresh) if the model has one; the caller syncs the
	// shard's folder (created) before anything in it is acknowledged.
	openActive(e *Engine, sh *shard, seg SegmentMeta, fresh bool) (*segment, error)
	// created makes a new shard's first segment durable in its folder.
	created(e *Engine, sh *shard) error

	// append writes an append request of the shard (records carrying
	// their offsets when at), adding its index entries to ib.
	append(w *worker, sh *shard, recs []record.Record, at bool, ib *pebble.Batch) (uint64, error)
	// written is told, at the end of a worker batch, that the shard was
	// appended to in it: under fsync=batch it makes the shard's writes
	// durable and writes the shard's synced mark, or fails the shard.
	written(w *worker, sh *shard)
	// tick fsyncs what the interval policy left unsynced and reports
	// whether the shard's synced mark is to be recorded.
	tick(w *worker, sh *shard) (synced bool)
	// roll seals the active segment and starts the next one.
	roll(w *worker, sh *shard) error
	// truncate cuts the log so that it ends at offset end (TruncateTo).
	truncate(w *worker, sh *shard, end uint64) error
	// repair lets a shard refused for damage take writes again (Repair).
	repair(w *worker, sh *shard) error

	// dropSegment lets go of the bytes of a segment that left the
	// manifest's local segments (retention, DropLocal).
	dropSegment(e *Engine, sh *shard, s *segment) error
	// deleted frees what a deleted shard leaves (DeleteShard), after its
	// folder, index entries and manifest are gone.
	deleted(e *Engine)

	// scan appends to o the records of view v from offset on, offset
	// lying in local segment i, as Read does.
	scan(ctx context.Context, e *Engine, v view, i int, offset uint64, b store.Budget, o *readOut) error
	// scanSegment streams a local segment's records below end to fn and
	// returns the CRC-32C and length of their bytes: the segment's
	// checksum, in either model.
	scanSegment(e *Engine, sh *shard, s *segment, end uint64, fn func(*record.Record) error) (uint32, int64, error)
	// checksum is Checksum: a local segment's CRC-32C and length as far
	// as it is durable.
	checksum(e *Engine, v view, no uint64) (uint32, int64, error)
	// scrubSegment checks sealed segment c against its seal (Scrub).
	scrubSegment(e *Engine, sh *shard, c SegmentMeta) error
}

// modelOf is the file model a shard's manifest entry names.
func modelOf(cs ShardMeta) fileModel {
	if cs.Model == ModelShared {
		return &sharedFiles{id: cs.ID, from: cs.FromFile}
	}
	return partitionFiles{}
}
