package main

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"math"
	"strconv"
	"sync"
	"sync/atomic"
	"time"

	"strata/cluster"
	"strata/engine/segment"
	"strata/engine/store"
	"strata/icetable"
	"strata/metadata"
	"strata/parquet"
	"strata/tiering"
	"strata/topicconfig"
	"strata/typed"
)

// topicDefaults is what strata's config file sets for every topic, by topic
// config name: the broker settings DescribeConfigs shows as
// STATIC_BROKER_CONFIG. A setting equal to the key's default is left out,
// so it shows as DEFAULT_CONFIG.
func topicDefaults(cfg *Config) topicconfig.Broker {
	ms := func(d Duration) int64 { return time.Duration(d).Milliseconds() }
	segmentMs := topicconfig.Never
	if cfg.Segment.MaxAge > 0 {
		segmentMs = strconv.FormatInt(ms(cfg.Segment.MaxAge), 10)
	}
	b := topicconfig.Broker{
		"max.message.bytes": strconv.FormatInt(int64(cfg.Kafka.MaxMessageBytes), 10),
		"segment.bytes":     strconv.FormatInt(min(int64(cfg.Segment.MaxBytes), math.MaxInt32), 10),
		"segment.ms":        segmentMs,
		"retention.ms":      topicconfig.Unbounded(ms(cfg.Retention.MaxAge)),
		"retention.bytes":   topicconfig.Unbounded(int64(cfg.Retention.MaxBytes)),
		// strata always has a cold tier (tiering.enabled only schedules the
		// job; strata tier run works either way): topics tier unless they
		// say remote.storage.enable=false.
		"remote.storage.enable":          "true",
		"strata.engine":                  cfg.Engine.Default,
		"strata.parquet.codec":           cfg.Tiering.Codec,
		"strata.parquet.row.group.bytes": strconv.FormatInt(int64(cfg.Tiering.RowGroupBytes), 10),
	}
	b["local.retention.ms"] = strconv.FormatInt(ms(cfg.Tiering.LocalRetention), 10)
	for name, v := range b {
		if k, _ := topicconfig.Lookup(name); v == k.Default {
			delete(b, name)
		}
	}
	return b
}

// topicView reads a topic's configs wherever this node keeps them: the
// catalog's topic records on a single node, the cluster's etcd records (the
// Member's view) in a cluster, once it has joined. The engine and the
// tiering job resolve them through it. The member comes late: storage
// opens first, since joining reports the engine's damaged copies.
type topicView struct {
	broker topicconfig.Broker
	local  *metadata.CatalogTopics // single node
	member atomic.Pointer[cluster.Member]
	// schemas is the schema registry the typed columns decode by
	// (strata's own, or schema_registry.url's); nil until it is open, and
	// when there is none.
	schemas atomic.Pointer[schemaSource]
	// tables, if set (iceberg.enabled), gives the typed columns their
	// field ids.
	tables *icetable.Tables
	// typedErrs is, by shard, why its last Parquet options lack a typed
	// column its topic asks for (typedErr).
	typedErrs sync.Map
}

// newTopicView reads a single node's topic records from its catalog.
func newTopicView(cfg *Config, cat metadata.TopicRecords) (*topicView, error) {
	v := &topicView{broker: topicDefaults(cfg)}
	if cfg.Cluster.Enabled() {
		return v, nil
	}
	var err error
	v.local, err = metadata.NewCatalogTopics(cat)
	return v, err
}

func (v *topicView) overrides(topic string) map[string]string {
	if v.local != nil {
		return v.local.Configs(topic)
	}
	if m := v.member.Load(); m != nil {
		t, _ := m.Topic(topic)
		return t.Configs
	}
	return nil
}

func (v *topicView) resolve(topic string) topicconfig.Resolved {
	return topicconfig.Resolve(v.overrides(topic), v.broker)
}

func (v *topicView) shardTopic(shard string) string {
	tp, _ := store.ParseShard(shard)
	return tp.Topic
}

