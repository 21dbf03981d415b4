// Package topicconfig is the schema of a topic's configs: Kafka's names,
// types, defaults and validation (with Kafka's wording, so a client's error
// reads as Apache Kafka's would), the broker setting each one falls back
// to, and how a topic's overrides, the broker's settings and the defaults
// resolve into the values the engine, retention and tiering follow
// (docs/config.md, "Topic configs"). It is pure: no I/O, no clock. The
// Kafka front end, the admin API, the tiering job and cmd import it; the
// engine never does (cmd hands it the resolved values).
package topicconfig

import (
	"fmt"
	"math"
	"slices"
	"strconv"
	"strings"
	"time"
	"unicode"

	"strata/cleaner"
)

// Type is Kafka's config type (DescribeConfigs' ConfigType).
type Type int8

const (
	Boolean Type = 1
	String  Type = 2
	Int     Type = 3
	Long    Type = 5
	Double  Type = 6
	List    Type = 7
)

func (t Type) String() string {
	switch t {
	case Boolean:
		return "BOOLEAN"
	case String:
		return "STRING"
	case Int:
		return "INT"
	case Long:
		return "LONG"
	case Double:
		return "DOUBLE"
	case List:
		return "LIST"
	}
	return "UNKNOWN"
}

// Source is where a value comes from, as DescribeConfigs reports it.
type Source int8

const (
	// DynamicTopic: the topic's own override.
	DynamicTopic Source = 1
	// StaticBroker: strata's config file sets the broker synonym.
	StaticBroker Source = 4
	// Default: neither; the built-in default.
	Default Source = 5
)

func (s Source) String() string {
	switch s {
	case DynamicTopic:
		return "DYNAMIC_TOPIC_CONFIG"
	case StaticBroker:
		return "STATIC_BROKER_CONFIG"
	case Default:
		return "DEFAULT_CONFIG"
	}
	return "UNKNOWN"
}

// Key is one topic config.
type Key struct {
	Name string
	Type Type
	// Default is the value when neither the topic nor the broker sets one:
	// Kafka's default for Kafka's keys.
	Default string
	// Broker is the broker setting the key falls back to, by Kafka's name
	// (log.segment.bytes for segment.bytes), or strata's config key for
	// strata's own; "" when there is none.
	Broker string
	// DefaultSynonym lists the broker synonym's default among the synonyms
	// (Kafka leaves it out where the broker key's own default is null, as
	// log.retention.ms and log.roll.ms).
	DefaultSynonym bool
	// Honoured says what strata does with the value (docs/config.md).
	Honoured string
	// Doc is the key's meaning, as DescribeConfigs documents it.
	Doc string
	// CreateOnly keys are fixed when the topic is created.
	CreateOnly bool

	min, max   int64    // Int and Long bounds
	fmin, fmax float64  // Double bounds
	one        []string // String and List: the values allowed
	// check, for a String of no fixed values, says why one is wrong.
	check func(string) string
}

const never = "9223372036854775807"

