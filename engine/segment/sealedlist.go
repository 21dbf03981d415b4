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