// segments is the engine's TopicSegments: segment.bytes and segment.ms.
func (v *topicView) segments(topic string) segment.SegmentPolicy {
	r := v.resolve(topic)
	p := segment.SegmentPolicy{MaxBytes: r.SegmentBytes}
	if r.SegmentMs > 0 && r.SegmentMs < math.MaxInt64/int64(time.Millisecond) {
		p.MaxAge = time.Duration(r.SegmentMs) * time.Millisecond
	}
	return p
}

// fileModel is the engine's FileModel: strata.file.model.
func (v *topicView) fileModel(topic string) string { return v.resolve(topic).FileModel }

// engine is the adapter's TopicEngine: strata.engine.
func (v *topicView) engine(topic string) string { return v.resolve(topic).Engine }

// retention is the engine's retention when nothing tiers: retention.ms and
// retention.bytes bound the local log, which is the whole log.
func (v *topicView) retention(shard string) segment.RetentionPolicy {
	r := v.resolve(v.shardTopic(shard))
	return segment.RetentionPolicy{MaxAge: millis(r.RetentionMs), MaxBytes: max(r.RetentionBytes, 0)}
}

// tieringPolicy is the job's policy for a shard: the broker's, with the
// topic's retention.ms, retention.bytes (the whole log), local.retention.ms
// and local.retention.bytes (local copies, once uploaded) and
// remote.storage.enable.
func (v *topicView) tieringPolicy(base tiering.Policy) func(shard string) tiering.Policy {
	return func(shard string) tiering.Policy {
		r := v.resolve(v.shardTopic(shard))
		p := base
		p.RetentionMaxAge, p.RetentionMaxBytes = millis(r.RetentionMs), max(r.RetentionBytes, 0)
		p.NoUpload = !r.RemoteStorage
		switch {
		case r.LocalRetentionMs < 0:
			p.LocalRetention = time.Duration(math.MaxInt64) // kept until retention expires it
		default:
			p.LocalRetention = time.Duration(r.LocalRetentionMs) * time.Millisecond
		}
		switch {
		case r.LocalRetentionBytes < 0:
			p.LocalRetentionBytes = 0
		case r.LocalRetentionBytes == 0:
			p.LocalRetentionBytes = 1 // none: every uploaded copy goes
		default:
			p.LocalRetentionBytes = r.LocalRetentionBytes
		}
		p.Merging.TargetBytes = r.ColdTargetBytes
		if r.RetentionBytes > 0 {
			// Retention takes a merged object whole: a tenth of
			// retention.bytes is the most it can take below the bound.
			p.Merging.TargetBytes = min(p.Merging.TargetBytes, r.RetentionBytes/10)
		}
		if r.RetentionMs > 0 {
			// Retention takes a merged object with its newest record: a
			// tenth of retention.ms is the most a record can outlive it.
			p.Merging.MaxSpan = millis(r.RetentionMs) / 10
		}
		return p
	}
}

// parquet is the job's Parquet options for a shard: strata.parquet.codec
// and strata.parquet.row.group.bytes over the broker's, and the typed
// columns strata.value.schema and strata.key.schema ask for.
func (v *topicView) parquet(base parquet.Options, log *slog.Logger) func(shard string) parquet.Options {
	return func(shard string) parquet.Options {
		topic := v.shardTopic(shard)
		r := v.resolve(topic)
		o := base
		o.Codec, o.RowGroupBytes = r.ParquetCodec, int(r.ParquetRowGroupBytes)
		o.Typed = nil
		cols, err := v.safeTypedColumns(topic, r)
		v.typedErrs.Store(shard, err)
		if err != nil {
			// Its bytes are all there; the next upload tries again.
			log.Warn("a typed column could not be made for an upload: the object is written without it, or, where the topic's table has it, with the reason beside each record",
				"shard", shard, "err", err)
		}
		for _, c := range cols {
			o.Typed = append(o.Typed, parquet.TypedColumn{Name: c.name, Key: c.key, Type: c.Type, ErrorID: c.ErrorID, Decode: c.Decode})
		}
		return o
	}
}