// Keys lists every topic config strata knows, in name order.
var Keys = []Key{
	{Name: "cleanup.policy", Type: List, Default: "delete", Broker: "log.cleanup.policy", DefaultSynonym: true, one: []string{"compact", "delete"},
		Honoured: "delete only: compact is refused until strata compacts",
		Doc:      "The retention policy for old segments: \"delete\" discards them when retention.ms or retention.bytes is reached. \"compact\" (log compaction) is not supported by strata and is refused."},
	{Name: "delete.retention.ms", Type: Long, Default: "86400000", Broker: "log.cleaner.delete.retention.ms", DefaultSynonym: true, min: 0, max: math.MaxInt64,
		Honoured: "stored and validated; the log cleaner it configures runs once cleanup.policy=compact is taken (docs/compaction.md)",
		Doc:      "How long a tombstone (a record with a null value) of a compacted topic stays after its segment was first cleaned, so a consumer that reads the log within it sees the delete."},
	{Name: "local.retention.bytes", Type: Long, Default: "-2", Broker: "log.local.retention.bytes", DefaultSynonym: true, min: -2, max: math.MaxInt64,
		Honoured: "the tiering job drops the oldest uploaded local copies while the partition's local segments are over it",
		Doc:      "The most bytes of a partition's segments kept on local disk; only segments already uploaded to the cold tier are dropped. -2 follows retention.bytes, -1 keeps them all."},
	{Name: "local.retention.ms", Type: Long, Default: "-2", Broker: "log.local.retention.ms", DefaultSynonym: true, min: -2, max: math.MaxInt64,
		Honoured: "the tiering job drops a segment's local copy this long after its upload committed",
		Doc:      "How long a segment's local copy is kept once uploaded to the cold tier (strata counts from the upload, Kafka from the segment's newest record, which is never later: strata keeps copies at least as long). -2 follows retention.ms, -1 keeps them."},
	{Name: "max.compaction.lag.ms", Type: Long, Default: never, Broker: "log.cleaner.max.compaction.lag.ms", DefaultSynonym: true, min: 1, max: math.MaxInt64,
		Honoured: "stored and validated; the log cleaner it configures runs once cleanup.policy=compact is taken (docs/compaction.md)",
		Doc:      "The longest a record of a compacted topic stays uncleaned: a dirty segment whose newest record is older makes the partition due whatever its dirty ratio."},
	{Name: "max.message.bytes", Type: Int, Default: "1048588", Broker: "message.max.bytes", DefaultSynonym: true, min: 0, max: 1 << 30,
		Honoured: "Produce refuses a record batch larger than this with MESSAGE_TOO_LARGE",
		Doc:      "The largest record batch a producer may send to the topic, in bytes, as sent (compressed). strata allows at most 1GiB."},
	{Name: "message.timestamp.type", Type: String, Default: "CreateTime", Broker: "log.message.timestamp.type", DefaultSynonym: true, one: []string{"CreateTime", "LogAppendTime"},
		Honoured: "LogAppendTime stamps each record with the broker's time at append and answers it in Produce's log_append_time",
		Doc:      "CreateTime keeps the producer's record timestamps; LogAppendTime replaces them with the broker's clock when the records are appended."},
	{Name: "min.cleanable.dirty.ratio", Type: Double, Default: "0.5", Broker: "log.cleaner.min.cleanable.ratio", DefaultSynonym: true, fmin: 0, fmax: 1,
		Honoured: "stored and validated; the log cleaner it configures runs once cleanup.policy=compact is taken (docs/compaction.md)",
		Doc:      "How dirty a compacted topic's partition gets before it is cleaned: the share of its cleanable bytes written since its last cleaning."},
	{Name: "min.compaction.lag.ms", Type: Long, Default: "0", Broker: "log.cleaner.min.compaction.lag.ms", DefaultSynonym: true, min: 0, max: math.MaxInt64,
		Honoured: "stored and validated; the log cleaner it configures runs once cleanup.policy=compact is taken (docs/compaction.md)",
		Doc:      "The least time a record of a compacted topic stays uncleaned after its timestamp."},
	{Name: "min.insync.replicas", Type: Int, Default: "1", Broker: "min.insync.replicas", DefaultSynonym: true, min: 1, max: math.MaxInt32,
		Honoured: "stored and validated; strata keeps one copy of each partition until replication lands",
		Doc:      "The fewest in-sync replicas an acks=all write needs."},
	{Name: "remote.storage.enable", Type: Boolean, Default: "false", Broker: "remote.log.storage.system.enable",
		Honoured: "true: the tiering job uploads the topic's sealed segments; false: the topic never tiers",
		Doc:      "Whether the topic's sealed segments are uploaded to the cold tier (KIP-405). strata always has a cold tier, so its broker says true and topics tier unless they say false; tiering.enabled only schedules the job."},
	{Name: "retention.bytes", Type: Long, Default: "-1", Broker: "log.retention.bytes", DefaultSynonym: true, min: -1, max: math.MaxInt64,
		Honoured: "the oldest segments go from every tier while a partition's whole log (local and cold) is over it",
		Doc:      "The most bytes a partition's whole log keeps, local and cold together (KIP-405); the oldest segments are deleted past it. -1: no bound."},
	{Name: "retention.ms", Type: Long, Default: "604800000", Broker: "log.retention.ms", min: -1, max: math.MaxInt64,
		Honoured: "segments whose newest record is older go from every tier; the low watermark rises past them",
		Doc:      "How long a partition keeps a segment, local and cold together (KIP-405), counted from its newest record. -1: forever."},
	{Name: "segment.bytes", Type: Int, Default: "1073741824", Broker: "log.segment.bytes", DefaultSynonym: true, min: 1 << 20, max: math.MaxInt32,
		Honoured: "the segment engine rolls a partition's active segment at this size (from its next roll check)",
		Doc:      "The size at which a partition's active segment is sealed and a new one begun."},
	{Name: "segment.ms", Type: Long, Default: "604800000", Broker: "log.roll.ms", min: 1, max: math.MaxInt64,
		Honoured: "the segment engine seals an active segment this long after its first record, also when no record comes",
		Doc:      "How long after its first record an active segment is sealed, so a quiet partition still tiers."},
	{Name: "strata.acks.all", Type: String, Default: "isr", one: []string{"isr", "quorum"}, CreateOnly: true,
		Honoured: "what acks=all waits for, and how the controller elects a new leader (isr: the first live in-sync replica; quorum: the longest log among a live majority of the replicas); fixed at creation",
		Doc:      "What a produce with acks=all waits for: isr, every in-sync replica (Kafka's acks=all); quorum, a majority of the replica set, so one slow follower never holds writes back. A leader of a quorum topic is elected from the longest log among a live majority of its replicas. Fixed when the topic is created: a record acknowledged by a quorum need not be on every in-sync replica."},
	{Name: "strata.cold.target_bytes", Type: Long, Default: "134217728", min: 0, max: math.MaxInt32,
		Honoured: "on one node, a tiering run merges runs of the topic's cold objects below half this size (only in the bucket, tiered tiering.merge_min_age ago, none below the log start) into objects of at most this size, keeping every record and offset, once a run holds tiering.merge_min_objects of them or half this size; at most a tenth of retention.bytes; 0: no merging",
		Doc:      "The size the topic's cold-tier Parquet objects are merged up to: a quiet partition tiers one small object per segment roll, and every table scan pays for each. Objects below half of it, only in the bucket and tiered long enough ago, are merged into objects of at most this size, each offset kept, in one atomic swap of the bucket's manifest and one replace snapshot of the topic's Iceberg table; an object of half of it or more is never rewritten. 0 turns merging off."},
	{Name: "strata.engine", Type: String, Default: "segment", Broker: "engine.default", DefaultSynonym: true, one: []string{"segment", "memory", "pebble"}, CreateOnly: true,
		Honoured: "the storage engine of the topic's partitions, chosen at creation",
		Doc:      "The storage engine of the topic's partitions: segment (files, tiered), memory (bounded, lost at restart) or pebble. Fixed when the topic is created."},
	{Name: "strata.file.model", Type: String, Default: "partition", one: []string{"partition", "shared"}, CreateOnly: true,
		Honoured: "the segment engine keeps each partition in its own segment files (partition) or interleaves the topic's partitions with others in shared files, one fsync per I/O worker batch (shared); fixed at creation",
		Doc:      "How the segment engine lays out the topic's partitions on disk: partition, each partition in its own segment files; shared, many partitions' records interleaved in shared files with one fsync per batch, for topics with many small partitions. Same records, reads, crash guarantees, replication and Parquet objects. Fixed when the topic is created."},
	{Name: "strata.key.schema", Type: String, Default: "none", check: schemaSource,
		Honoured: "how the tiering job decodes the topic's keys into the key_typed column of its Parquet objects, from the next upload: none, schema_id (each key's schema registry wire header names its schema) or subject:NAME (that subject's latest version)",
		Doc:      "How the topic's keys become a typed column (key_typed) of its cold-tier Parquet objects and Iceberg table, beside the raw key: none; schema_id, each key's schema registry wire header names its schema; subject:NAME, decoded by that subject's latest version. A key that does not decode keeps its bytes, with the reason in key_typed_error."},
	{Name: "strata.parquet.codec", Type: String, Default: "zstd", Broker: "tiering.codec", DefaultSynonym: true, one: []string{"zstd", "snappy", "gzip", "none"},
		Honoured: "the compression of the topic's Parquet objects, from the next upload",
		Doc:      "The compression codec of the topic's Parquet objects in the cold tier."},
	{Name: "strata.parquet.row.group.bytes", Type: Long, Default: "1048576", Broker: "tiering.row_group_bytes", DefaultSynonym: true, min: 4096, max: 1 << 30,
		Honoured: "the row-group size of the topic's Parquet objects, from the next upload",
		Doc:      "The size of a row group in the topic's Parquet objects: larger groups read faster in bulk, smaller ones make a cold read of one offset cheaper."},
	{Name: "strata.value.schema", Type: String, Default: "none", check: schemaSource,
		Honoured: "how the tiering job decodes the topic's values into the value_typed column of its Parquet objects, from the next upload: none, schema_id (each value's schema registry wire header names its schema) or subject:NAME (that subject's latest version)",
		Doc:      "How the topic's values become a typed column (value_typed) of its cold-tier Parquet objects and Iceberg table, beside the raw value: none; schema_id, each value's schema registry wire header names its schema; subject:NAME, decoded by that subject's latest version. A value that does not decode keeps its bytes, with the reason in value_typed_error."},
	{Name: "strata.value.schema.validation", Type: Boolean, Default: "false",
		Honoured: "true: a produce is refused (INVALID_RECORD, naming the record) unless every record's value starts with the wire header (magic byte 0, a 4-byte big-endian schema id) of a schema registered under the subject {topic}-value in strata's schema registry",
		Doc:      "Whether each produced record's value must carry the schema registry's wire header (magic byte 0, a 4-byte schema id) naming a schema registered under the subject {topic}-value; a batch with one that does not is refused with INVALID_RECORD (Redpanda's redpanda.value.schema.id.validation). Off: values are not looked at."},
	{Name: "unclean.leader.election.enable", Type: Boolean, Default: "false", Broker: "unclean.leader.election.enable", DefaultSynonym: true,
		Honoured: "true: when no in-sync replica of a partition is live, the controller makes its first live replica leader (acknowledged records may be lost); false: the partition stays leaderless until an in-sync replica returns",
		Doc:      "Indicates whether to enable replicas not in the ISR set to be elected as leader as a last resort, even though doing so may result in data loss."},
}

