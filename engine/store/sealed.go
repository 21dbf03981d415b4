package store

import (
	"context"
	"time"
)

// SealedSegment is one of a shard's local sealed segments: its number,
// first and last offset, the CRC-32C kept while it was written (the file
// read back may differ: a replica compares that one) and when it sealed.
type SealedSegment struct {
	No          uint64
	Start, Last uint64
	CRC         uint32
	SealedAt    time.Time
}

// SealedLister is an engine whose logs are segment files, listing a shard's
// local sealed segments: replication derives from them which seals are
// still to be agreed on, so none depends on an event remembered in memory
// (docs/replication.md, "Seal agreement"). The segment engine and the
// adapter implement it.
type SealedLister interface {
	// SealedSegments lists the shard's sealed segments that are local,
	// oldest first; the active segment and tiered ones are not among them.
	SealedSegments(ctx context.Context, shard string) ([]SealedSegment, error)
}

// TieredLister is an engine that keeps offsets readable after their
// segment files left local disk (tiered): a follower that copies them
// rolls where their segments started, so its copies are the segments the
// cluster sealed. The segment engine and the adapter implement it.
type TieredLister interface {
	// TieredStarts is the first offset of each of the shard's segments
	// that are readable but no longer local, oldest first.
	TieredStarts(ctx context.Context, shard string) ([]uint64, error)
}
