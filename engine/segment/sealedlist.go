package segment

import (
	"context"

	"strata/engine/store"
)

// SealedSegments lists the shard's local sealed segments, oldest first
// (store.SealedLister). Every segment of a view but its last is sealed: a
// roll finishes the sealed one's file and checksum before it publishes the
// next.
func (e *Engine) SealedSegments(ctx context.Context, name string) ([]store.SealedSegment, error) {
	v, err := e.view(name)
	if err != nil {
		return nil, err
	}
	if len(v.segments) == 0 {
		return nil, nil
	}
	out := make([]store.SealedSegment, 0, len(v.segments)-1)
	for _, s := range v.segments[:len(v.segments)-1] {
		out = append(out, store.SealedSegment{No: s.no, Start: s.start, Last: s.next - 1, CRC: s.crc, SealedAt: s.sealedAt})
	}
	return out, nil
}

var _ store.SealedLister = (*Engine)(nil)

// TieredStarts is the first offset of each of the shard's tiered segments
// still readable (store.TieredLister), from the manifest: the engine keeps
// no file of them.
func (e *Engine) TieredStarts(ctx context.Context, name string) ([]uint64, error) {
	segs, err := e.Segments(name)
	if err != nil {
		return nil, err
	}
	var out []uint64
	for _, s := range segs {
		if s.State == SegmentRemote {
			out = append(out, s.StartOffset)
		}
	}
	return out, nil
}

var _ store.TieredLister = (*Engine)(nil)
