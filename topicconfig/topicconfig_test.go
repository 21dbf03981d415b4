package topicconfig

import (
	"math"
	"reflect"
	"slices"
	"strings"
	"testing"
	"time"

	"strata/cleaner"
)

func TestKeysAreSortedAndDocumented(t *testing.T) {
	if !slices.IsSortedFunc(Keys, func(a, b Key) int { return strings.Compare(a.Name, b.Name) }) {
		t.Fatal("Keys must be in name order: Lookup searches them")
	}
	for _, k := range Keys {
		if k.Doc == "" || k.Honoured == "" {
			t.Errorf("%s: no documentation or no word on what strata does with it", k.Name)
		}
		if err := k.validate(k.Default); err != nil {
			t.Errorf("%s: its default is invalid: %v", k.Name, err)
		}
	}
}

// Each refusal names the key and why, in Kafka's words (the messages an
// Apache Kafka 4.4 broker gives for the same values).
func TestCheck(t *testing.T) {
	tiering := Broker{"remote.storage.enable": "true"}
	for _, tc := range []struct {
		o    Overrides
		b    Broker
		want string // "" accepted
	}{
		{Overrides{"retention.ms": "3600000", "segment.bytes": "2000000", "message.timestamp.type": "LogAppendTime"}, nil, ""},
		{Overrides{"no.such.key": "1"}, nil, "Unknown topic config name: no.such.key"},
		{Overrides{"retention.ms": "abc"}, nil, "Invalid value abc for configuration retention.ms: Not a number of type LONG"},
		{Overrides{"retention.ms": "-2"}, nil, "Invalid value -2 for configuration retention.ms: Value must be at least -1"},
		{Overrides{"segment.bytes": "100"}, nil, "Invalid value 100 for configuration segment.bytes: Value must be at least 1048576"},
		{Overrides{"segment.bytes": "4294967296"}, nil, "Invalid value 4294967296 for configuration segment.bytes: Not a number of type INT"},
		{Overrides{"min.insync.replicas": "0"}, nil, "Invalid value 0 for configuration min.insync.replicas: Value must be at least 1"},
		{Overrides{"message.timestamp.type": "Foo"}, nil, "Invalid value Foo for configuration message.timestamp.type: String must be one of: CreateTime, LogAppendTime"},
		{Overrides{"cleanup.policy": "bogus"}, nil, "Invalid value bogus for configuration cleanup.policy: String must be one of: compact, delete"},
		{Overrides{"cleanup.policy": "compact"}, nil, "Invalid value compact for configuration cleanup.policy: strata does not compact logs yet: use delete"},
		{Overrides{"cleanup.policy": "delete,compact"}, nil, "Invalid value delete,compact for configuration cleanup.policy: strata does not compact logs yet: use delete"},
		{Overrides{"cleanup.policy": "delete"}, nil, ""},
		{Overrides{"min.cleanable.dirty.ratio": "0.25", "delete.retention.ms": "0", "min.compaction.lag.ms": "60000", "max.compaction.lag.ms": "3600000"}, nil, ""},
		{Overrides{"min.cleanable.dirty.ratio": "half"}, nil, "Invalid value half for configuration min.cleanable.dirty.ratio: Not a number of type DOUBLE"},
		{Overrides{"min.cleanable.dirty.ratio": "NaN"}, nil, "Invalid value NaN for configuration min.cleanable.dirty.ratio: Not a number of type DOUBLE"},
		{Overrides{"min.cleanable.dirty.ratio": "1.5"}, nil, "Invalid value 1.5 for configuration min.cleanable.dirty.ratio: Value must be no more than 1"},
		{Overrides{"min.cleanable.dirty.ratio": "-0.1"}, nil, "Invalid value -0.1 for configuration min.cleanable.dirty.ratio: Value must be at least 0"},
		{Overrides{"max.compaction.lag.ms": "0"}, nil, "Invalid value 0 for configuration max.compaction.lag.ms: Value must be at least 1"},
		{Overrides{"delete.retention.ms": "-1"}, nil, "Invalid value -1 for configuration delete.retention.ms: Value must be at least 0"},
		{Overrides{"min.compaction.lag.ms": "7200000", "max.compaction.lag.ms": "3600000"}, nil, "conflict topic config setting min.compaction.lag.ms (7200000) > max.compaction.lag.ms (3600000)"},
		{Overrides{"min.compaction.lag.ms": "7200000"}, Broker{"max.compaction.lag.ms": "3600000"}, "conflict topic config setting min.compaction.lag.ms (7200000) > max.compaction.lag.ms (3600000)"},
		{Overrides{"max.message.bytes": "-5"}, nil, "Invalid value -5 for configuration max.message.bytes: Value must be at least 0"},
		{Overrides{"max.message.bytes": "2000000000"}, nil, "Invalid value 2000000000 for configuration max.message.bytes: Value must be no more than 1073741824"},
		{Overrides{"local.retention.ms": "-3"}, nil, "Invalid value -3 for configuration local.retention.ms: Value must be at least -2"},
		{Overrides{"remote.storage.enable": "yes"}, tiering, "Invalid value yes for configuration remote.storage.enable: Expected value to be either true or false"},
		{Overrides{"remote.storage.enable": "true"}, nil, "Tiered Storage functionality is disabled in the broker. Topic cannot be configured with remote log storage."},
		{Overrides{"remote.storage.enable": "true"}, tiering, ""},
		{Overrides{"remote.storage.enable": "false"}, nil, ""},
		{Overrides{"retention.ms": "1000", "local.retention.ms": "2000"}, tiering, ""}, // as Kafka 4.4
		{Overrides{"retention.bytes": "100", "local.retention.bytes": "200"}, nil, ""},
		{Overrides{"strata.engine": "memory"}, nil, ""},
		{Overrides{"strata.engine": "rocks"}, nil, "Invalid value rocks for configuration strata.engine: String must be one of: segment, memory, pebble"},
		{Overrides{"strata.parquet.row.group.bytes": "10"}, nil, "Invalid value 10 for configuration strata.parquet.row.group.bytes: Value must be at least 4096"},
		{Overrides{"unclean.leader.election.enable": "true"}, nil, ""},
		{Overrides{"unclean.leader.election.enable": " FALSE "}, nil, ""},
		{Overrides{"unclean.leader.election.enable": "sometimes"}, nil, "Invalid value sometimes for configuration unclean.leader.election.enable: Expected value to be either true or false"},
		{Overrides{"strata.acks.all": "quorum"}, nil, ""},
		{Overrides{"strata.acks.all": "isr"}, nil, ""},
		{Overrides{"strata.file.model": "partition"}, nil, ""},
		{Overrides{"strata.file.model": "shared"}, nil, ""},
		{Overrides{"strata.file.model": "pooled"}, nil, "Invalid value pooled for configuration strata.file.model: String must be one of: partition, shared"},
		{Overrides{"strata.value.schema": "schema_id", "strata.key.schema": "subject:orders-key"}, nil, ""},
		{Overrides{"strata.value.schema": "none"}, nil, ""},
		{Overrides{"strata.value.schema": "subject:"}, nil, "Invalid value subject: for configuration strata.value.schema: String must be none, schema_id or subject:NAME"},
		{Overrides{"strata.key.schema": "avro"}, nil, "Invalid value avro for configuration strata.key.schema: String must be none, schema_id or subject:NAME"},
		{Overrides{"strata.key.schema": "subject:\x01x"}, nil, "Invalid value subject:\x01x for configuration strata.key.schema: String must be none, schema_id or subject:NAME, NAME without control characters"},
		{Overrides{"strata.acks.all": "majority"}, nil, "Invalid value majority for configuration strata.acks.all: String must be one of: isr, quorum"},
	} {
		err := Check(tc.o, tc.b)
		got := ""
		if err != nil {
			got = err.Error()
		}
		if got != tc.want {
			t.Errorf("Check(%v, broker %v):\n got %q\nwant %q", tc.o, tc.b, got, tc.want)
		}
	}
}