// schemaSource says why v is not a way to decode a topic's values or keys
// (strata.value.schema, strata.key.schema).
func schemaSource(v string) string {
	if v == "none" || v == "schema_id" {
		return ""
	}
	if name, ok := strings.CutPrefix(v, "subject:"); ok && strings.TrimSpace(name) != "" {
		if strings.IndexFunc(name, unicode.IsControl) >= 0 {
			return "String must be none, schema_id or subject:NAME, NAME without control characters"
		}
		return ""
	}
	return "String must be none, schema_id or subject:NAME"
}

// Lookup finds a key by name.
func Lookup(name string) (Key, bool) {
	i, ok := slices.BinarySearchFunc(Keys, name, func(k Key, n string) int { return strings.Compare(k.Name, n) })
	if !ok {
		return Key{}, false
	}
	return Keys[i], true
}

// Error is an invalid or unknown config: Kafka's INVALID_CONFIG, with a
// message naming the key and why.
type Error struct {
	Key, Value string
	Why        string
	Unknown    bool
	// Message, if set, is the whole message (a rule of the broker's, not
	// of one value).
	Message string
}

func (e *Error) Error() string {
	if e.Unknown {
		return "Unknown topic config name: " + e.Key
	}
	if e.Message != "" {
		return e.Message
	}
	return fmt.Sprintf("Invalid value %s for configuration %s: %s", e.Value, e.Key, e.Why)
}

