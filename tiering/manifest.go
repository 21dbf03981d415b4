package tiering

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"sort"

	"strata/tiering/objstore"
)

// Manifest lists a shard's committed objects, beside them in the bucket, so
// the catalog can be rebuilt from the bucket alone (docs/tiering.md).
type Manifest struct {
	Version   int             `json:"version"`
	Shard     string          `json:"shard"`
	Topic     string          `json:"topic"`
	Partition int32           `json:"partition"`
	Objects   []ManifestEntry `json:"objects"`
}

// ManifestEntry is one committed segment object.
type ManifestEntry struct {
	Key             string `json:"key"`
	Segment         uint64 `json:"segment"`
	StartOffset     uint64 `json:"start_offset"`
	EndOffset       uint64 `json:"end_offset"`
	MinTimestamp    int64  `json:"min_timestamp"`
	MaxTimestamp    int64  `json:"max_timestamp"`
	Records         uint64 `json:"records"`
	SegmentBytes    int64  `json:"segment_bytes"`
	SegmentChecksum uint32 `json:"segment_crc32c"`
	ObjectBytes     int64  `json:"object_bytes"`
}

func readManifest(ctx context.Context, b objstore.Bucket, key string) (Manifest, error) {
	raw, err := objstore.ReadAll(ctx, b, key)
	if errors.Is(err, objstore.ErrNotFound) {
		return Manifest{Version: 1}, nil
	}
	if err != nil {
		return Manifest{}, err
	}
	var m Manifest
	if err := json.Unmarshal(raw, &m); err != nil {
		return Manifest{}, fmt.Errorf("manifest %s: %w", key, err)
	}
	return m, nil
}

// put adds or replaces the entry for e.Key and keeps entries in offset order.
func (m *Manifest) put(e ManifestEntry) {
	for i := range m.Objects {
		if m.Objects[i].Key == e.Key {
			m.Objects[i] = e
			return
		}
	}
	m.Objects = append(m.Objects, e)
	sort.Slice(m.Objects, func(i, j int) bool { return m.Objects[i].StartOffset < m.Objects[j].StartOffset })
}

func (m *Manifest) remove(key string) {
	for i := range m.Objects {
		if m.Objects[i].Key == key {
			m.Objects = append(m.Objects[:i], m.Objects[i+1:]...)
			return
		}
	}
}

func writeManifest(ctx context.Context, b objstore.Bucket, key string, m Manifest) error {
	raw, err := json.MarshalIndent(m, "", "  ")
	if err != nil {
		return err
	}
	return b.Upload(ctx, key, bytes.NewReader(raw))
}
