package main

import (
	"fmt"
	"log/slog"
	"os"
	"path/filepath"
	"sync/atomic"
	"syscall"
	"time"

	"github.com/prometheus/client_golang/prometheus"

	"strata/catalog"
	"strata/catalog/pebblecat"
	"strata/engine"
	"strata/engine/segment"
	"strata/engine/sharedfile"
	"strata/icetable"
	"strata/replica"
	"strata/tiering"
	"strata/tiering/objstore"
)

// openCatalog opens the single node's catalog, in data_dir/catalog.
func openCatalog(dataDir string) (catalog.Catalog, error) {
	cat, err := pebblecat.Open(filepath.Join(dataDir, "catalog"))
	if err != nil && folderLocked(dataDir) {
		return nil, fmt.Errorf("data folder %s is in use by another strata process (its LOCK file is locked)", dataDir)
	}
	return cat, err
}

// folderLocked says whether a running engine holds the data folder's LOCK
// file (engine/segment takes it), to name the cause when the catalog, opened
// first, fails on its own lock.
func folderLocked(dataDir string) bool {
	f, err := os.Open(filepath.Join(dataDir, "LOCK"))
	if err != nil {
		return false
	}
	defer f.Close()
	return syscall.Flock(int(f.Fd()), syscall.LOCK_EX|syscall.LOCK_NB) != nil
}

// openStorage opens the storage adapter the config describes, with the
// catalog and the cold tier listening to the segment engine.
func openStorage(cfg *Config, cold objstore.Bucket, tables *icetable.Tables, cat catalog.Catalog, topics *topicView, rolled *rolls, log *slog.Logger) (*engine.Adapter, error) {
	return engine.Open(engine.Config{
		Default:          cfg.Engine.Default,
		TopicEngine:      topics.engine,
		MemoryMaxRecords: cfg.Engine.MemoryMaxRecords,
		Segment: segment.Config{
			Dir:               cfg.DataDir,
			Workers:           cfg.Engine.IOWorkers,
			Fsync:             segment.FsyncPolicy(cfg.Engine.Fsync),
			FsyncInterval:     time.Duration(cfg.Engine.FsyncInterval),
			IndexInterval:     cfg.Engine.IndexInterval,
			IndexMemoryBytes:  int64(cfg.Engine.IndexMemory),
			MaxSegmentBytes:   int64(cfg.Segment.MaxBytes),
			TopicSegments:     topics.segments,
			FileModel:         topics.fileModel,
			RollCheckInterval: uint64(cfg.Segment.RollCheckInterval),
			MaxSegmentAge:     time.Duration(cfg.Segment.MaxAge),
			Logger:            log.With("component", "engine"),
			Events:            listener(cfg, cat, cold, tables, rolled, log.With("component", "catalog")),
		},
	})
}

// engineCollector exports the segment engine's counters.
type engineCollector struct {
	e                                                      *segment.Engine
	batches, fsyncs, records, byts, damaged, cut, unmarked *prometheus.Desc
	// The shared files' (engine/sharedfile) own counters.
	sharedCommits, sharedFsyncs, sharedChunks, sharedBytes, sharedSealed, sharedCut, sharedDamaged *prometheus.Desc
}

func newEngineCollector(e *segment.Engine) *engineCollector {
	d := func(name, help string) *prometheus.Desc { return prometheus.NewDesc(name, help, nil, nil) }
	return &engineCollector{e: e,
		batches: d("strata_engine_batches_total", "I/O worker batches that appended records."),
		fsyncs:  d("strata_engine_fsyncs_total", "Segment file fsyncs by I/O workers."),
		records: d("strata_engine_appended_records_total", "Records appended to segment files."),
		byts:    d("strata_engine_appended_bytes_total", "Bytes appended to segment files."),
		damaged: d("strata_engine_damaged_shards", "Shards found at start with damage in synced bytes of their active segment (before its synced mark), or in a shared file they may have records in: they serve reads and refuse writes until repaired."),
		cut:     d("strata_engine_cut_bytes_total", "Bytes of torn segment tails (written after the last fsync) recovery cut off at start."),
		unmarked: d("strata_engine_unmarked_segments_total", "Active segments and shared files found at start under engine.fsync=batch with bytes but no synced mark that checks out: "+
			"what recovery cut, or a cut before the start, may have held acknowledged records (logged at error level)."),

		sharedCommits: d("strata_engine_shared_commits_total", "Commits of chunks to shared files (strata.file.model=shared): one per I/O worker batch with shared partitions."),
		sharedFsyncs:  d("strata_engine_shared_fsyncs_total", "Fsyncs of shared files by their writers (commits, seals, the interval policy's syncs)."),
		sharedChunks:  d("strata_engine_shared_chunks_total", "Chunks written to shared files: one per shared partition per I/O worker batch."),
		sharedBytes:   d("strata_engine_shared_bytes_total", "Bytes of chunks written to shared files, headers included."),
		sharedSealed:  d("strata_engine_shared_files_sealed_total", "Shared files sealed, by their writers and by recovery."),
		sharedCut:     d("strata_engine_shared_cut_bytes_total", "Bytes of torn shared-file tails recovery cut off at start."),
		sharedDamaged: d("strata_engine_shared_damaged_files_total", "Shared files found at start damaged inside, with whole chunks after the damage (not cut)."),
	}
}