// Validate checks one value of one key, as Kafka parses and bounds it.
func Validate(name, value string) error {
	k, ok := Lookup(name)
	if !ok {
		return &Error{Key: name, Unknown: true}
	}
	return k.validate(value)
}

func (k Key) validate(value string) error {
	bad := func(why string) error { return &Error{Key: k.Name, Value: value, Why: why} }
	switch k.Type {
	case Boolean:
		if v := strings.ToLower(strings.TrimSpace(value)); v != "true" && v != "false" {
			return bad("Expected value to be either true or false")
		}
	case Int, Long:
		bits, what := 32, "INT"
		if k.Type == Long {
			bits, what = 64, "LONG"
		}
		n, err := strconv.ParseInt(strings.TrimSpace(value), 10, bits)
		if err != nil {
			return bad("Not a number of type " + what)
		}
		if n < k.min {
			return bad(fmt.Sprintf("Value must be at least %d", k.min))
		}
		if n > k.max {
			return bad(fmt.Sprintf("Value must be no more than %d", k.max))
		}
	case Double:
		f, err := strconv.ParseFloat(strings.TrimSpace(value), 64)
		if err != nil || math.IsNaN(f) {
			return bad("Not a number of type DOUBLE")
		}
		if f < k.fmin {
			return bad(fmt.Sprintf("Value must be at least %g", k.fmin))
		}
		if f > k.fmax {
			return bad(fmt.Sprintf("Value must be no more than %g", k.fmax))
		}
	case String:
		if k.check != nil {
			if why := k.check(strings.TrimSpace(value)); why != "" {
				return bad(why)
			}
			return nil
		}
		if !slices.Contains(k.one, strings.TrimSpace(value)) {
			return bad("String must be one of: " + strings.Join(k.one, ", "))
		}
	case List:
		for _, v := range strings.Split(value, ",") {
			if v = strings.TrimSpace(v); v != "" && !slices.Contains(k.one, v) {
				return bad("String must be one of: " + strings.Join(k.one, ", "))
			}
		}
	}
	return nil
}

