package main

import (
	"context"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"
	"time"

	pq "github.com/parquet-go/parquet-go"
	"github.com/parquet-go/parquet-go/format"
	"github.com/twmb/franz-go/pkg/kadm"
	"github.com/twmb/franz-go/pkg/kerr"
	"github.com/twmb/franz-go/pkg/kgo"

	"strata/api/admin"
	"strata/catalog"
)

// The topic configs TestTopicConfigsHonoured leaves out, each honoured by
// `strata serve` as a user would check it: through Kafka clients, the
// operator view, the data folder and the bucket.

// honourHarness is one `strata serve` with a Kafka client and the operator
// view's calls.
type honourHarness struct {
	t    *testing.T
	s    served
	dir  string
	sets []string
	cl   *kgo.Client
	adm  *kadm.Client
	ctx  context.Context
}

func newHonourHarness(t *testing.T, sets ...string) *honourHarness {
	ctx, cancel := context.WithTimeout(context.Background(), 3*time.Minute)
	t.Cleanup(cancel)
	h := &honourHarness{t: t, sets: sets, ctx: ctx}
	h.start(startServe(t, sets...))
	h.dir = strings.TrimPrefix(h.s.sets[0], "data_dir=")
	return h
}

func (h *honourHarness) start(s served) {
	h.s = s
	cl, err := kgo.NewClient(kgo.SeedBrokers(s.Kafka), kgo.RecordPartitioner(kgo.ManualPartitioner()), kgo.ProducerLinger(0))
	if err != nil {
		h.t.Fatal(err)
	}
	h.t.Cleanup(cl.Close)
	h.cl, h.adm = cl, kadm.NewClient(cl)
}

// restart stops the service and starts it again on the same data folder
// and bucket.
func (h *honourHarness) restart() {
	h.t.Helper()
	h.cl.Close()
	if err := h.s.stop(); err != nil {
		h.t.Fatalf("stop: %v", err)
	}
	h.start(startServe(h.t, append([]string{"data_dir=" + h.dir, "cold.local.dir=" + h.dir + "/cold"}, h.sets...)...))
}

func (h *honourHarness) create(topic string, cfgs ...string) {
	h.t.Helper()
	m := map[string]*string{}
	for i := 0; i < len(cfgs); i += 2 {
		v := cfgs[i+1]
		m[cfgs[i]] = &v
	}
	resp, err := h.adm.CreateTopic(h.ctx, 1, 1, m, topic)
	if err != nil || resp.Err != nil {
		h.t.Fatalf("create %s %v: %v %v", topic, cfgs, err, resp.Err)
	}
}

// record i of a topic: its key, value, header and timestamp say i.
func honourRecord(topic string, i int, ts time.Time) *kgo.Record {
	return &kgo.Record{Topic: topic, Key: []byte(fmt.Sprintf("k%03d", i)),
		Value:     []byte(fmt.Sprintf("%s-%03d %s", topic, i, strings.Repeat("p", 40))),
		Headers:   []kgo.RecordHeader{{Key: "i", Value: []byte(fmt.Sprint(i))}},
		Timestamp: ts.Add(time.Duration(i) * time.Millisecond)}
}

// produce writes records from..to-1 of topic, one at a time, so that
// segments roll between them.
func (h *honourHarness) produce(topic string, from, to int, ts time.Time) {
	h.t.Helper()
	for i := from; i < to; i++ {
		res := h.cl.ProduceSync(h.ctx, honourRecord(topic, i, ts))
		if err := res.FirstErr(); err != nil {
			h.t.Fatalf("produce %s #%d: %v", topic, i, err)
		}
		if got := res[0].Record.Offset; got != int64(i) {
			h.t.Fatalf("produce %s #%d: offset %d", topic, i, got)
		}
	}
}

// consume reads topic's partition 0 from offset from up to its high
// watermark and checks every record is the one produced at its offset.
func (h *honourHarness) consume(what, topic string, from, to int, ts time.Time) {
	h.t.Helper()
	c, err := kgo.NewClient(kgo.SeedBrokers(h.s.Kafka),
		kgo.ConsumePartitions(map[string]map[int32]kgo.Offset{topic: {0: kgo.NewOffset().At(int64(from))}}))
	if err != nil {
		h.t.Fatal(err)
	}
	defer c.Close()
	next := from
	for next < to {
		fs := c.PollFetches(h.ctx)
		if err := fs.Err(); err != nil {
			h.t.Fatalf("%s: consume %s from %d: %v (at %d)", what, topic, from, err, next)
		}
		for _, r := range fs.Records() {
			want := honourRecord(topic, next, ts)
			if r.Offset != int64(next) || string(r.Key) != string(want.Key) || string(r.Value) != string(want.Value) ||
				len(r.Headers) != 1 || string(r.Headers[0].Value) != fmt.Sprint(next) || !r.Timestamp.Equal(want.Timestamp.Truncate(time.Millisecond)) {
				h.t.Fatalf("%s: %s offset %d: key %q value %q headers %v time %v; want offset %d key %q value %q time %v",
					what, topic, r.Offset, r.Key, r.Value, r.Headers, r.Timestamp, next, want.Key, want.Value, want.Timestamp)
			}
			next++
		}
	}
}