func (c *engineCollector) Describe(ch chan<- *prometheus.Desc) {
	ch <- c.batches
	ch <- c.fsyncs
	ch <- c.records
	ch <- c.byts
	ch <- c.damaged
	ch <- c.cut
	ch <- c.unmarked
	ch <- c.sharedCommits
	ch <- c.sharedFsyncs
	ch <- c.sharedChunks
	ch <- c.sharedBytes
	ch <- c.sharedSealed
	ch <- c.sharedCut
	ch <- c.sharedDamaged
}

func (c *engineCollector) Collect(ch chan<- prometheus.Metric) {
	s := c.e.Stats()
	ch <- prometheus.MustNewConstMetric(c.batches, prometheus.CounterValue, float64(s.Batches.Load()))
	ch <- prometheus.MustNewConstMetric(c.fsyncs, prometheus.CounterValue, float64(s.Fsyncs.Load()))
	ch <- prometheus.MustNewConstMetric(c.records, prometheus.CounterValue, float64(s.Records.Load()))
	ch <- prometheus.MustNewConstMetric(c.byts, prometheus.CounterValue, float64(s.Bytes.Load()))
	ch <- prometheus.MustNewConstMetric(c.damaged, prometheus.GaugeValue, float64(s.Damaged.Load()))
	ch <- prometheus.MustNewConstMetric(c.cut, prometheus.CounterValue, float64(s.CutBytes.Load()))
	ch <- prometheus.MustNewConstMetric(c.unmarked, prometheus.CounterValue, float64(s.Unmarked.Load()))
	var sh sharedfile.Stats // zero until the first shared partition
	sp := &sh
	if st := c.e.SharedStats(); st != nil {
		sp = st
	}
	for _, m := range []struct {
		d *prometheus.Desc
		v uint64
	}{{c.sharedCommits, sp.Commits.Load()}, {c.sharedFsyncs, sp.Fsyncs.Load()}, {c.sharedChunks, sp.Chunks.Load()},
		{c.sharedBytes, sp.Bytes.Load()}, {c.sharedSealed, sp.Sealed.Load()}, {c.sharedCut, sp.CutBytes.Load()},
		{c.sharedDamaged, sp.Damaged.Load()}} {
		ch <- prometheus.MustNewConstMetric(m.d, prometheus.CounterValue, float64(m.v))
	}
}

// listener keeps the catalog in step with the engine and clears a deleted
// shard's objects from the bucket; in a cluster the bucket is shared and a
// topic's objects are every node's, so the controller clears a deleted
// topic's (cluster.Config.ClearTopic) and a node's shard deletion leaves
// them. In a cluster it also tells rolled of each roll: the moment a
// partition may be handed to another node, and, for a replicated one, a
// sealed copy whose checksum the replicas compare.
func listener(cfg *Config, cat catalog.Catalog, cold objstore.Bucket, tables *icetable.Tables, rolled *rolls, log *slog.Logger) segment.EventListener {
	var forget tiering.TableForgetter
	if tables != nil { // not a nil *Tables in the interface
		forget = tables
	}
	l := tiering.ListenTables(cat, cold, cfg.Tiering.Prefix, log, forget)
	if cfg.Cluster.Enabled() {
		l.ShardDeleted = tiering.Listen(cat, nil, cfg.Tiering.Prefix, log).ShardDeleted
		sealed := l.SegmentSealed
		l.SegmentSealed = func(s, next segment.SegmentMeta) error {
			if err := sealed(s, next); err != nil {
				return err
			}
			if n := rolled.replication.Load(); n != nil {
				n.Sealed(s.Shard, s.No, replica.Seal{Start: s.StartOffset, Last: s.EndOffset, CRC: s.Checksum})
			}
			select {
			case rolled.shards <- s.Shard:
			default: // a backlog of rolls: this partition hands over at its next one
			}
			return nil
		}
	}
	return l
}

// rolls is where a cluster node's engine tells of its rolls: the shards, for
// handoffs, and replication's seal agreement, once it runs.
type rolls struct {
	shards      chan string
	replication atomic.Pointer[replica.Node]
}
