package main

import (
	"context"
	"log/slog"
	"time"

	"github.com/prometheus/client_golang/prometheus"

	"strata/catalog"
	"strata/engine/segment"
	"strata/parquet"
	"strata/tiering"
	"strata/tiering/objstore"
)

// startTiering wires the cold reader into the engine and, when enabled,
// schedules the tiering job.
func startTiering(ctx context.Context, cfg *Config, e *segment.Engine, cat catalog.Catalog, cold objstore.Bucket, reg prometheus.Registerer, log *slog.Logger) (*tiering.Job, error) {
	t := cfg.Tiering
	reader := tiering.NewColdReader(cat, cold, int64(t.CacheBytes))
	e.SetColdSource(reader)
	job := &tiering.Job{
		Engine: e, Catalog: cat, Bucket: cold, Prefix: t.Prefix,
		Policy: tiering.Policy{
			MinSealedAge:    time.Duration(t.MinSealedAge),
			LocalRetention:  time.Duration(t.LocalRetention),
			RemoteRetention: time.Duration(t.RemoteRetention),
			LocalBytes:      int64(t.LocalBytes),
		},
		Parquet:        parquet.Options{Codec: t.Codec, RowGroupBytes: int(t.RowGroupBytes), PageBytes: int(t.PageBytes)},
		Concurrency:    t.Concurrency,
		BytesPerSecond: int64(t.Bandwidth),
		OrphanGrace:    time.Duration(t.OrphanGrace),
		Log:            log.With("component", "tiering"),
	}
	if t.Enabled {
		job.Policy.RetentionMaxAge, job.Policy.RetentionMaxBytes = time.Duration(cfg.Retention.MaxAge), int64(cfg.Retention.MaxBytes)
	}
	reg.MustRegister(newTierCollector(e, cat, reader, job))
	if t.Enabled {
		if _, err := scheduleTiering(ctx, job, t.Schedule, log.With("component", "tiering")); err != nil {
			return nil, err
		}
		log.Info("tiering scheduled", "schedule", t.Schedule, "min_sealed_age", time.Duration(t.MinSealedAge),
			"local_retention", time.Duration(t.LocalRetention))
	}
	return job, nil
}