func (h *honourHarness) offsets(topic string) (start, end int64) {
	h.t.Helper()
	s, err := h.adm.ListStartOffsets(h.ctx, topic)
	if err != nil {
		h.t.Fatal(err)
	}
	e, err := h.adm.ListEndOffsets(h.ctx, topic)
	if err != nil {
		h.t.Fatal(err)
	}
	so, _ := s.Lookup(topic, 0)
	eo, _ := e.Lookup(topic, 0)
	if so.Err != nil || eo.Err != nil {
		h.t.Fatalf("list offsets of %s: %v %v", topic, so.Err, eo.Err)
	}
	return so.Offset, eo.Offset
}

func (h *honourHarness) tierRun() string {
	h.t.Helper()
	var out strings.Builder
	if err := tierCmd([]string{"run", "--admin-addr", h.s.Admin}, &out); err != nil {
		h.t.Fatalf("strata tier run: %v\n%s", err, out.String())
	}
	return out.String()
}

func (h *honourHarness) view(topic string) admin.PartitionView {
	h.t.Helper()
	var v admin.TopicView
	if err := adminCall(h.s.Admin, "GET", "/v1/topics/"+topic, nil, &v); err != nil || len(v.Partitions) != 1 {
		h.t.Fatalf("GET /v1/topics/%s: %v %+v", topic, err, v)
	}
	return v.Partitions[0]
}

func (h *honourHarness) alter(topic, set string) {
	h.t.Helper()
	var out strings.Builder
	if err := topicCmd([]string{"alter", topic, "--set", set, "--admin-addr", h.s.Admin}, &out); err != nil {
		h.t.Fatalf("strata topic alter %s --set %s: %v\n%s", topic, set, err, out.String())
	}
}

// coldObjects lists a topic's Parquet objects in the bucket (a local
// folder here), by name.
func (h *honourHarness) coldObjects(topic string) []string {
	h.t.Helper()
	var out []string
	filepath.WalkDir(filepath.Join(h.dir, "cold"), func(path string, d os.DirEntry, err error) error {
		if err == nil && !d.IsDir() && strings.HasSuffix(path, ".parquet") && strings.Contains(path, "topic="+topic+string(filepath.Separator)) {
			out = append(out, path)
		}
		return nil
	})
	slices.Sort(out)
	return out
}

