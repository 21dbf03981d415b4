package main

import (
	"context"
	"log/slog"
	"path/filepath"
	"strings"
	"time"

	"strata/icetable"
	"strata/tiering/objstore"
)

// icebergTables is what commits each tiering run's objects to the topics'
// Iceberg tables, or nil when iceberg.enabled is off (docs/iceberg.md).
func icebergTables(ctx context.Context, cfg *Config, cold objstore.Bucket, log *slog.Logger) (*icetable.Tables, error) {
	if !cfg.Iceberg.Enabled {
		return nil, nil
	}
	t := &icetable.Tables{Bucket: cold, Prefix: cfg.Tiering.Prefix, Location: icebergLocation(cfg), Log: log.With("component", "iceberg"),
		MaxSnapshotAge: time.Duration(cfg.Iceberg.SnapshotMaxAge), MinSnapshots: cfg.Iceberg.SnapshotMinKeep,
		MaintainEvery: time.Duration(cfg.Iceberg.MaintenanceInterval),
		OrphanGrace:   time.Duration(cfg.Tiering.OrphanGrace), FileDeleteDelay: time.Duration(cfg.Iceberg.FileDeleteDelay)}
	if t.FileDeleteDelay == 0 {
		t.FileDeleteDelay = -1 // at once
	}
	switch cfg.Iceberg.Catalog {
	case "":
	case "hadoop":
		t.Hadoop = true
	default:
		if err := t.OpenCatalog(ctx, cfg.Iceberg.Catalog, cfg.Iceberg.CatalogName, cfg.Iceberg.REST.Namespace); err != nil {
			return nil, err
		}
	}
	return t, nil
}

// icebergLocation is the URI readers open the cold tier's root by: the
// data files and metadata of the tables are named under it.
func icebergLocation(cfg *Config) string {
	if cfg.Iceberg.Location != "" {
		return strings.TrimSuffix(cfg.Iceberg.Location, "/")
	}
	c := cfg.Cold
	switch c.Backend {
	case "s3":
		if c.S3.Prefix != "" {
			return "s3://" + c.S3.Bucket + "/" + strings.Trim(c.S3.Prefix, "/")
		}
		return "s3://" + c.S3.Bucket
	case "hdfs":
		nn := ""
		if len(c.HDFS.NameNodes) > 0 {
			nn = c.HDFS.NameNodes[0]
		}
		return "hdfs://" + nn + strings.TrimSuffix(c.HDFS.Root, "/")
	}
	dir, err := filepath.Abs(c.Local.Dir)
	if err != nil {
		return c.Local.Dir
	}
	return dir
}
