package main

import (
	"log/slog"
	"time"

	"github.com/prometheus/client_golang/prometheus"

	"strata/engine"
	"strata/engine/segment"
	"strata/tiering"
	"strata/tiering/objstore"
)

// openStorage opens the storage adapter the config describes.
func openStorage(cfg *Config, cold objstore.Bucket, log *slog.Logger) (*engine.Adapter, error) {
	topicMax := map[string]int64{}
	for topic, v := range cfg.Segment.TopicMaxBytes {
		topicMax[topic] = int64(v)
	}
	return engine.Open(engine.Config{
		Default:          cfg.Engine.Default,
		Topics:           cfg.Engine.Topics,
		MemoryMaxRecords: cfg.Engine.MemoryMaxRecords,
		Segment: segment.Config{
			Dir:                  cfg.DataDir,
			Workers:              cfg.Engine.IOWorkers,
			Fsync:                segment.FsyncPolicy(cfg.Engine.Fsync),
			FsyncInterval:        time.Duration(cfg.Engine.FsyncInterval),
			IndexInterval:        cfg.Engine.IndexInterval,
			MaxSegmentBytes:      int64(cfg.Segment.MaxBytes),
			TopicMaxSegmentBytes: topicMax,
			RollCheckInterval:    uint64(cfg.Segment.RollCheckInterval),
			MaxSegmentAge:        time.Duration(cfg.Segment.MaxAge),
			Logger:               log.With("component", "engine"),
			Events: segment.EventListener{
				ShardDeleted: tiering.ForgetShard(cold, cfg.Tiering.Prefix, log.With("component", "tiering")),
			},
		},
	})
}

// engineCollector exports the segment engine's counters.
type engineCollector struct {
	e                                       *segment.Engine
	batches, fsyncs, records, byts, damaged *prometheus.Desc
}

func newEngineCollector(e *segment.Engine) *engineCollector {
	d := func(name, help string) *prometheus.Desc { return prometheus.NewDesc(name, help, nil, nil) }
	return &engineCollector{e: e,
		batches: d("strata_engine_batches_total", "I/O worker batches that appended records."),
		fsyncs:  d("strata_engine_fsyncs_total", "Segment file fsyncs by I/O workers."),
		records: d("strata_engine_appended_records_total", "Records appended to segment files."),
		byts:    d("strata_engine_appended_bytes_total", "Bytes appended to segment files."),
		damaged: d("strata_engine_damaged_shards", "Shards found at start with damage inside their active segment: they serve reads and refuse writes until repaired."),
	}
}

func (c *engineCollector) Describe(ch chan<- *prometheus.Desc) {
	ch <- c.batches
	ch <- c.fsyncs
	ch <- c.records
	ch <- c.byts
	ch <- c.damaged
}

func (c *engineCollector) Collect(ch chan<- prometheus.Metric) {
	s := c.e.Stats()
	ch <- prometheus.MustNewConstMetric(c.batches, prometheus.CounterValue, float64(s.Batches.Load()))
	ch <- prometheus.MustNewConstMetric(c.fsyncs, prometheus.CounterValue, float64(s.Fsyncs.Load()))
	ch <- prometheus.MustNewConstMetric(c.records, prometheus.CounterValue, float64(s.Records.Load()))
	ch <- prometheus.MustNewConstMetric(c.byts, prometheus.CounterValue, float64(s.Bytes.Load()))
	ch <- prometheus.MustNewConstMetric(c.damaged, prometheus.GaugeValue, float64(s.Damaged.Load()))
}
