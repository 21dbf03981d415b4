package tiering

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"strings"
	"time"

	"strata/catalog"
	"strata/engine/segment"
	"strata/engine/store"
	"strata/tiering/objstore"
)

// RebuildSummary says what Rebuild restored.
type RebuildSummary struct {
	Shards   []string `json:"shards"`
	Segments int      `json:"segments"`
	Skipped  []string `json:"skipped,omitempty"` // already in the catalog
	// Empty are shards whose manifest lists no object (retention took
	// every one): nothing of them is left to restore.
	Empty []string `json:"empty,omitempty"`
}

// Rebuild restores, in the catalog and in the engine, every shard that has
// a manifest under prefix in the bucket and that they do not hold: its
// tiered segments as remote, a new empty active segment after them, and
// the low watermark at its first tiered offset. Shards both already hold
// are left alone.
func Rebuild(ctx context.Context, b objstore.Bucket, prefix string, cat catalog.Catalog, e *segment.Engine, now time.Time) (RebuildSummary, error) {
	var sum RebuildSummary
	var manifests []string
	listPrefix := ""
	if prefix != "" {
		listPrefix = strings.TrimSuffix(prefix, "/") + "/"
	}
	err := b.List(ctx, listPrefix, func(a objstore.Attrs) error {
		if strings.HasSuffix(a.Name, "/_strata_manifest.json") {
			manifests = append(manifests, a.Name)
		}
		return nil
	})
	if err != nil {
		return sum, err
	}
	for _, key := range manifests {
		raw, err := objstore.ReadAll(ctx, b, key)
		if err != nil {
			return sum, err
		}
		var m Manifest
		if err := json.Unmarshal(raw, &m); err != nil || m.Shard == "" {
			return sum, fmt.Errorf("manifest %s: not a strata manifest (%v)", key, err)
		}
		if len(m.Objects) == 0 {
			sum.Empty = append(sum.Empty, m.Shard)
			continue
		}
		segs := make([]catalog.Segment, 0, len(m.Objects)+1)
		for i, o := range m.Objects {
			if i > 0 && o.StartOffset != m.Objects[i-1].EndOffset+1 {
				return sum, fmt.Errorf("manifest %s: object %s starts at %d, after %d: offsets are not contiguous",
					key, o.Key, o.StartOffset, m.Objects[i-1].EndOffset)
			}
			segs = append(segs, catalog.Segment{
				Shard: m.Shard, No: o.Segment, State: catalog.Remote, StartOffset: o.StartOffset, EndOffset: o.EndOffset,
				MinTimestamp: o.MinTimestamp, MaxTimestamp: o.MaxTimestamp, Records: o.Records, Size: o.SegmentBytes,
				Checksum: o.SegmentChecksum, ObjectKey: o.Key, ObjectSize: o.ObjectBytes, TieredAt: now.UTC(), Created: now.UTC(),
			})
		}
		last := m.Objects[len(m.Objects)-1]
		segs = append(segs, catalog.Segment{Shard: m.Shard, No: last.Segment + 1, State: catalog.Active,
			StartOffset: last.EndOffset + 1, Created: now.UTC()})
		// The log start as the last run saw it: records below it were
		// deleted, though the first object still holds them.
		low := min(max(m.Objects[0].StartOffset, m.LogStart), last.EndOffset+1)
		sh := catalog.Shard{Name: m.Shard, LowWatermark: low, Created: now.UTC()}
		err = cat.Restore(sh, segs)
		had := errors.Is(err, catalog.ErrExists)
		if err != nil && !had {
			return sum, err
		}
		// The engine's copy, after the catalog's: the event its restore
		// sends then finds the catalog agreeing.
		local := make([]segment.SegmentMeta, len(segs))
		for i, s := range segs {
			local[i] = segment.SegmentMeta{Shard: s.Shard, No: s.No, State: segment.SegmentRemote, StartOffset: s.StartOffset,
				EndOffset: s.EndOffset, MinTimestamp: s.MinTimestamp, MaxTimestamp: s.MaxTimestamp, Records: s.Records,
				Size: s.Size, Checksum: s.Checksum, Created: s.Created, SealedAt: s.TieredAt}
		}
		local[len(local)-1].State = segment.SegmentActive
		err = e.Restore(segment.ShardMeta{Name: sh.Name, Created: sh.Created, LowWatermark: sh.LowWatermark}, local)
		if errors.Is(err, store.ErrShardExists) {
			if had {
				sum.Skipped = append(sum.Skipped, m.Shard)
				continue
			}
		} else if err != nil {
			return sum, err
		}
		sum.Shards = append(sum.Shards, m.Shard)
		sum.Segments += len(m.Objects)
	}
	return sum, nil
}
