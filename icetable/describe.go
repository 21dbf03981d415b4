package icetable

import (
	"context"
	"errors"
	"fmt"
	"maps"
	"slices"
	"strconv"
	"sync"
	"time"

	"github.com/prometheus/client_golang/prometheus"
)

// Metrics are the table commits' Prometheus metrics (docs/iceberg.md,
// "Operators").
type Metrics struct {
	commits   *prometheus.CounterVec
	seconds   prometheus.Histogram
	conflicts prometheus.Counter
	outside   *prometheus.CounterVec
}

// NewMetrics registers them with reg.
func NewMetrics(reg prometheus.Registerer) *Metrics {
	m := &Metrics{
		commits: prometheus.NewCounterVec(prometheus.CounterOpts{Name: "strata_iceberg_commits_total",
			Help: "Iceberg table commits by result: committed (a snapshot landed), noop (nothing to add or remove), failed"}, []string{"result"}),
		seconds: prometheus.NewHistogram(prometheus.HistogramOpts{Name: "strata_iceberg_commit_seconds",
			Help:    "Time of a table commit that landed, from reading the table to the pointer swap (planning again after conflicts included)",
			Buckets: prometheus.ExponentialBuckets(0.005, 2, 12)}),
		conflicts: prometheus.NewCounter(prometheus.CounterOpts{Name: "strata_iceberg_commit_conflicts_total",
			Help: "Table commits that lost the pointer swap to another writer and were planned again"}),
		outside: prometheus.NewCounterVec(prometheus.CounterOpts{Name: "strata_iceberg_schema_changed_outside_total",
			Help: "Table schemas found changed by another writer than strata (an engine's ALTER TABLE through a catalog or the bucket), by topic: each is reported once, and strata evolves its typed columns from it"}, []string{"topic"}),
	}
	reg.MustRegister(m.commits, m.seconds, m.conflicts, m.outside)
	for _, r := range []string{"committed", "noop", "failed"} {
		m.commits.WithLabelValues(r)
	}
	return m
}

func (m *Metrics) done(result string, took time.Duration) {
	if m == nil {
		return
	}
	m.commits.WithLabelValues(result).Inc()
	if result == "committed" {
		m.seconds.Observe(took.Seconds())
	}
}

func (m *Metrics) changedOutside(topic string) {
	if m != nil {
		m.outside.WithLabelValues(topic).Inc()
	}
}

func (m *Metrics) conflict() {
	if m != nil {
		m.conflicts.Inc()
	}
}

// committedCache is, by topic, the offsets the table held when this
// process last read or committed it: what the lag metric compares the
// logs with, without a read of the bucket at each scrape.
type committedCache struct {
	mu sync.Mutex
	m  map[string]map[int32]Range
}

func (c *committedCache) set(topic string, r map[int32]Range) {
	c.mu.Lock()
	defer c.mu.Unlock()
	if c.m == nil {
		c.m = map[string]map[int32]Range{}
	}
	c.m[topic] = maps.Clone(r)
}

// LastCommitted is, by topic, the offsets each table held when this
// process last read or committed it (the lag metric's source).
func (t *Tables) LastCommitted() map[string]map[int32]Range {
	t.cache.mu.Lock()
	defer t.cache.mu.Unlock()
	out := map[string]map[int32]Range{}
	for k, v := range t.cache.m {
		out[k] = maps.Clone(v)
	}
	return out
}

// TableView is a topic's table as `GET /v1/tables/{topic}` and `strata
// table describe` show it.
type TableView struct {
	Topic    string `json:"topic"`
	Location string `json:"location"`
	// Metadata is the current metadata file, as version-hint.text names it.
	Metadata string `json:"metadata"`
	// SnapshotID and SnapshotTime are the current snapshot's (none: 0,
	// zero time, before the first commit).
	SnapshotID   int64     `json:"snapshot_id"`
	SnapshotTime time.Time `json:"snapshot_time"`
	Operation    string    `json:"operation,omitempty"`
	Snapshots    int       `json:"snapshots"`
	DataFiles    int64     `json:"data_files"`
	DeleteFiles  int64     `json:"delete_files"`
	Bytes        int64     `json:"bytes"`
	// Records is what a reader of the current snapshot gets; HiddenRecords
	// the rows of its data files that position deletes hide (below a log
	// start inside a kept file).
	Records       int64           `json:"records"`
	HiddenRecords int64           `json:"hidden_records"`
	Partitions    []PartitionView `json:"partitions"`
	// Error, in a listing of every table, is why this one could not be
	// read (the others are listed all the same).
	Error string `json:"error,omitempty"`
}

// PartitionView is what the table holds of one partition. Empty is true
// when it holds nothing above its floor (First).
type PartitionView struct {
	Partition int32  `json:"partition"`
	First     uint64 `json:"first_offset"`
	Last      uint64 `json:"last_offset"`
	Empty     bool   `json:"empty,omitempty"`
	// Filled by the caller, who knows the log: records between the table's
	// last offset and the partition's high watermark, and how long the
	// first of them has waited (its timestamp to now); -1 when unknown.
	LagRecords int64   `json:"lag_records"`
	LagSeconds float64 `json:"lag_seconds"`
}

// Describe reads the topic's table from the bucket: its current snapshot,
// what it holds of each partition (from the summary), and its files and
// bytes (Iceberg's own summary totals).
func (t *Tables) Describe(ctx context.Context, topic string) (TableView, error) {
	tbl, _, err := t.load(ctx, topic)
	if errors.Is(err, errNoTable) {
		return TableView{}, fmt.Errorf("topic %s: %w", topic, ErrNoTable)
	}
	if err != nil {
		return TableView{}, err
	}
	v := TableView{Topic: topic, Location: tbl.Location(), Metadata: tbl.MetadataLocation(),
		Snapshots: len(tbl.Metadata().Snapshots()), Partitions: []PartitionView{}}
	s := tbl.CurrentSnapshot()
	if s == nil || s.Summary == nil {
		return v, nil
	}
	v.SnapshotID, v.SnapshotTime, v.Operation = s.SnapshotID, time.UnixMilli(s.TimestampMs).UTC(), string(s.Summary.Operation)
	num := func(k string) int64 { n, _ := strconv.ParseInt(s.Summary.Properties[k], 10, 64); return n }
	v.DataFiles, v.DeleteFiles, v.Bytes = num("total-data-files"), num("total-delete-files"), num("total-files-size")
	committed, err := Committed(s.Summary.Properties)
	if err != nil {
		return TableView{}, fmt.Errorf("the current snapshot %d of %s: %w", s.SnapshotID, tbl.MetadataLocation(), err)
	}
	// What a reader gets is every offset of each partition's range (a log
	// has no gaps, and a commit adds a partition's objects only in order,
	// "Exactly once"); the data files' other rows are below a log start,
	// hidden by position deletes. Iceberg's total-position-deletes cannot
	// say it: a delete file outlives the data file whose rows it hid.
	for _, r := range committed {
		if !r.Empty() {
			v.Records += int64(r.Last - r.First + 1)
		}
	}
	v.HiddenRecords = num("total-records") - v.Records
	t.cache.set(topic, committed)
	for _, p := range slices.Sorted(maps.Keys(committed)) {
		r := committed[p]
		v.Partitions = append(v.Partitions, PartitionView{Partition: p, First: r.First, Last: r.Last, Empty: r.Empty(), LagRecords: -1, LagSeconds: -1})
	}
	return v, nil
}
