package main

import (
	"cmp"
	"strata/icetable"

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

// newTiering wires the cold reader into the engine and makes the tiering
// job; scheduleTiering starts it, once the job has what the cluster gives it.
func newTiering(cfg *Config, e *segment.Engine, cat catalog.Catalog, cold objstore.Bucket, tables *icetable.Tables, topics *topicView, reg prometheus.Registerer, log *slog.Logger) *tiering.Job {
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
			Merging:         tiering.MergePolicy{MinAge: time.Duration(t.MergeMinAge), MinObjects: t.MergeMinObjects},
		},
		Parquet:        parquet.Options{Codec: t.Codec, RowGroupBytes: int(t.RowGroupBytes), PageBytes: int(t.PageBytes)},
		Concurrency:    t.Concurrency,
		BytesPerSecond: int64(t.Bandwidth),
		OrphanGrace:    time.Duration(t.OrphanGrace),
		RetiredGrace:   cmp.Or(time.Duration(t.RetiredGrace), -1), // 0s: none
		Log:            log.With("component", "tiering"),
	}
	if tables != nil { // not a nil *Tables in the interface
		job.Tables = tables
	}
	reader.Heal = job.Reconcile
	if t.Enabled {
		job.Policy.RetentionMaxAge, job.Policy.RetentionMaxBytes = time.Duration(cfg.Retention.MaxAge), int64(cfg.Retention.MaxBytes)
	}
	if topics != nil { // each topic's configs over the broker's (docs/config.md, "Topic configs")
		job.PolicyFor, job.ParquetFor = topics.tieringPolicy(job.Policy), topics.parquet(job.Parquet, job.Log)
		job.TypedErr = topics.typedErr
	}
	reg.MustRegister(newTierCollector(e, cat, reader, job))
	return job
}

// startTiering schedules the job, when tiering is enabled. In a cluster the
// job first gets the node's claims (claims non-nil): the bucket is shared,
// and nodes holding copies of one segment must not tier it twice.
func startTiering(ctx context.Context, cfg *Config, job *tiering.Job, claims tiering.Claims, log *slog.Logger) error {
	job.Claims = claims
	t := cfg.Tiering
	if !t.Enabled {
		return nil
	}
	if _, err := scheduleTiering(ctx, job, t.Schedule, log.With("component", "tiering")); err != nil {
		return err
	}
	log.Info("tiering scheduled", "schedule", t.Schedule, "min_sealed_age", time.Duration(t.MinSealedAge),
		"local_retention", time.Duration(t.LocalRetention), "claims", claims != nil)
	return nil
}