// A topic's strata.engine, given at creation through the Kafka Admin API,
// is the engine its partitions live in: produce and fetch work the same
// in each (keys, values, headers, timestamps, offsets); the segment
// engine's records are files in the data folder and tier, the Pebble
// engine's are in its database and do not; after a restart the segment and
// Pebble topics have every record and take more after them, while the
// memory topic, as that engine promises, is gone.
func TestTopicEngineHonoured(t *testing.T) {
	h := newHonourHarness(t, "segment.max_bytes=4KiB", "segment.roll_check_interval=5", "tiering.enabled=false",
		"tiering.min_sealed_age=0s", "tiering.local_retention=0s")
	ts := time.Now().Add(-time.Minute).Truncate(time.Millisecond)
	engines := []string{"segment", "pebble", "memory"}
	for _, e := range engines {
		h.create("in"+e, "strata.engine", e)
	}
	cfgs, err := h.adm.DescribeTopicConfigs(h.ctx, "inmemory", "inpebble", "insegment")
	if err != nil {
		t.Fatal(err)
	}
	for _, rc := range cfgs {
		for _, c := range rc.Configs {
			if c.Key == "strata.engine" && (c.Value == nil || "in"+*c.Value != rc.Name || c.Source.String() != "DYNAMIC_TOPIC_CONFIG") {
				t.Fatalf("%s: DescribeConfigs shows strata.engine=%v from %s", rc.Name, c.MaybeValue(), c.Source)
			}
		}
	}
	for _, e := range engines {
		h.produce("in"+e, 0, 200, ts)
		h.consume("before a restart", "in"+e, 0, 200, ts)
	}

	// Where the records are: the segment engine's shard folder holds
	// segment files; the others have none.
	for _, e := range engines {
		segs, _ := filepath.Glob(filepath.Join(h.dir, "in"+e+"-0", "*.msg"))
		if (e == "segment") != (len(segs) > 0) {
			t.Errorf("in%s: %d segment files in the data folder", e, len(segs))
		}
	}
	if n := countFiles(t, filepath.Join(h.dir, "pebble-engine")); n == 0 {
		t.Errorf("the Pebble engine's database is empty")
	}
	// Only the segment engine's sealed segments tier.
	h.tierRun()
	for _, e := range engines {
		objs := h.coldObjects("in" + e)
		if (e == "segment") != (len(objs) > 0) {
			t.Errorf("in%s: %d objects in the bucket after a tiering run", e, len(objs))
		}
	}
	h.consume("after tiering", "insegment", 0, 200, ts)

	h.restart()
	for _, e := range []string{"segment", "pebble"} {
		if start, end := h.offsets("in" + e); start != 0 || end != 200 {
			t.Errorf("in%s after a restart: offsets %d..%d, want 0..200", e, start, end)
		}
		h.consume("after a restart", "in"+e, 0, 200, ts)
		h.produce("in"+e, 200, 220, ts)
		h.consume("after a restart and more records", "in"+e, 0, 220, ts)
	}
	// The memory engine keeps nothing across a restart: on a single node a
	// topic is its partitions, so the memory topic is gone with its
	// records (docs/engine.md), and its name can be taken again.
	if topics, err := h.adm.ListTopics(h.ctx); err != nil || topics.Has("inmemory") || !topics.Has("inpebble") {
		t.Errorf("after a restart the topics are %v (%v): want inmemory gone, inpebble and insegment kept", topics.Names(), err)
	}
	h.create("inmemory", "strata.engine", "memory")
	h.produce("inmemory", 0, 50, ts)
	h.consume("created again after a restart", "inmemory", 0, 50, ts)
}

// segments is a shard's segments as the catalog has them (the admin API).
func (h *honourHarness) segments(shard string) []catalog.Segment {
	h.t.Helper()
	var segs []catalog.Segment
	if err := adminCall(h.s.Admin, "GET", "/v1/shards/"+shard+"/segments", nil, &segs); err != nil {
		h.t.Fatalf("GET /v1/shards/%s/segments: %v", shard, err)
	}
	return slices.DeleteFunc(segs, func(s catalog.Segment) bool { return s.State == catalog.Deleted })
}

func sizes(segs []catalog.Segment, keep func(catalog.Segment) bool) int64 {
	var n int64
	for _, s := range segs {
		if keep(s) {
			n += s.Size
		}
	}
	return n
}

func states(segs []catalog.Segment) string {
	var out []string
	for _, s := range segs {
		out = append(out, fmt.Sprintf("%d:%s[%d-%d]%dB", s.No, s.State, s.StartOffset, s.EndOffset, s.Size))
	}
	return strings.Join(out, " ")
}

