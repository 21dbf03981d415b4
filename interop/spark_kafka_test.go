package interop

import (
	"context"
	"encoding/json"
	"fmt"
	"net/http"
	"os"
	"os/exec"
	"strings"
	"testing"
	"time"

	"github.com/twmb/franz-go/pkg/kadm"
	"github.com/twmb/franz-go/pkg/kgo"

	"strata/api/admin"
	"strata/catalog"
	"strata/internal/testsvc"
	"strata/tiering"
)

// sparkRecord is one row of Spark's Kafka source as spark_kafka_check.py
// prints it: partition, offset, key and value in hex (null stays null),
// timestamp in ms, timestamp type, headers as [key, value hex] pairs.
type sparkRecord struct {
	Partition     int32
	Offset        int64
	Key, Value    *string
	TimestampMs   int64
	TimestampType int
	Headers       [][]*string
}

func (r *sparkRecord) UnmarshalJSON(b []byte) error {
	return json.Unmarshal(b, &[]any{&r.Partition, &r.Offset, &r.Key, &r.Value, &r.TimestampMs, &r.TimestampType, &r.Headers})
}

// sparkTopic is the partitions and records of topic spark in the Spark
// Kafka source test.
const (
	sparkTopic      = "spark"
	sparkPartitions = 2
	sparkPerPart    = 240 // records per partition, half before the tiering run and half after
	sparkT0         = int64(1_700_000_000_000)
)

// sparkTimestamp is record i of partition p's timestamp: rising by 10 ms,
// the partitions 3 ms apart, so a time between two records names one offset.
func sparkTimestamp(p int32, i int) int64 { return sparkT0 + int64(i)*10 + int64(p)*3 }

// sparkRecords are the records of partition p from index lo to hi: keys
// with some nulls, values with tombstones and empty ones, headers that
// repeat a key, carry a null value or are absent.
func sparkRecords(p int32, lo, hi int) []*kgo.Record {
	var out []*kgo.Record
	for i := lo; i < hi; i++ {
		r := &kgo.Record{Topic: sparkTopic, Partition: p, Timestamp: time.UnixMilli(sparkTimestamp(p, i)),
			Key: []byte(fmt.Sprintf("key-%d-%d", p, i%17)), Value: []byte(fmt.Sprintf("value %d/%d %s", p, i, strings.Repeat("v", i%60)))}
		switch {
		case i%13 == 0:
			r.Key = nil
		case i%29 == 0:
			r.Key = []byte{}
		}
		switch {
		case i%11 == 0:
			r.Value = nil
		case i%23 == 0:
			r.Value = []byte{}
		}
		switch i % 4 {
		case 0:
			r.Headers = []kgo.RecordHeader{{Key: "trace", Value: []byte(fmt.Sprint(i))}, {Key: "trace", Value: []byte{0, 0xff}}}
		case 1:
			r.Headers = []kgo.RecordHeader{{Key: "null-value"}}
		case 2:
			r.Headers = []kgo.RecordHeader{{Key: "content-type", Value: []byte("application/json")}}
		}
		out = append(out, r)
	}
	return out
}

// shardSegments is GET /v1/shards/{shard}/segments.
func shardSegments(t *testing.T, admin, shard string) []catalog.Segment {
	t.Helper()
	resp, err := http.Get("http://" + admin + "/v1/shards/" + shard + "/segments")
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	var segs []catalog.Segment
	if err := json.NewDecoder(resp.Body).Decode(&segs); err != nil || resp.StatusCode != http.StatusOK {
		t.Fatalf("GET /v1/shards/%s/segments: %d %v", shard, resp.StatusCode, err)
	}
	return segs
}

