package main

import (
	"errors"
	"fmt"
	"log/slog"
	"os"
	"path/filepath"

	"strata/catalog"
	"strata/engine/segment"
	"strata/engine/store"
)

// adoptedMarker, in the data folder, says its catalog's shards are all in
// the engine's manifest. A folder from before the manifest has none, and
// neither has one whose adoption a crash or an error cut short: the next
// start adopts what is still missing.
const adoptedMarker = "ADOPTED"

func adopted(dataDir string) bool {
	_, err := os.Stat(filepath.Join(dataDir, adoptedMarker))
	return err == nil
}

func markAdopted(dataDir string) error {
	f, err := os.Create(filepath.Join(dataDir, adoptedMarker))
	if err != nil {
		return err
	}
	if err := f.Sync(); err != nil {
		f.Close()
		return err
	}
	if err := f.Close(); err != nil {
		return err
	}
	d, err := os.Open(dataDir)
	if err != nil {
		return err
	}
	defer d.Close()
	return d.Sync()
}

// adoptCatalog gives a data folder from before the engine kept its own
// manifest one, from the catalog that then recorded every segment: each
// shard the catalog has and the engine does not, with its segments' files
// where they are. Segments the catalog says are deleted are left out.
func adoptCatalog(cat catalog.Catalog, e *segment.Engine, log *slog.Logger) error {
	shards, err := cat.Shards()
	if err != nil {
		return err
	}
	for _, sh := range shards {
		segs, err := cat.Segments(sh.Name)
		if err != nil {
			return err
		}
		var metas []segment.SegmentMeta
		for _, s := range segs {
			m := segment.SegmentMeta{Shard: s.Shard, No: s.No, StartOffset: s.StartOffset, EndOffset: s.EndOffset,
				MinTimestamp: s.MinTimestamp, MaxTimestamp: s.MaxTimestamp, Records: s.Records, Size: s.Size,
				Checksum: s.Checksum, Created: s.Created, SealedAt: s.SealedAt}
			switch s.State {
			case catalog.Deleted:
				continue
			case catalog.Active:
				m.State = segment.SegmentActive
			case catalog.Remote:
				m.State = segment.SegmentRemote
			default: // sealed, uploading, cold: the file is local
				m.State = segment.SegmentSealed
			}
			metas = append(metas, m)
		}
		err = e.Restore(segment.ShardMeta{Name: sh.Name, Created: sh.Created, LowWatermark: sh.LowWatermark}, metas)
		if errors.Is(err, store.ErrShardExists) {
			continue
		}
		if err != nil {
			return fmt.Errorf("adopting shard %s from the catalog: %w", sh.Name, err)
		}
		log.Info("shard adopted from the catalog into the engine's manifest", "shard", sh.Name, "segments", len(metas))
	}
	return nil
}