// retention.bytes bounds the whole log, local and cold together (KIP-405):
// with every sealed segment already in the bucket and its local copy gone,
// the local log is one active segment, far under the bound, yet the oldest
// cold objects are deleted from the bucket until the whole log fits, and
// the low watermark rises to the first offset kept. What is kept reads
// back through Kafka; what went answers OFFSET_OUT_OF_RANGE.
func TestRetentionBytesHonoured(t *testing.T) {
	// The objects leave the bucket with the retention, not a delay later
	// (icetable's TestRemovedFilesStayForTheDelay).
	h := newHonourHarness(t, "segment.max_bytes=4KiB", "segment.roll_check_interval=5", "tiering.enabled=false",
		"tiering.min_sealed_age=0s", "tiering.local_retention=0s", "iceberg.file_delete_delay=0s")
	ts := time.Now().Add(-time.Minute).Truncate(time.Millisecond)
	h.create("bounded")
	h.create("unbounded")
	for _, topic := range []string{"bounded", "unbounded"} {
		h.produce(topic, 0, 300, ts)
	}
	h.tierRun()
	before := h.segments("bounded-0")
	objects := h.coldObjects("bounded")
	const bound = 8192
	local := sizes(before, func(s catalog.Segment) bool { return s.State.Local() })
	total := sizes(before, func(catalog.Segment) bool { return true })
	if local >= bound || total <= 2*bound || len(objects) < 4 {
		t.Fatalf("before retention.bytes: local %dB, whole log %dB, %d objects: want the local log under %d, the whole log well over it:\n%s",
			local, total, len(objects), bound, states(before))
	}

	// Set at runtime, through the operator's CLI; the next pass applies it.
	h.alter("bounded", fmt.Sprint("retention.bytes=", bound))
	h.tierRun()
	after := h.segments("bounded-0")
	kept := sizes(after, func(catalog.Segment) bool { return true })
	if kept > bound || len(after) < 2 {
		t.Fatalf("after retention.bytes=%d: the whole log keeps %dB in %d segments:\n%s", bound, kept, len(after), states(after))
	}
	// The oldest went, and no more of them than the bound asks.
	gone := len(before) - len(after)
	if gone <= 0 || after[0].No != before[gone].No || kept+before[gone-1].Size <= bound {
		t.Fatalf("after retention.bytes=%d: want the oldest segments gone, only as many as needed:\nbefore: %s\nafter:  %s", bound, states(before), states(after))
	}
	for _, s := range before[:gone] {
		if _, err := os.Stat(filepath.Join(h.dir, "cold", s.ObjectKey)); !os.IsNotExist(err) {
			t.Errorf("segment %d expired, but its object %s is still in the bucket (%v)", s.No, s.ObjectKey, err)
		}
	}
	if left := h.coldObjects("bounded"); len(left) != len(objects)-gone {
		t.Errorf("%d objects of bounded in the bucket, want %d of %d", len(left), len(objects)-gone, len(objects))
	}
	low := int64(after[0].StartOffset)
	if start, end := h.offsets("bounded"); start != low || end != 300 {
		t.Errorf("after retention.bytes: ListOffsets says %d..%d, want %d..300", start, end, low)
	}
	if v := h.view("bounded"); v.LowWatermark != uint64(low) {
		t.Errorf("the operator view's low watermark is %d, want %d", v.LowWatermark, low)
	}
	h.consume("from the new low watermark", "bounded", int(low), 300, ts)
	c, err := kgo.NewClient(kgo.SeedBrokers(h.s.Kafka), kgo.ConsumeResetOffset(kgo.NoResetOffset()),
		kgo.ConsumePartitions(map[string]map[int32]kgo.Offset{"bounded": {0: kgo.NewOffset().At(0)}}))
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	if err := c.PollFetches(h.ctx).Err(); !errors.Is(err, kerr.OffsetOutOfRange) {
		t.Errorf("fetching offset 0, expired: %v, want OFFSET_OUT_OF_RANGE", err)
	}
	// The other topic, without the bound, keeps everything.
	if start, end := h.offsets("unbounded"); start != 0 || end != 300 {
		t.Errorf("unbounded: ListOffsets says %d..%d, want 0..300", start, end)
	}
}

// local.retention.bytes bounds a partition's local copies only: while the
// topic does not tier, nothing is dropped however far over the bound it
// is; once it tiers, the oldest uploaded copies go until the local log
// fits, no more, and every offset still reads, the dropped ones from the
// bucket. A topic without the bound keeps its copies (the broker's
// tiering.local_retention is an hour).
func TestLocalRetentionBytesHonoured(t *testing.T) {
	h := newHonourHarness(t, "segment.max_bytes=4KiB", "segment.roll_check_interval=5", "tiering.enabled=false",
		"tiering.min_sealed_age=0s", "tiering.local_retention=1h")
	ts := time.Now().Add(-time.Minute).Truncate(time.Millisecond)
	const bound = 6000
	h.create("capped", "remote.storage.enable", "false", "local.retention.bytes", fmt.Sprint(bound))
	h.create("uncapped")
	for _, topic := range []string{"capped", "uncapped"} {
		h.produce(topic, 0, 300, ts)
	}
	h.tierRun()
	segs := h.segments("capped-0")
	if local := sizes(segs, func(s catalog.Segment) bool { return s.State.Local() }); local <= 3*bound ||
		slices.ContainsFunc(segs, func(s catalog.Segment) bool { return !s.State.Local() || s.State == catalog.Cold }) {
		t.Fatalf("capped, not tiering: want every segment local (%dB), none uploaded or dropped:\n%s", local, states(segs))
	}

	h.alter("capped", "remote.storage.enable=true")
	h.tierRun()
	segs = h.segments("capped-0")
	local := sizes(segs, func(s catalog.Segment) bool { return s.State.Local() })
	// Remote (dropped) first, then cold copies kept, then the active one.
	firstLocal := slices.IndexFunc(segs, func(s catalog.Segment) bool { return s.State.Local() })
	if local > bound || firstLocal < 1 || segs[len(segs)-1].State != catalog.Active ||
		slices.ContainsFunc(segs[:firstLocal], func(s catalog.Segment) bool { return s.State != catalog.Remote }) ||
		slices.ContainsFunc(segs[firstLocal:len(segs)-1], func(s catalog.Segment) bool { return s.State != catalog.Cold }) ||
		local+segs[firstLocal-1].Size <= bound {
		t.Fatalf("capped, tiering, local.retention.bytes=%d: local %dB; want the oldest copies dropped after their upload, only as many as needed:\n%s",
			bound, local, states(segs))
	}
	if start, end := h.offsets("capped"); start != 0 || end != 300 {
		t.Errorf("capped: ListOffsets says %d..%d, want 0..300: local retention drops no offset", start, end)
	}
	h.consume("dropped copies read from the bucket", "capped", 0, 300, ts)

	segs = h.segments("uncapped-0")
	if slices.ContainsFunc(segs, func(s catalog.Segment) bool { return s.State == catalog.Remote }) || len(h.coldObjects("uncapped")) < 4 {
		t.Errorf("uncapped: want every sealed segment uploaded and its local copy kept:\n%s", states(segs))
	}
}