// Spark's Kafka source (spark-sql-kafka-0-10, Spark in local mode) reads a
// topic whose older half is cold, its local copies gone, and whose newer
// half is hot: every record comes back with its partition, offset, key,
// value, headers and timestamp, in one batch query; and
// startingOffsetsByTimestamp starts where ListOffsets says, in the cold half
// of one partition and the hot half of the other.
func TestSparkKafkaSourceReadsHotAndCold(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Minute)
	defer cancel()
	py, kafkaJars := python(t), jars(t, "sparkkafka")
	srv := testsvc.ServeStrata(t, strataBin, "segment.max_bytes=4KiB", "segment.roll_check_interval=10",
		"tiering.schedule=@every 1h", "tiering.min_sealed_age=0s")
	c, err := kgo.NewClient(kgo.SeedBrokers(srv.Kafka), kgo.RecordPartitioner(kgo.ManualPartitioner()), kgo.ProducerLinger(0))
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	adm := kadm.NewClient(c)
	// The topic drops an uploaded segment's local copy at once (KIP-405's
	// names), as the broker's tiering.local_retention would not.
	zero, on := "0", "true"
	if _, err := adm.CreateTopic(ctx, sparkPartitions, 1, map[string]*string{"local.retention.ms": &zero, "remote.storage.enable": &on}, sparkTopic); err != nil {
		t.Fatalf("create topic %s: %v", sparkTopic, err)
	}
	produce := func(lo, hi int) {
		t.Helper()
		for i := lo; i < hi; i += 20 { // one batch per 20 records: segments roll between them
			var batch []*kgo.Record
			for p := int32(0); p < sparkPartitions; p++ {
				batch = append(batch, sparkRecords(p, i, min(i+20, hi))...)
			}
			if err := c.ProduceSync(ctx, batch...).FirstErr(); err != nil {
				t.Fatalf("produce records %d..%d: %v", i, min(i+20, hi), err)
			}
		}
	}

	// The older half, tiered: every sealed segment uploaded, its local copy
	// dropped.
	half := sparkPerPart / 2
	produce(0, half)
	req, _ := http.NewRequestWithContext(ctx, http.MethodPost, "http://"+srv.Admin+"/v1/tiering/run", nil)
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	var sum tiering.RunSummary
	err = json.NewDecoder(resp.Body).Decode(&sum)
	resp.Body.Close()
	if err != nil || resp.StatusCode != http.StatusOK || len(sum.Errors) > 0 {
		t.Fatalf("POST /v1/tiering/run: %d %v %+v", resp.StatusCode, err, sum)
	}
	// The newer half, hot: produced after the run, local only.
	produce(half, sparkPerPart)

	// Where the boundary is, per partition, as the admin API shows it: the
	// older offsets are remote (object only), the rest local.
	coldEnd := map[int32]int64{}
	for p := int32(0); p < sparkPartitions; p++ {
		shard := fmt.Sprintf("%s-%d", sparkTopic, p)
		next := uint64(0)
		for _, s := range shardSegments(t, srv.Admin, shard) {
			if s.StartOffset != next {
				t.Fatalf("%s: segment %d starts at %d, the one before ended at %d", shard, s.No, s.StartOffset, next)
			}
			if s.State == catalog.Remote {
				if s.ObjectKey == "" || next != uint64(coldEnd[p]) {
					t.Fatalf("%s: segment %d is remote without an object or after a local one: %+v", shard, s.No, s)
				}
				coldEnd[p] = int64(s.EndOffset) + 1
			} else if !s.State.Local() {
				t.Fatalf("%s: segment %d is %s", shard, s.No, s.State)
			}
			next = s.EndOffset + 1
		}
		// The tail of the first half was in the active segment at the run:
		// at least half of the first half must be cold.
		if coldEnd[p] < int64(half/2) || coldEnd[p] > int64(half) {
			t.Fatalf("%s: offsets [0, %d) are cold; want the most of the first %d (the older half)", shard, coldEnd[p], half)
		}
	}
	// The operator's view (strata topic describe) says the same.
	resp, err = http.Get("http://" + srv.Admin + "/v1/topics/" + sparkTopic)
	if err != nil {
		t.Fatal(err)
	}
	var view admin.TopicView
	err = json.NewDecoder(resp.Body).Decode(&view)
	resp.Body.Close()
	if err != nil || len(view.Partitions) != sparkPartitions {
		t.Fatalf("GET /v1/topics/%s: %v %+v", sparkTopic, err, view)
	}
	for _, pv := range view.Partitions {
		if pv.TieredUpTo != coldEnd[pv.Partition]-1 || pv.ColdBytes == 0 || pv.HighWatermark != sparkPerPart || pv.LowWatermark != 0 {
			t.Fatalf("GET /v1/topics/%s partition %d: %+v; want offsets 0..%d cold, high watermark %d",
				sparkTopic, pv.Partition, pv, coldEnd[pv.Partition]-1, sparkPerPart)
		}
	}
	t.Logf("cold below offsets %v, hot up to %d", coldEnd, sparkPerPart)

	// startingOffsetsByTimestamp: in the cold half of partition 0 and the
	// hot half of partition 1, each between two records.
	at := map[int32]int{0: int(coldEnd[0]) / 2, 1: half + (sparkPerPart-half)/2}
	byTS, listed := map[string]map[string]int64{sparkTopic: {}}, map[int32]int64{}
	for p, i := range at {
		ms := sparkTimestamp(p, i) - 4
		byTS[sparkTopic][fmt.Sprint(p)] = ms
		lo, err := adm.ListOffsetsAfterMilli(ctx, ms, sparkTopic)
		if err != nil {
			t.Fatalf("ListOffsets after %d: %v", ms, err)
		}
		o, ok := lo.Lookup(sparkTopic, p)
		if !ok || o.Err != nil {
			t.Fatalf("ListOffsets after %d for partition %d: %+v", ms, p, o)
		}
		if o.Offset != int64(i) { // each partition's offsets are its record indexes
			t.Fatalf("ListOffsets after %d for partition %d: offset %d, want %d", ms, p, o.Offset, i)
		}
		listed[p] = o.Offset
	}
	byTSJSON, _ := json.Marshal(byTS)

	cctx, ccancel := context.WithTimeout(ctx, 5*time.Minute)
	defer ccancel()
	cmd := exec.CommandContext(cctx, py, "spark_kafka_check.py", srv.Kafka, sparkTopic, string(byTSJSON))
	cmd.Env = append(os.Environ(), "PYSPARK_PYTHON="+py, "SPARK_LOCAL_IP=127.0.0.1", "KAFKA_JARS="+kafkaJars)
	var got struct {
		Records     []sparkRecord      `json:"records"`
		ByTimestamp map[string][]int64 `json:"by_timestamp"`
	}
	checkJSON(t, cmd, &got)

	// Every record, in partition and offset order, as produced.
	if len(got.Records) != sparkPartitions*sparkPerPart {
		t.Fatalf("Spark read %d records, %d were produced", len(got.Records), sparkPartitions*sparkPerPart)
	}
	for p := int32(0); p < sparkPartitions; p++ {
		for i, want := range sparkRecords(p, 0, sparkPerPart) {
			g := got.Records[int(p)*sparkPerPart+i]
			tier := "hot"
			if int64(i) < coldEnd[p] {
				tier = "cold"
			}
			same := g.Partition == p && g.Offset == int64(i) && eq(g.Key, hexOrNil(want.Key)) &&
				eq(g.Value, hexOrNil(want.Value)) && g.TimestampMs == want.Timestamp.UnixMilli() &&
				g.TimestampType == 0 && len(g.Headers) == len(want.Headers)
			for h := 0; same && h < len(want.Headers); h++ {
				same = g.Headers[h][0] != nil && *g.Headers[h][0] == want.Headers[h].Key && eq(g.Headers[h][1], hexOrNil(want.Headers[h].Value))
			}
			if !same {
				t.Fatalf("Spark's %s record %d of partition %d differs from what was produced:\n read %s\n made %s",
					tier, i, p, show(g), show(sparkRow(want, int64(i))))
			}
		}
	}

	// The by-time query starts where ListOffsets said and reads to the end.
	for p, o := range listed {
		g := got.ByTimestamp[fmt.Sprint(p)]
		if len(g) != 2 || g[0] != o || g[1] != int64(sparkPerPart)-o {
			t.Fatalf("startingOffsetsByTimestamp %d for partition %d: Spark read [first offset, records] %v, want [%d %d] (ListOffsets)",
				byTS[sparkTopic][fmt.Sprint(p)], p, g, o, int64(sparkPerPart)-o)
		}
	}
}

// sparkRow is what Spark should read for r at offset.
func sparkRow(r *kgo.Record, offset int64) sparkRecord {
	s := sparkRecord{Partition: r.Partition, Offset: offset, Key: hexOrNil(r.Key), Value: hexOrNil(r.Value),
		TimestampMs: r.Timestamp.UnixMilli(), Headers: [][]*string{}}
	for _, h := range r.Headers {
		k := h.Key
		s.Headers = append(s.Headers, []*string{&k, hexOrNil(h.Value)})
	}
	return s
}

func show(r sparkRecord) string {
	str := func(s *string) string {
		if s == nil {
			return "null"
		}
		return fmt.Sprintf("%q", *s)
	}
	var hs []string
	for _, h := range r.Headers {
		if len(h) == 2 {
			hs = append(hs, str(h[0])+"="+str(h[1]))
		}
	}
	return fmt.Sprintf("partition %d offset %d key %s value %s timestamp %d (type %d) headers [%s]",
		r.Partition, r.Offset, str(r.Key), str(r.Value), r.TimestampMs, r.TimestampType, strings.Join(hs, " "))
}