// Overrides are a topic's own values, by key name.
type Overrides map[string]string

// Broker is what strata's config file sets, by topic key name (the value
// in the topic key's units: retention.ms in milliseconds). A key it does
// not list falls back to the key's Default.
type Broker map[string]string

// Check validates a topic's whole set of overrides: each key and value,
// then the rules between keys, as Kafka checks them at CreateTopics and
// AlterConfigs. It also refuses what strata does not do (compaction).
func Check(o Overrides, b Broker) error {
	names := make([]string, 0, len(o))
	for n := range o {
		names = append(names, n)
	}
	slices.Sort(names)
	for _, n := range names {
		if err := Validate(n, o[n]); err != nil {
			return err
		}
	}
	if v, ok := o["cleanup.policy"]; ok && slices.Contains(SplitList(v), "compact") {
		return &Error{Key: "cleanup.policy", Value: v, Why: "strata does not compact logs yet: use delete"}
	}
	if v, ok := o["remote.storage.enable"]; ok && parseBool(v) && b["remote.storage.enable"] != "true" {
		return &Error{Key: "remote.storage.enable", Value: v, Message: "Tiered Storage functionality is disabled in the broker. Topic cannot be configured with remote log storage."}
	}
	if lo, hi := num(o, b, "min.compaction.lag.ms"), num(o, b, "max.compaction.lag.ms"); lo > hi {
		return &Error{Message: fmt.Sprintf("conflict topic config setting min.compaction.lag.ms (%d) > max.compaction.lag.ms (%d)", lo, hi)}
	}
	// Kafka 4.4 takes a local.retention.ms or .bytes above retention.ms
	// or .bytes at CreateTopics and AlterConfigs; so does strata: the
	// whole log's bound expires the segment first, local or not.
	return nil
}

// SplitList splits a LIST config's value at its commas, dropping blanks.
func SplitList(v string) []string {
	var out []string
	for _, s := range strings.Split(v, ",") {
		if s = strings.TrimSpace(s); s != "" {
			out = append(out, s)
		}
	}
	return out
}

