package main

import (
	"time"

	"github.com/prometheus/client_golang/prometheus"

	"strata/catalog"
	"strata/engine/segment"
	"strata/engine/store"
	"strata/tiering"
)

// tierCollector reports, at each scrape, bytes per tier, how far tiering
// lags, and the cold reader's cache.
type tierCollector struct {
	e    *segment.Engine
	cat  catalog.Catalog
	cold *tiering.ColdReader
	job  *tiering.Job

	bytes, lagSeconds, lagBytes, hits, misses, fetches, fetched, runs, uploads, runErrors, failures, claimsLost, undecoded *prometheus.Desc
	objects, merges, mergedObjects, mergedBytes                                                                            *prometheus.Desc
}

func newTierCollector(e *segment.Engine, cat catalog.Catalog, cold *tiering.ColdReader, job *tiering.Job) *tierCollector {
	d := func(name, help string, labels ...string) *prometheus.Desc {
		return prometheus.NewDesc(name, help, labels, nil)
	}
	return &tierCollector{e: e, cat: cat, cold: cold, job: job,
		bytes:         d("strata_tier_bytes", "Bytes held per tier: hot (active segments), warm (sealed, local), cold (objects).", "tier"),
		lagSeconds:    d("strata_tiering_lag_seconds", "Age since sealing of the oldest sealed segment not yet tiered (0: none)."),
		lagBytes:      d("strata_tiering_lag_bytes", "Bytes of sealed segments not yet tiered."),
		hits:          d("strata_cold_cache_hits_total", "Cold reads served from cached row groups."),
		misses:        d("strata_cold_cache_misses_total", "Cold reads that had to fetch a row group."),
		fetches:       d("strata_cold_fetches_total", "Ranged reads from the cold tier: pages of a point read, runs of row groups of a scan, the ends of an object opened."),
		fetched:       d("strata_cold_fetched_bytes_total", "Bytes fetched from the cold tier by ranged reads."),
		runs:          d("strata_tiering_runs_recent", "Tiering runs in the kept history."),
		uploads:       d("strata_tiering_uploads_recent", "Segments uploaded by the runs in the kept history."),
		runErrors:     d("strata_tiering_errors_recent", "Errors of the runs in the kept history."),
		failures:      d("strata_tiering_failures_total", "Errors of every tiering run since the start, by step (plan, upload, drop_local, expire, sweep, table, reconcile, merge).", "step"),
		undecoded:     d("strata_tiering_undecoded_records_total", "Records uploaded whose value (or key) did not decode into its typed column (docs/typed.md): they keep their bytes, with the reason in the column's _error column. By topic and column (value_typed, key_typed).", "topic", "column"),
		claimsLost:    d("strata_tiering_claims_lost_total", "Segments this node left to the tiering of another node that had claimed them (cluster only; not errors)."),
		objects:       d("strata_cold_objects", "Objects in the cold tier that this node's segments name: what a table scan of them opens."),
		merges:        d("strata_tiering_merges_total", "Merges of small cold objects into one (strata.cold.target_bytes, docs/compaction.md)."),
		mergedObjects: d("strata_tiering_merged_objects_total", "Small cold objects merged into larger ones."),
		mergedBytes:   d("strata_tiering_merged_bytes_total", "Bytes of the objects merges wrote."),
	}
}

func (c *tierCollector) Describe(ch chan<- *prometheus.Desc) {
	for _, d := range []*prometheus.Desc{c.bytes, c.lagSeconds, c.lagBytes, c.hits, c.misses, c.fetches, c.fetched, c.runs, c.uploads, c.runErrors, c.failures, c.claimsLost, c.undecoded, c.objects, c.merges, c.mergedObjects, c.mergedBytes} {
		ch <- d
	}
}

func (c *tierCollector) Collect(ch chan<- prometheus.Metric) {
	var hot, warm, cold, lagBytes, objects int64
	var oldest time.Time
	shards, _ := c.cat.Shards()
	for _, sh := range shards {
		segs, err := c.cat.Segments(sh.Name)
		if err != nil {
			continue
		}
		for _, s := range segs {
			switch s.State {
			case catalog.Active:
				n, _ := c.e.ActiveBytes(sh.Name)
				hot += n
			case catalog.Sealed, catalog.Uploading:
				warm += s.Size
				lagBytes += s.Size
				if oldest.IsZero() || s.SealedAt.Before(oldest) {
					oldest = s.SealedAt
				}
			case catalog.Cold:
				warm += s.Size
				cold += s.ObjectSize
				objects++
			case catalog.Remote:
				cold += s.ObjectSize
				objects++
			}
		}
	}
	lag := 0.0
	if !oldest.IsZero() {
		lag = time.Since(oldest).Seconds()
	}
	g := func(d *prometheus.Desc, v float64, labels ...string) {
		ch <- prometheus.MustNewConstMetric(d, prometheus.GaugeValue, v, labels...)
	}
	k := func(d *prometheus.Desc, v int64, labels ...string) {
		ch <- prometheus.MustNewConstMetric(d, prometheus.CounterValue, float64(v), labels...)
	}
	g(c.bytes, float64(hot), "hot")
	g(c.bytes, float64(warm), "warm")
	g(c.bytes, float64(cold), "cold")
	g(c.lagSeconds, lag)
	g(c.lagBytes, float64(lagBytes))
	k(c.hits, c.cold.Hits.Load())
	k(c.misses, c.cold.Misses.Load())
	k(c.fetches, c.cold.Fetches.Load())
	k(c.fetched, c.cold.FetchedBytes.Load())
	var uploads, errs int
	hist := c.job.History()
	for _, r := range hist {
		uploads += len(r.Uploaded)
		errs += len(r.Errors)
	}
	g(c.runs, float64(len(hist)))
	g(c.uploads, float64(uploads))
	g(c.runErrors, float64(errs))
	for step, n := range c.job.Failures() {
		k(c.failures, int64(n), string(step))
	}
	k(c.claimsLost, int64(c.job.ClaimsLost()))
	g(c.objects, float64(objects))
	merges, merged, mergedBytes := c.job.Merged()
	k(c.merges, int64(merges))
	k(c.mergedObjects, int64(merged))
	k(c.mergedBytes, int64(mergedBytes))
	byTopic := map[[2]string]int64{}
	for col, n := range c.job.Undecoded() {
		tp, _ := store.ParseShard(col.Shard)
		byTopic[[2]string{tp.Topic, col.Column}] += int64(n)
	}
	for tc, n := range byTopic {
		k(c.undecoded, n, tc[0], tc[1])
	}
}