// A topic's override wins over the broker's setting, which wins over the
// default; the source and the synonyms say which one a value came from.
// The cleaner's configs resolve as Kafka's defaults say, and a topic's own
// over the broker's.
func TestResolveCleaner(t *testing.T) {
	for _, tc := range []struct {
		o    Overrides
		b    Broker
		want cleaner.Config
	}{
		{nil, nil, cleaner.Config{MinDirtyRatio: 0.5, DeleteRetention: 24 * time.Hour, MaxLag: math.MaxInt64}}, // max.compaction.lag.ms: Long.MAX_VALUE, never
		// Long.MAX_VALUE is past any duration: the longest one, never zero
		// (a delete.retention.ms of "forever" must not drop tombstones at once).
		{Overrides{"delete.retention.ms": "9223372036854775807", "min.compaction.lag.ms": "9223372036854775807"}, nil,
			cleaner.Config{MinDirtyRatio: 0.5, DeleteRetention: math.MaxInt64, MinLag: math.MaxInt64, MaxLag: math.MaxInt64}},
		{Overrides{"min.cleanable.dirty.ratio": " 0.1 ", "min.compaction.lag.ms": "1000", "max.compaction.lag.ms": "7200000", "delete.retention.ms": "0"},
			Broker{"min.cleanable.dirty.ratio": "0.9", "delete.retention.ms": "5000"},
			cleaner.Config{MinDirtyRatio: 0.1, MinLag: time.Second, MaxLag: 2 * time.Hour}},
		{nil, Broker{"min.cleanable.dirty.ratio": "0.9", "delete.retention.ms": "5000"}, cleaner.Config{MinDirtyRatio: 0.9, DeleteRetention: 5 * time.Second, MaxLag: math.MaxInt64}},
	} {
		if got := Resolve(tc.o, tc.b).Cleaner; got != tc.want {
			t.Errorf("Resolve(%v, broker %v).Cleaner = %+v; want %+v", tc.o, tc.b, got, tc.want)
		}
	}
}