// strata.parquet.codec and strata.parquet.row.group.bytes shape the
// topic's objects in the bucket: the footer of each object written under
// them says the codec of every column chunk and has row groups of about
// that size; a topic without them has the broker's (zstd, 1 MiB). A change
// applies from the next upload: objects already written keep theirs. The
// objects read back through Kafka once their local copies are gone.
func TestParquetOptionsHonoured(t *testing.T) {
	h := newHonourHarness(t, "segment.max_bytes=64KiB", "segment.roll_check_interval=5", "tiering.enabled=false",
		"tiering.min_sealed_age=0s", "tiering.local_retention=0s")
	ts := time.Now().Add(-time.Minute).Truncate(time.Millisecond)
	h.create("plain")
	h.create("small", "strata.parquet.codec", "snappy", "strata.parquet.row.group.bytes", "4096")
	for _, topic := range []string{"plain", "small"} {
		h.produce(topic, 0, 800, ts)
	}
	h.tierRun()

	type shape struct {
		codecs    []format.CompressionCodec // of every column chunk
		rowGroups int
		rows      int64
	}
	footer := func(path string) shape {
		t.Helper()
		f, err := os.Open(path)
		if err != nil {
			t.Fatal(err)
		}
		defer f.Close()
		st, _ := f.Stat()
		pf, err := pq.OpenFile(f, st.Size())
		if err != nil {
			t.Fatalf("%s: %v", path, err)
		}
		var s shape
		md := pf.Metadata()
		s.rowGroups, s.rows = len(md.RowGroups), md.NumRows
		for _, rg := range md.RowGroups {
			for _, c := range rg.Columns {
				if !slices.Contains(s.codecs, c.MetaData.Codec) {
					s.codecs = append(s.codecs, c.MetaData.Codec)
				}
			}
		}
		return s
	}
	check := func(topic string, objs []string, codec format.CompressionCodec, minGroups, maxGroups int) {
		t.Helper()
		if len(objs) == 0 {
			t.Fatalf("%s: no objects in the bucket", topic)
		}
		for _, o := range objs {
			s := footer(o)
			if !slices.Equal(s.codecs, []format.CompressionCodec{codec}) || s.rowGroups < minGroups || s.rowGroups > maxGroups {
				t.Errorf("%s: %s: codecs %v, %d row groups of %d rows; want %v, %d to %d row groups",
					topic, filepath.Base(o), s.codecs, s.rowGroups, s.rows, codec, minGroups, maxGroups)
			}
		}
	}
	plain, small := h.coldObjects("plain"), h.coldObjects("small")
	// A 64KiB segment: one row group of the broker's 1 MiB; a dozen or more
	// of 4 KiB.
	check("plain", plain, format.Zstd, 1, 1)
	check("small", small, format.Snappy, 12, 40)

	// From the next upload: plain's new objects are gzip, its old ones zstd.
	h.alter("plain", "strata.parquet.codec=gzip")
	h.produce("plain", 800, 1600, ts)
	h.tierRun()
	var newer []string
	for _, o := range h.coldObjects("plain") {
		if !slices.Contains(plain, o) {
			newer = append(newer, o)
		}
	}
	check("plain (before the change)", plain, format.Zstd, 1, 1)
	check("plain (after the change)", newer, format.Gzip, 1, 1)

	for topic, n := range map[string]int{"plain": 1600, "small": 800} {
		if v := h.view(topic); v.WarmBytes != 0 || v.ColdSegments == 0 {
			t.Fatalf("%s: %+v: want its sealed segments only in the bucket", topic, v)
		}
		h.consume("from the bucket", topic, 0, n, ts)
	}
}