// typedErr is why the shard's last Parquet options lacked a typed column
// its topic asks for; nil if none did.
func (v *topicView) typedErr(shard string) error {
	err, _ := v.typedErrs.Load(shard)
	e, _ := err.(error)
	return e
}

// The field ids a typed column is first given (docs/typed.md): the
// value's from valueTypedID, past the lossless columns', the key's from
// keyTypedID, past any value schema's. A column a table evolves gets the
// table's next free ids.
const (
	valueTypedID = 1000
	keyTypedID   = 1_000_000
)

// schemaSource is a registry as the typed columns ask it.
type schemaSource struct{ typed.Schemas }

// typedColumn is one of a topic's typed columns for an upload.
type typedColumn struct {
	name string
	key  bool
	*typed.Column
}

// safeTypedColumns is typedColumns, a panic in it (a schema no test
// foresaw) that upload's error, not the broker's end.
func (v *topicView) safeTypedColumns(topic string, r topicconfig.Resolved) (cols []typedColumn, err error) {
	defer func() {
		if p := recover(); p != nil {
			cols, err = nil, fmt.Errorf("making the typed columns panicked: %v", p)
		}
	}()
	return v.typedColumns(topic, r)
}

// typedColumns are the typed columns of a topic's values and keys that
// its configs (strata.value.schema, strata.key.schema) ask for, decoding
// by the registry's schemas: evolved from the topic's table's columns, and
// committed to its schema first, when the topic has a table
// (icetable.Tables.EvolveTyped). A column that cannot be made is left out,
// and the error says why.
func (v *topicView) typedColumns(topic string, r topicconfig.Resolved) ([]typedColumn, error) {
	type want struct {
		source, name string
		key          bool
		id           int
	}
	var wants []want
	for _, w := range []want{{r.ValueSchema, parquet.ValueTyped, false, valueTypedID}, {r.KeySchema, parquet.KeyTyped, true, keyTypedID}} {
		if w.source != "none" && w.source != "" {
			wants = append(wants, w)
		}
	}
	if len(wants) == 0 {
		return nil, nil
	}
	reg := v.schemas.Load()
	var cols []typedColumn
	var errs []error
	build := func(table icetable.TypedSchema) ([]icetable.TypedColumn, error) {
		cols, errs = nil, nil
		var out []icetable.TypedColumn
		for _, w := range wants {
			start := typed.Start{ID: max(w.id, table.Next)}
			if c, ok := table.Columns[w.name]; ok {
				start = typed.Start{Type: &c.Type, ErrorID: c.ErrorID, Next: table.Next}
			}
			subject := topic + "-value"
			if w.key {
				subject = topic + "-key"
			}
			var col *typed.Column
			err := fmt.Errorf("%s asks for typed columns, but this broker has no schema registry (schema_registry.addr, schema_registry.url)", topic)
			if reg != nil {
				col, err = typed.NewColumn(w.source, subject, reg.Schemas, start)
			}
			if err != nil {
				errs = append(errs, fmt.Errorf("%s: %w", w.name, err))
				if start.Type == nil {
					continue // no column yet: the object is written without it
				}
				// The table has the column: each record says why it is null.
				col = typed.Failing(*start.Type, start.ErrorID, err)
			}
			table.Next = max(table.Next, col.Next)
			cols = append(cols, typedColumn{w.name, w.key, col})
			out = append(out, icetable.TypedColumn{Name: w.name, Type: col.Type, ErrorID: col.ErrorID})
		}
		return out, nil
	}
	if v.tables == nil {
		build(icetable.TypedSchema{})
		return cols, errors.Join(errs...)
	}
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	if _, err := v.tables.EvolveTyped(ctx, topic, build); err != nil {
		return nil, fmt.Errorf("the typed columns of the topic's table: %w", err)
	}
	return cols, errors.Join(errs...)
}

// millis is a Kafka duration in ms as the policies take it: -1 (none) is 0.
func millis(ms int64) time.Duration {
	if ms <= 0 {
		return 0
	}
	return time.Duration(ms) * time.Millisecond
}