func TestDescribeSourcesAndSynonyms(t *testing.T) {
	b := Broker{"segment.bytes": "8388608", "retention.ms": "-1"}
	o := Overrides{"segment.bytes": "2000000", "max.message.bytes": "5000"}
	got := map[string]Entry{}
	for _, e := range Describe(o, b) {
		got[e.Name] = e
	}
	if len(got) != len(Keys) {
		t.Fatalf("described %d keys, there are %d", len(got), len(Keys))
	}
	for _, tc := range []struct {
		name  string
		value string
		src   Source
		syns  []Synonym
	}{
		{"segment.bytes", "2000000", DynamicTopic, []Synonym{{"segment.bytes", "2000000", DynamicTopic}, {"log.segment.bytes", "8388608", StaticBroker}, {"log.segment.bytes", "1073741824", Default}}},
		{"max.message.bytes", "5000", DynamicTopic, []Synonym{{"max.message.bytes", "5000", DynamicTopic}, {"message.max.bytes", "1048588", Default}}},
		{"retention.ms", "-1", StaticBroker, []Synonym{{"log.retention.ms", "-1", StaticBroker}}},
		{"message.timestamp.type", "CreateTime", Default, []Synonym{{"log.message.timestamp.type", "CreateTime", Default}}},
		{"segment.ms", "604800000", Default, nil},
		{"unclean.leader.election.enable", "false", Default, []Synonym{{"unclean.leader.election.enable", "false", Default}}},
		{"strata.acks.all", "isr", Default, nil},
	} {
		e := got[tc.name]
		if e.Value != tc.value || e.Source != tc.src || !reflect.DeepEqual(e.Synonyms, tc.syns) {
			t.Errorf("%s: %q from %s, synonyms %v; want %q from %s, synonyms %v", tc.name, e.Value, e.Source, e.Synonyms, tc.value, tc.src, tc.syns)
		}
	}
	r := Resolve(o, b)
	if r.SegmentBytes != 2000000 || r.MaxMessageBytes != 5000 || r.RetentionMs != -1 || r.LocalRetentionMs != -1 || r.LogAppendTime || r.RemoteStorage {
		t.Fatalf("resolved %+v", r)
	}
	if r.AcksAll != "isr" || r.UncleanLeaderElection {
		t.Fatalf("replication defaults resolved %+v", r)
	}
	r = Resolve(Overrides{"strata.acks.all": "quorum"}, Broker{"unclean.leader.election.enable": "true"})
	if r.AcksAll != "quorum" || !r.UncleanLeaderElection {
		t.Fatalf("strata.acks.all=quorum over a broker's unclean elections resolved %+v", r)
	}
	r = Resolve(Overrides{"unclean.leader.election.enable": "false"}, Broker{"unclean.leader.election.enable": "true"})
	if r.UncleanLeaderElection {
		t.Fatalf("the topic's false does not win over the broker's true: %+v", r)
	}
	r = Resolve(Overrides{"local.retention.ms": "60000", "message.timestamp.type": "LogAppendTime", "remote.storage.enable": "true"}, Broker{"retention.bytes": "500"})
	if r.LocalRetentionMs != 60000 || r.LocalRetentionBytes != 500 || !r.LogAppendTime || !r.RemoteStorage || r.RetentionMs != 604800000 {
		t.Fatalf("resolved %+v", r)
	}
}

func TestDescribeBroker(t *testing.T) {
	got := map[string]Entry{}
	for _, e := range DescribeBroker(Broker{"segment.bytes": "8388608", "remote.storage.enable": "true"}) {
		got[e.Name] = e
	}
	if e := got["log.segment.bytes"]; e.Value != "8388608" || e.Source != StaticBroker ||
		!reflect.DeepEqual(e.Synonyms, []Synonym{{"log.segment.bytes", "8388608", StaticBroker}, {"log.segment.bytes", "1073741824", Default}}) {
		t.Errorf("log.segment.bytes: %+v", e)
	}
	if e := got["remote.log.storage.system.enable"]; e.Value != "true" || e.Source != StaticBroker {
		t.Errorf("remote.log.storage.system.enable: %+v", e)
	}
	if e := got["message.max.bytes"]; e.Value != "1048588" || e.Source != Default {
		t.Errorf("message.max.bytes: %+v", e)
	}
}