func parseBool(v string) bool { return strings.EqualFold(strings.TrimSpace(v), "true") }

// Value is a key's value for a topic and where it comes from.
func Value(k Key, o Overrides, b Broker) (string, Source) {
	if v, ok := o[k.Name]; ok {
		return v, DynamicTopic
	}
	if v, ok := b[k.Name]; ok {
		return v, StaticBroker
	}
	return k.Default, Default
}

// Synonym is one of the places a value could come from, most specific
// first, as DescribeConfigs lists them.
type Synonym struct {
	Name, Value string
	Source      Source
}

// Entry is one config as DescribeConfigs shows it.
type Entry struct {
	Name, Value string
	Source      Source
	Type        Type
	ReadOnly    bool
	Synonyms    []Synonym
	Doc         string
}

// Describe lists every key for a topic: its value, its source and its
// synonyms.
func Describe(o Overrides, b Broker) []Entry {
	out := make([]Entry, 0, len(Keys))
	for _, k := range Keys {
		out = append(out, k.entry(o, b))
	}
	return out
}

func (k Key) entry(o Overrides, b Broker) Entry {
	v, src := Value(k, o, b)
	e := Entry{Name: k.Name, Value: v, Source: src, Type: k.Type, Doc: k.Doc}
	if tv, ok := o[k.Name]; ok {
		e.Synonyms = append(e.Synonyms, Synonym{k.Name, tv, DynamicTopic})
	}
	if k.Broker != "" {
		if bv, ok := b[k.Name]; ok {
			e.Synonyms = append(e.Synonyms, Synonym{k.Broker, bv, StaticBroker})
		}
		if k.DefaultSynonym {
			e.Synonyms = append(e.Synonyms, Synonym{k.Broker, k.Default, Default})
		}
	}
	return e
}

// DescribeBroker lists the broker's settings every key falls back to, by
// their broker names, as DescribeConfigs on the broker resource shows them.
func DescribeBroker(b Broker) []Entry {
	var out []Entry
	seen := map[string]bool{}
	for _, k := range Keys {
		if k.Broker == "" || seen[k.Broker] {
			continue
		}
		seen[k.Broker] = true
		e := Entry{Name: k.Broker, Value: k.Default, Source: Default, Type: k.Type, Doc: k.Doc, ReadOnly: true}
		if k.Name == "remote.storage.enable" {
			e.Value = "false" // the broker's switch, not the topics' default
		}
		if v, ok := b[k.Name]; ok {
			e.Value, e.Source = v, StaticBroker
			e.Synonyms = append(e.Synonyms, Synonym{k.Broker, v, StaticBroker})
		}
		if k.DefaultSynonym {
			e.Synonyms = append(e.Synonyms, Synonym{k.Broker, e.Value, Default})
			if e.Source == StaticBroker {
				e.Synonyms[len(e.Synonyms)-1].Value = k.Default
			}
		}
		out = append(out, e)
	}
	slices.SortFunc(out, func(a, b Entry) int { return strings.Compare(a.Name, b.Name) })
	return out
}

// Resolved is what a topic's configs come to, typed. -1 is "no bound"
// wherever Kafka uses it.
type Resolved struct {
	RetentionMs, RetentionBytes           int64
	LocalRetentionMs, LocalRetentionBytes int64 // -2 resolved to the whole log's
	RemoteStorage                         bool
	SegmentBytes                          int64
	SegmentMs                             int64
	MaxMessageBytes                       int32
	LogAppendTime                         bool
	MinInsyncReplicas                     int32
	CleanupPolicy                         string
	Engine                                string
	// FileModel is strata.file.model: "partition" or "shared".
	FileModel            string
	ParquetCodec         string
	ParquetRowGroupBytes int64
	// AcksAll is strata.acks.all: "isr" or "quorum".
	AcksAll string
	// UncleanLeaderElection is unclean.leader.election.enable.
	UncleanLeaderElection bool
	// ValueSchemaValidation is strata.value.schema.validation.
	ValueSchemaValidation bool
	// ValueSchema and KeySchema are strata.value.schema and
	// strata.key.schema: none, schema_id or subject:NAME.
	ValueSchema, KeySchema string
	// ColdTargetBytes is strata.cold.target_bytes (0: no merging).
	ColdTargetBytes int64
	// Cleaner is the log cleaner's configs (delete.retention.ms,
	// min.cleanable.dirty.ratio, min and max.compaction.lag.ms).
	Cleaner cleaner.Config
}

