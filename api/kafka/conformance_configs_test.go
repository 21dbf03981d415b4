package kafka

import (
	"context"
	"fmt"
	"slices"
	"strata/engine/record"
	"strings"
	"testing"
	"time"

	"github.com/twmb/franz-go/pkg/kerr"
	"github.com/twmb/franz-go/pkg/kgo"
	"github.com/twmb/franz-go/pkg/kmsg"
	"github.com/twmb/franz-go/pkg/kversion"
)

// What a client sees of a broker's topic configs: CreateTopics with
// configs (good and refused), DescribeConfigs with synonyms, AlterConfigs
// and IncrementalAlterConfigs (good and refused), and a LogAppendTime
// topic's timestamps.
type observedConfigs struct {
	CreateRefused  map[string]string // the configs given -> error code and message
	Created        []string          // the overridden configs CreateTopics answered
	CreateExisting string            // creating it again: Kafka's CLI prints the message
	Described      []string          // the keys asked for, with source, type and synonyms
	UnknownTopic   string
	AfterIncrement []string
	IncrementErrs  []string
	AfterAlter     []string
	AlterErrs      []string
	BrokerWrongID  string
	AppendTime     string
}

// The keys whose every answer both brokers should give alike (their
// defaults are Kafka's in both; min.insync.replicas is a dynamic broker
// default in KRaft, strata's is static).
var comparedKeys = []string{"cleanup.policy", "delete.retention.ms", "local.retention.bytes", "local.retention.ms", "max.compaction.lag.ms", "max.message.bytes",
	"message.timestamp.type", "min.cleanable.dirty.ratio", "min.compaction.lag.ms", "remote.storage.enable", "retention.bytes", "retention.ms", "segment.bytes", "segment.ms"}

func str(s string) *string { return &s }

