// Package tiering moves sealed segments to the cold tier as Parquet and
// reads them back: the planner (pure) picks what is due, the job converts,
// uploads, verifies and commits, and the cold reader serves old offsets
// through the engine's read path. docs/tiering.md has the whole picture.
package tiering

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"path"
	"slices"
	"strconv"
	"strings"

	"strata/engine/store"
	"strata/tiering/objstore"
)

// Location is where a shard's objects live in the bucket, laid out for
// Hive-style partition discovery by Spark, Hive and DuckDB.
type Location struct {
	Topic     string
	Partition int32
}

// LocationOf splits a "{topic}-{partition}" shard name.
func LocationOf(shard string) (Location, error) {
	tp, ok := store.ParseShard(shard)
	if !ok {
		return Location{}, fmt.Errorf("shard %q is not named {topic}-{partition}, so it has no place in the bucket layout", shard)
	}
	return Location{Topic: tp.Topic, Partition: tp.Partition}, nil
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
	return l.Dir(prefix) + "/" + manifestName
}

const manifestName = "_strata_manifest.json"

// ForgetShard returns the engine's listener for deleted shards: it removes
// everything under the shard's folder in the bucket, its objects and its
// manifest, so neither an analyst nor `strata catalog rebuild` sees a
// deleted topic again.
func ForgetShard(b objstore.Bucket, prefix string, log *slog.Logger) func(context.Context, string) error {
	return func(ctx context.Context, shard string) error {
		loc, err := LocationOf(shard)
		if err != nil {
			return nil // not in the bucket layout: nothing was tiered
		}
		var keys []string
		if err := b.List(ctx, loc.Dir(prefix)+"/", func(a objstore.Attrs) error {
			keys = append(keys, a.Name)
			return nil
		}); err != nil {
			return fmt.Errorf("listing %s: %w", loc.Dir(prefix), err)
		}
		for _, k := range keys {
			if err := b.Delete(ctx, k); err != nil && !errors.Is(err, objstore.ErrNotFound) {
				return fmt.Errorf("deleting %s: %w", k, err)
			}
		}
		if len(keys) > 0 {
			log.Info("a deleted shard's cold objects removed", "shard", shard, "objects", len(keys))
		}
		return forgetTopicFolder(ctx, b, path.Dir(loc.Dir(prefix)), log)
	}
}

// forgetTopicFolder removes what is left in a topic's folder once it holds
// no partition's: its Iceberg table (_iceberg/), which a topic made again
// under the name must not inherit, whether or not iceberg.enabled is on
// now. Kept, its delete files named the new topic's objects, which share
// the old ones' keys, and DuckDB applied them; and a table left by a topic
// deleted with the tables off refused the new topic's objects.
func forgetTopicFolder(ctx context.Context, b objstore.Bucket, dir string, log *slog.Logger) error {
	var left []string
	partitions := false
	if err := b.List(ctx, dir+"/", func(a objstore.Attrs) error {
		if strings.HasPrefix(strings.TrimPrefix(a.Name, dir+"/"), "partition=") {
			partitions = true
		}
		left = append(left, a.Name)
		return nil
	}); err != nil {
		return fmt.Errorf("listing %s: %w", dir, err)
	}
	if partitions || len(left) == 0 {
		return nil
	}
	// The table's pointer first, then its metadata files, newest first: a
	// crash midway leaves no pointer naming a file that is gone (which
	// would fail the table's load, and so this deletion's retries, for
	// good), and a Hadoop-style table's highest version left is whole.
	rank := func(k string) int {
		switch {
		case path.Base(k) == "version-hint.text":
			return 0
		case strings.HasSuffix(k, ".metadata.json"):
			return 1
		}
		return 2
	}
	slices.SortStableFunc(left, func(a, b string) int {
		if ra, rb := rank(a), rank(b); ra != rb {
			return ra - rb
		}
		if rank(a) == 1 {
			return metadataOrder(b, a)
		}
		return 0
	})
	for _, k := range left {
		if err := b.Delete(ctx, k); err != nil && !errors.Is(err, objstore.ErrNotFound) {
			return fmt.Errorf("deleting %s: %w", k, err)
		}
	}
	log.Info("a deleted topic's table removed from the bucket", "folder", dir, "files", len(left))
	return nil
}

// metadataOrder orders metadata file names by version: "v10" after "v9",
// "00010-{uuid}" after "00009-{uuid}".
func metadataOrder(a, b string) int {
	version := func(k string) int {
		n := strings.TrimPrefix(path.Base(k), "v")
		n, _, _ = strings.Cut(n, "-")
		v, _ := strconv.Atoi(strings.TrimSuffix(n, ".metadata.json"))
		return v
	}
	return version(a) - version(b)
}
