// Package tiering moves sealed segments to the cold tier as Parquet and
// reads them back: the planner (pure) picks what is due, the job converts,
// uploads, verifies and commits, and the cold reader serves old offsets
// through the engine's read path. docs/tiering.md has the whole picture.
package tiering

import (
	"fmt"
	"path"
	"strconv"
	"strings"

	"strata/engine/store"
)

// Location is where a shard's objects live in the bucket, laid out for
// Hive-style partition discovery by Spark, Hive and DuckDB.
type Location struct {
	Topic     string
	Partition int32
}

// LocationOf splits a "{topic}-{partition}" shard name.
func LocationOf(shard string) (Location, error) {
	topic := store.Topic(shard)
	p, err := strconv.ParseInt(strings.TrimPrefix(shard, topic+"-"), 10, 32)
	if err != nil || topic == shard {
		return Location{}, fmt.Errorf("shard %q is not named {topic}-{partition}, so it has no place in the bucket layout", shard)
	}
	return Location{Topic: topic, Partition: int32(p)}, nil
}

// Dir is the shard's folder in the bucket.
func (l Location) Dir(prefix string) string {
	return path.Join(prefix, "topic="+l.Topic, "partition="+strconv.Itoa(int(l.Partition)))
}

// ObjectKey names a segment's Parquet object deterministically, so a
// retried upload replaces the same object instead of leaving a second one.
func (l Location) ObjectKey(prefix string, start, end uint64) string {
	return fmt.Sprintf("%s/%020d-%020d.parquet", l.Dir(prefix), start, end)
}

// ManifestKey is the shard's manifest; the leading underscore makes Spark,
// Hive and DuckDB skip it.
func (l Location) ManifestKey(prefix string) string {
	return l.Dir(prefix) + "/_strata_manifest.json"
}