// Resolve turns a topic's overrides over the broker's settings over the
// defaults into typed values. Values are assumed valid (Check); one that is
// not falls back to the next source.
func Resolve(o Overrides, b Broker) Resolved {
	num := func(name string) int64 { return num(o, b, name) }
	str := func(name string) string {
		k, _ := Lookup(name)
		v, _ := Value(k, o, b)
		return strings.TrimSpace(v)
	}
	r := Resolved{
		RetentionMs: num("retention.ms"), RetentionBytes: num("retention.bytes"),
		LocalRetentionMs: num("local.retention.ms"), LocalRetentionBytes: num("local.retention.bytes"),
		RemoteStorage: parseBool(str("remote.storage.enable")),
		SegmentBytes:  num("segment.bytes"), SegmentMs: num("segment.ms"),
		MaxMessageBytes:   int32(num("max.message.bytes")),
		LogAppendTime:     str("message.timestamp.type") == "LogAppendTime",
		MinInsyncReplicas: int32(num("min.insync.replicas")),
		CleanupPolicy:     str("cleanup.policy"),
		Engine:            str("strata.engine"), ParquetCodec: str("strata.parquet.codec"),
		FileModel:             str("strata.file.model"),
		ParquetRowGroupBytes:  num("strata.parquet.row.group.bytes"),
		AcksAll:               str("strata.acks.all"),
		UncleanLeaderElection: parseBool(str("unclean.leader.election.enable")),
		ValueSchemaValidation: parseBool(str("strata.value.schema.validation")),
		ValueSchema:           str("strata.value.schema"), KeySchema: str("strata.key.schema"),
		ColdTargetBytes: num("strata.cold.target_bytes"),
	}
	ratio, _ := strconv.ParseFloat(str("min.cleanable.dirty.ratio"), 64)
	r.Cleaner = cleaner.Config{MinDirtyRatio: ratio,
		MinLag: millis(num("min.compaction.lag.ms")), MaxLag: millis(num("max.compaction.lag.ms")),
		DeleteRetention: millis(num("delete.retention.ms"))}
	if r.LocalRetentionMs == -2 {
		r.LocalRetentionMs = r.RetentionMs
	}
	if r.LocalRetentionBytes == -2 {
		r.LocalRetentionBytes = r.RetentionBytes
	}
	return r
}

// millis is a count of milliseconds as a duration; one too long for a
// duration (max.compaction.lag.ms's default, Long.MAX_VALUE) is the
// longest duration, which no lag reaches: never, not zero.
func millis(ms int64) time.Duration {
	if ms > math.MaxInt64/int64(time.Millisecond) {
		return math.MaxInt64
	}
	return time.Duration(ms) * time.Millisecond
}

// num is a numeric key's value: the topic's over the broker's over the
// default, a value that does not parse falling back to the next.
func num(o Overrides, b Broker, name string) int64 {
	for _, src := range []map[string]string{o, b} {
		if v, ok := src[name]; ok {
			if n, err := strconv.ParseInt(strings.TrimSpace(v), 10, 64); err == nil {
				return n
			}
		}
	}
	k, _ := Lookup(name)
	n, _ := strconv.ParseInt(k.Default, 10, 64)
	return n
}

// Unbounded writes a strata duration (ms) or size where 0 means "no bound"
// in Kafka's units, where -1 does.
func Unbounded(n int64) string {
	if n <= 0 {
		return "-1"
	}
	return strconv.FormatInt(n, 10)
}

// Never is segment.ms's value for "never by age" (strata's segment.max_age 0).
const Never = never