func observeConfigs(ctx context.Context, t *testing.T, c *kgo.Client, addr, topic string) observedConfigs {
	var o observedConfigs
	create := func(name string, cfgs ...string) *kmsg.CreateTopicsResponseTopic {
		req := kmsg.NewPtrCreateTopicsRequest()
		req.TimeoutMillis = 10000
		rt := kmsg.NewCreateTopicsRequestTopic()
		rt.Topic, rt.NumPartitions, rt.ReplicationFactor = name, 1, 1
		for i := 0; i < len(cfgs); i += 2 {
			cc := kmsg.NewCreateTopicsRequestTopicConfig()
			cc.Name, cc.Value = cfgs[i], str(cfgs[i+1])
			rt.Configs = append(rt.Configs, cc)
		}
		req.Topics = append(req.Topics, rt)
		resp, err := req.RequestWith(ctx, c)
		if err != nil || len(resp.Topics) != 1 {
			t.Fatalf("%s: create topics: %v", addr, err)
		}
		return &resp.Topics[0]
	}
	o.CreateRefused = map[string]string{}
	for i, bad := range [][]string{
		{"no.such.key", "1"}, {"retention.ms", "abc"}, {"retention.ms", "-2"}, {"segment.bytes", "100"}, {"min.insync.replicas", "0"},
		{"message.timestamp.type", "Foo"}, {"cleanup.policy", "bogus"}, {"max.message.bytes", "-5"}, {"local.retention.ms", "-3"},
		{"remote.storage.enable", "true"}, {"remote.storage.enable", "maybe"},
		{"retention.ms", "1000", "local.retention.ms", "2000"},
		{"min.cleanable.dirty.ratio", "half"}, {"min.cleanable.dirty.ratio", "1.5"}, {"max.compaction.lag.ms", "0"}, {"delete.retention.ms", "-1"},
		{"min.compaction.lag.ms", "7200000", "max.compaction.lag.ms", "3600000"},
	} {
		rt := create(fmt.Sprintf("%s-bad%d", topic, i), bad...)
		o.CreateRefused[fmt.Sprint(bad)] = fmt.Sprintf("%d %s parts=%d", rt.ErrorCode, derefNull(rt.ErrorMessage), rt.NumPartitions)
	}
	rt := create(topic+"-cfg", "retention.ms", "3600000", "segment.bytes", "2000000", "message.timestamp.type", "LogAppendTime")
	if rt.ErrorCode != 0 || rt.NumPartitions != 1 || rt.ReplicationFactor != 1 || rt.Configs == nil {
		t.Fatalf("%s: create with configs: %+v", addr, rt)
	}
	for _, cfg := range rt.Configs {
		if cfg.Source == int8(kmsg.ConfigSourceDynamicTopicConfig) {
			o.Created = append(o.Created, fmt.Sprintf("%s=%s ro=%t sensitive=%t", cfg.Name, derefNull(cfg.Value), cfg.ReadOnly, cfg.IsSensitive))
		}
	}
	slices.Sort(o.Created)
	waitLeaders1(ctx, t, c, topic+"-cfg")
	rt = create(topic + "-cfg")
	o.CreateExisting = strings.ReplaceAll(fmt.Sprintf("%d %s parts=%d", rt.ErrorCode, derefNull(rt.ErrorMessage), rt.NumPartitions), topic, "T")

	describe := func(name string) ([]string, string) {
		req := kmsg.NewPtrDescribeConfigsRequest()
		req.IncludeSynonyms = true
		r := kmsg.NewDescribeConfigsRequestResource()
		r.ResourceType, r.ResourceName, r.ConfigNames = kmsg.ConfigResourceTypeTopic, name, comparedKeys
		req.Resources = append(req.Resources, r)
		resp, err := req.RequestWith(ctx, c)
		if err != nil || len(resp.Resources) != 1 {
			t.Fatalf("%s: describe configs: %v", addr, err)
		}
		var out []string
		for _, cfg := range resp.Resources[0].Configs {
			var syns []string
			for _, s := range cfg.ConfigSynonyms {
				syns = append(syns, fmt.Sprintf("%s=%s/%s", s.Name, derefNull(s.Value), s.Source))
			}
			out = append(out, fmt.Sprintf("%s=%s %s %s ro=%t sensitive=%t synonyms=%v", cfg.Name, derefNull(cfg.Value), cfg.Source, cfg.ConfigType, cfg.ReadOnly, cfg.IsSensitive, syns))
		}
		slices.Sort(out)
		return out, fmt.Sprintf("%d %s", resp.Resources[0].ErrorCode, derefNull(resp.Resources[0].ErrorMessage))
	}
	o.Described, _ = describe(topic + "-cfg")
	// Apache Kafka's controller applies an alter before the broker that
	// answers DescribeConfigs has it in its metadata, so an answer right
	// after an alter may still be the old one there: read until it changes.
	describeChanged := func(name string, was []string) []string {
		deadline := time.Now().Add(15 * time.Second)
		for {
			now, _ := describe(name)
			if !slices.Equal(now, was) || time.Now().After(deadline) {
				return now
			}
			time.Sleep(100 * time.Millisecond)
		}
	}
	_, o.UnknownTopic = describe(topic + "-nosuch")

	// Produce to the LogAppendTime topic: the answer carries the broker's
	// time, and the record reads back with it.
	before := time.Now().Add(-time.Second).UnixMilli()
	// (Produce v9: the last that names topics, as strata does.)
	pc, err := kgo.NewClient(kgo.SeedBrokers(addr), kgo.MaxVersions(kversion.V3_0_0()))
	if err != nil {
		t.Fatal(err)
	}
	defer pc.Close()
	req := kmsg.NewPtrProduceRequest()
	req.Acks, req.TimeoutMillis = -1, 10000
	pt := kmsg.NewProduceRequestTopic()
	pt.Topic = topic + "-cfg"
	pp := kmsg.NewProduceRequestTopicPartition()
	pp.Records = encodeBatch(nil, []record.Record{{Timestamp: 1_000_000, Key: []byte("k"), Value: []byte("v")}})
	pt.Partitions = append(pt.Partitions, pp)
	req.Topics = append(req.Topics, pt)
	presp, err := req.RequestWith(ctx, pc)
	if err != nil || presp.Topics[0].Partitions[0].ErrorCode != 0 {
		t.Fatalf("%s: produce to the LogAppendTime topic: %v %+v", addr, err, presp)
	}
	appendTime := presp.Topics[0].Partitions[0].LogAppendTime
	cons, err := kgo.NewClient(kgo.SeedBrokers(addr), kgo.ConsumeTopics(topic+"-cfg"), kgo.ConsumeResetOffset(kgo.NewOffset().AtStart()))
	if err != nil {
		t.Fatal(err)
	}
	defer cons.Close()
	fs := cons.PollFetches(ctx)
	if fs.Err() != nil || fs.NumRecords() != 1 {
		t.Fatalf("%s: consume the LogAppendTime topic: %v, %d records", addr, fs.Err(), fs.NumRecords())
	}
	rec := fs.Records()[0]
	o.AppendTime = fmt.Sprintf("append time answered %t; the record's timestamp is it %t, not the producer's %t",
		appendTime >= before, rec.Timestamp.UnixMilli() == appendTime, rec.Timestamp.UnixMilli() != 1_000_000)

	incr := func(resources ...kmsg.IncrementalAlterConfigsRequestResource) []string {
		req := kmsg.NewPtrIncrementalAlterConfigsRequest()
		req.Resources = resources
		resp, err := req.RequestWith(ctx, c)
		if err != nil {
			t.Fatalf("%s: incremental alter configs: %v", addr, err)
		}
		var out []string
		for _, r := range resp.Resources {
			out = append(out, strings.ReplaceAll(fmt.Sprintf("%s %d %s", r.ResourceName, r.ErrorCode, derefNull(r.ErrorMessage)), topic, "T"))
		}
		return out
	}
	res := func(name string, ops ...any) kmsg.IncrementalAlterConfigsRequestResource {
		r := kmsg.NewIncrementalAlterConfigsRequestResource()
		r.ResourceType, r.ResourceName = kmsg.ConfigResourceTypeTopic, name
		for i := 0; i < len(ops); i += 3 {
			cc := kmsg.NewIncrementalAlterConfigsRequestResourceConfig()
			cc.Name, cc.Op = ops[i].(string), ops[i+1].(kmsg.IncrementalAlterConfigOp)
			if v := ops[i+2].(string); v != "" {
				cc.Value = str(v)
			}
			r.Configs = append(r.Configs, cc)
		}
		return r
	}
	const set, del, app = kmsg.IncrementalAlterConfigOpSet, kmsg.IncrementalAlterConfigOpDelete, kmsg.IncrementalAlterConfigOpAppend
	o.IncrementErrs = append(o.IncrementErrs, incr(res(topic+"-cfg", "retention.ms", del, "", "segment.ms", set, "60000", "cleanup.policy", set, "delete"))...)
	o.AfterIncrement = describeChanged(topic+"-cfg", o.Described)
	o.IncrementErrs = append(o.IncrementErrs, incr(res(topic+"-cfg", "bad.key", set, "1"))...)
	o.IncrementErrs = append(o.IncrementErrs, incr(res(topic+"-cfg", "segment.ms", app, "1"))...)
	o.IncrementErrs = append(o.IncrementErrs, incr(res(topic+"-cfg", "segment.ms", set, "-7"))...)
	o.IncrementErrs = append(o.IncrementErrs, incr(res(topic+"-nosuch", "retention.ms", set, "1"))...)
	o.IncrementErrs = append(o.IncrementErrs, incr(res(topic+"-cfg", "retention.ms", set, "1"), res(topic+"-cfg", "segment.ms", set, "2"))...)

	// AlterConfigs replaces the whole set: what it leaves out goes back.
	alter := func(name string, cfgs ...string) string {
		req := kmsg.NewPtrAlterConfigsRequest()
		r := kmsg.NewAlterConfigsRequestResource()
		r.ResourceType, r.ResourceName = kmsg.ConfigResourceTypeTopic, name
		for i := 0; i < len(cfgs); i += 2 {
			cc := kmsg.NewAlterConfigsRequestResourceConfig()
			cc.Name, cc.Value = cfgs[i], str(cfgs[i+1])
			r.Configs = append(r.Configs, cc)
		}
		req.Resources = append(req.Resources, r)
		resp, err := req.RequestWith(ctx, c)
		if err != nil || len(resp.Resources) != 1 {
			t.Fatalf("%s: alter configs: %v", addr, err)
		}
		return strings.ReplaceAll(fmt.Sprintf("%d %s", resp.Resources[0].ErrorCode, derefNull(resp.Resources[0].ErrorMessage)), topic, "T")
	}
	o.AlterErrs = append(o.AlterErrs, alter(topic+"-cfg", "max.message.bytes", "5000"))
	o.AfterAlter = describeChanged(topic+"-cfg", o.AfterIncrement)
	o.AlterErrs = append(o.AlterErrs, alter(topic+"-cfg", "max.message.bytes", "x"), alter(topic+"-nosuch", "max.message.bytes", "1"))

	// The broker resource of another broker id is refused.
	dreq := kmsg.NewPtrDescribeConfigsRequest()
	r := kmsg.NewDescribeConfigsRequestResource()
	r.ResourceType, r.ResourceName = kmsg.ConfigResourceTypeBroker, "77"
	dreq.Resources = append(dreq.Resources, r)
	raw, err := c.DiscoveredBrokers()[0].Request(ctx, dreq)
	if err != nil {
		t.Fatal(err)
	}
	dresp := raw.(*kmsg.DescribeConfigsResponse)
	o.BrokerWrongID = kerr.ErrorForCode(dresp.Resources[0].ErrorCode).Error()
	return o
}

func waitLeaders1(ctx context.Context, t *testing.T, c *kgo.Client, topic string) {
	for {
		req := kmsg.NewPtrMetadataRequest()
		mt := kmsg.NewMetadataRequestTopic()
		mt.Topic = &topic
		req.Topics = append(req.Topics, mt)
		resp, err := req.RequestWith(ctx, c)
		if err == nil && len(resp.Topics) == 1 && resp.Topics[0].ErrorCode == 0 && len(resp.Topics[0].Partitions) > 0 && resp.Topics[0].Partitions[0].Leader >= 0 {
			return
		}
		select {
		case <-ctx.Done():
			t.Fatalf("topic %s has no leader", topic)
		case <-time.After(50 * time.Millisecond):
		}
	}
}

func derefNull(s *string) string {
	if s == nil {
		return "<null>"
	}
	return *s
}
