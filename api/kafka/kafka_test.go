package kafka

import (
	"bytes"
	"context"
	"fmt"
	"io"
	"log/slog"
	"net"
	"strings"
	"testing"
	"time"

	"github.com/twmb/franz-go/pkg/kadm"
	"github.com/twmb/franz-go/pkg/kerr"
	"github.com/twmb/franz-go/pkg/kgo"
	"github.com/twmb/franz-go/pkg/kmsg"

	"strata/catalog/offsets"
	"strata/engine/segment"
	"strata/engine/store"
	"strata/metadata"
)

var quiet = slog.New(slog.NewTextHandler(io.Discard, nil))

func startServer(t testing.TB, cfg Config) (string, store.Store) {
	t.Helper()
	addr, e, stop := serveDir(t, t.TempDir(), cfg)
	t.Cleanup(stop)
	return addr, e
}

// serveDir serves the segment engine in dir/data with committed offsets in
// dir/groups; stop shuts both down, so a test can start again on the same
// folder the way a restarted broker does.
func serveDir(t testing.TB, dir string, cfg Config) (addr string, e *segment.Engine, stop func()) {
	t.Helper()
	e, err := segment.Open(segment.Config{Dir: dir + "/data", Workers: 4, Logger: quiet})
	if err != nil {
		t.Fatal(err)
	}
	committed, err := offsets.Open(dir + "/groups")
	if err != nil {
		t.Fatal(err)
	}
	cfg.Logger, cfg.Offsets = quiet, committed
	srv := New(e, cfg)
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	go srv.Serve(ln)
	return ln.Addr().String(), e, func() {
		ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
		defer cancel()
		srv.Shutdown(ctx)
		committed.Close()
		e.Close()
	}
}

// serveShards serves a segment engine holding shards as one node of the
// cluster clusterAt makes from the server's own address (a test's fixed
// cluster); both stop with the test.
func serveShards(t *testing.T, shards []string, clusterAt func(addr string) metadata.Cluster) (addr string, e *segment.Engine) {
	t.Helper()
	e, err := segment.Open(segment.Config{Dir: t.TempDir(), Logger: quiet})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { e.Close() })
	for _, shard := range shards {
		if err := e.CreateShard(context.Background(), shard); err != nil {
			t.Fatal(err)
		}
	}
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	srv := New(e, Config{Logger: quiet, Cluster: clusterAt(ln.Addr().String())})
	go srv.Serve(ln)
	t.Cleanup(func() {
		ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
		defer cancel()
		srv.Shutdown(ctx)
	})
	return ln.Addr().String(), e
}

// fixedTopics is the part of a test's fixed cluster that changes nothing:
// topics are created, deleted, grown and reconfigured without effect, and
// have no configs of their own.
type fixedTopics struct{}

func (fixedTopics) CreateTopic(context.Context, string, int32, int16, map[string]string) error {
	return nil
}
func (fixedTopics) TopicConfigs(string) map[string]string { return nil }
func (fixedTopics) AlterTopicConfigs(context.Context, string, func(map[string]string) (map[string]string, error)) error {
	return nil
}
func (fixedTopics) DeleteTopic(context.Context, string) error             { return nil }
func (fixedTopics) CreatePartitions(context.Context, string, int32) error { return nil }

func client(t *testing.T, addr string, opts ...kgo.Opt) *kgo.Client {
	t.Helper()
	c, err := kgo.NewClient(append([]kgo.Opt{kgo.SeedBrokers(addr)}, opts...)...)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(c.Close)
	return c
}

// franz-go produces with idempotence and every compression codec, then
// consumes by partition: keys, values, headers and timestamps come back.
func TestFranzGoProduceConsume(t *testing.T) {
	addr, _ := startServer(t, Config{AutoCreateTopics: true, DefaultPartitions: 2})
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	adm := kadm.NewClient(client(t, addr))
	if _, err := adm.CreateTopic(ctx, 4, 1, nil, "orders"); err != nil {
		t.Fatal(err)
	}
	type sent struct {
		r      *kgo.Record
		offset int64
	}
	var all []sent
	for _, codec := range []kgo.CompressionCodec{kgo.NoCompression(), kgo.GzipCompression(), kgo.SnappyCompression(), kgo.Lz4Compression(), kgo.ZstdCompression()} {
		p := client(t, addr, kgo.ProducerBatchCompression(codec), kgo.RequiredAcks(kgo.AllISRAcks()))
		for i := 0; i < 50; i++ {
			r := &kgo.Record{Topic: "orders", Partition: int32(i % 4), Key: []byte(fmt.Sprintf("k%d", i)),
				Value:     bytes.Repeat([]byte{byte(i)}, 100+i),
				Headers:   []kgo.RecordHeader{{Key: "codec", Value: []byte(fmt.Sprint(codec))}, {Key: "i", Value: []byte(fmt.Sprint(i))}},
				Timestamp: time.UnixMilli(1_700_000_000_000 + int64(i))}
			if i%10 == 0 {
				r.Key = nil
			}
			res := p.ProduceSync(ctx, r)
			if err := res.FirstErr(); err != nil {
				t.Fatalf("produce with %v: %v", codec, err)
			}
			all = append(all, sent{r, r.Offset})
		}
	}
	byPart := map[int32][]sent{}
	for _, s := range all {
		byPart[s.r.Partition] = append(byPart[s.r.Partition], s)
	}
	for part, sends := range byPart {
		for i, s := range sends {
			if s.offset != int64(i) {
				t.Fatalf("partition %d: record %d acknowledged at offset %d", part, i, s.offset)
			}
		}
		c := client(t, addr, kgo.ConsumePartitions(map[string]map[int32]kgo.Offset{"orders": {part: kgo.NewOffset().AtStart()}}))
		var got []*kgo.Record
		for len(got) < len(sends) {
			fs := c.PollFetches(ctx)
			if err := fs.Err(); err != nil {
				t.Fatalf("consume partition %d: %v", part, err)
			}
			got = append(got, fs.Records()...)
		}
		for i, g := range got {
			w := sends[i].r
			if g.Offset != int64(i) || !bytes.Equal(g.Key, w.Key) || (g.Key == nil) != (w.Key == nil) || !bytes.Equal(g.Value, w.Value) ||
				!g.Timestamp.Equal(w.Timestamp) || len(g.Headers) != 2 || string(g.Headers[1].Value) != string(w.Headers[1].Value) {
				t.Fatalf("partition %d record %d: got key %q value %d bytes ts %v headers %v; sent key %q value %d bytes ts %v",
					part, i, g.Key, len(g.Value), g.Timestamp, g.Headers, w.Key, len(w.Value), w.Timestamp)
			}
		}
	}
	// ListOffsets: earliest, latest, by time.
	ends, err := adm.ListEndOffsets(ctx, "orders")
	if err != nil {
		t.Fatal(err)
	}
	for part, sends := range byPart {
		if o, _ := ends.Lookup("orders", part); o.Offset != int64(len(sends)) {
			t.Fatalf("end offset of partition %d: %d, want %d", part, o.Offset, len(sends))
		}
	}
	starts, _ := adm.ListStartOffsets(ctx, "orders")
	if o, _ := starts.Lookup("orders", 0); o.Offset != 0 {
		t.Fatalf("start offset %d", o.Offset)
	}
	byTime, err := adm.ListOffsetsAfterMilli(ctx, 1_700_000_000_000+21, "orders")
	if err != nil {
		t.Fatal(err)
	}
	if o, _ := byTime.Lookup("orders", 1); o.Offset < 0 {
		t.Fatalf("offset by time: %+v", o)
	}
}

// The design's old bug (docs/design.md): one Produce request carrying batches for many
// partitions must answer each with the offsets it was stored at.
func TestOneRequestManyPartitions(t *testing.T) {
	addr, st := startServer(t, Config{AutoCreateTopics: true, DefaultPartitions: 8})
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	p := client(t, addr, kgo.ProducerLinger(200*time.Millisecond), kgo.DefaultProduceTopic("many"), kgo.AllowAutoTopicCreation())
	results := make(chan *kgo.Record, 400)
	for i := 0; i < 400; i++ {
		r := &kgo.Record{Partition: int32(i % 8), Value: []byte(fmt.Sprintf("v%d", i))}
		p.Produce(ctx, r, func(r *kgo.Record, err error) {
			if err != nil {
				t.Error(err)
			}
			results <- r
		})
	}
	p.Flush(ctx)
	close(results)
	for r := range results {
		recs, err := st.Read(ctx, store.ShardName("many", r.Partition), uint64(r.Offset), store.Budget{MaxRecords: 1})
		if err != nil || len(recs) != 1 || string(recs[0].Value) != string(r.Value) {
			t.Fatalf("record %q acknowledged at partition %d offset %d, but that offset holds %v (%v)", r.Value, r.Partition, r.Offset, recs, err)
		}
	}
}

func TestDeleteRecordsAndLeaderEpochs(t *testing.T) {
	addr, _ := startServer(t, Config{AutoCreateTopics: true})
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	c := client(t, addr, kgo.DefaultProduceTopic("del"), kgo.AllowAutoTopicCreation())
	for i := 0; i < 10; i++ {
		if err := c.ProduceSync(ctx, &kgo.Record{Value: []byte{byte(i)}}).FirstErr(); err != nil {
			t.Fatal(err)
		}
	}
	adm := kadm.NewClient(c)
	offs := kadm.Offsets{}
	offs.Add(kadm.Offset{Topic: "del", Partition: 0, At: 6})
	res, err := adm.DeleteRecords(ctx, offs)
	if err != nil {
		t.Fatal(err)
	}
	if r, _ := res.Lookup("del", 0); r.Err != nil || r.LowWatermark != 6 {
		t.Fatalf("DeleteRecords to 6: %+v", r)
	}
	starts, _ := adm.ListStartOffsets(ctx, "del")
	if o, _ := starts.Lookup("del", 0); o.Offset != 6 {
		t.Fatalf("start offset after DeleteRecords: %d", o.Offset)
	}
	for _, tc := range []struct {
		current, epoch int32
		wantErr        int16
		wantEnd        int64
	}{
		{-1, 0, 0, 10}, {0, 0, 0, 10},
		{1, 0, kerr.UnknownLeaderEpoch.Code, -1},
		{-2, 0, kerr.FencedLeaderEpoch.Code, -1}, // only -1 skips the check, as in Kafka
		{-1, 3, 0, -1},                           // an epoch newer than the one a single node has had: UNDEFINED, as Kafka answers
	} {
		req := kmsg.NewPtrOffsetForLeaderEpochRequest()
		rt := kmsg.NewOffsetForLeaderEpochRequestTopic()
		rt.Topic = "del"
		rp := kmsg.NewOffsetForLeaderEpochRequestTopicPartition()
		rp.CurrentLeaderEpoch, rp.LeaderEpoch = tc.current, tc.epoch
		rt.Partitions = append(rt.Partitions, rp)
		req.Topics = append(req.Topics, rt)
		resp, err := req.RequestWith(ctx, c)
		if err != nil {
			t.Fatal(err)
		}
		got := resp.Topics[0].Partitions[0]
		if got.ErrorCode != tc.wantErr || got.EndOffset != tc.wantEnd {
			t.Errorf("OffsetForLeaderEpoch(current %d, epoch %d) = error %d end %d; want %d, %d", tc.current, tc.epoch, got.ErrorCode, got.EndOffset, tc.wantErr, tc.wantEnd)
		}
	}
}

// Garbage, unknown APIs, oversized frames and silent half-open connections
// close the offending connection only; other clients keep being served.
func TestBadClientsDoNotHurtOthers(t *testing.T) {
	addr, _ := startServer(t, Config{AutoCreateTopics: true, MaxRequestBytes: 1 << 20, IdleTimeout: 500 * time.Millisecond})
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	frames := map[string][]byte{
		"oversized":   {0x7f, 0xff, 0xff, 0xff},
		"negative":    {0xff, 0xff, 0xff, 0xfe},
		"unknown api": append([]byte{0, 0, 0, 10, 0x7f, 0x00, 0, 0, 0, 0, 0, 1}, 0, 0),
		"garbage":     append([]byte{0, 0, 0, 12}, []byte("not a kafka!")...),
	}
	for name, f := range frames {
		c, err := net.Dial("tcp", addr)
		if err != nil {
			t.Fatal(err)
		}
		c.Write(f)
		c.SetReadDeadline(time.Now().Add(5 * time.Second))
		if _, err := c.Read(make([]byte, 1)); err == nil {
			t.Errorf("%s: the server answered instead of closing", name)
		}
		c.Close()
	}
	idle, _ := net.Dial("tcp", addr) // says nothing: closed after the idle timeout
	idle.SetReadDeadline(time.Now().Add(10 * time.Second))
	if _, err := idle.Read(make([]byte, 1)); err == nil || strings.Contains(err.Error(), "timeout") {
		t.Errorf("an idle connection was not closed by the server: %v", err)
	}
	c := client(t, addr, kgo.DefaultProduceTopic("ok"), kgo.AllowAutoTopicCreation())
	if err := c.ProduceSync(ctx, &kgo.Record{Value: []byte("still here")}).FirstErr(); err != nil {
		t.Fatalf("a good client after bad ones: %v", err)
	}
}

func TestDeleteTopics(t *testing.T) {
	addr, st := startServer(t, Config{})
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	adm := kadm.NewClient(client(t, addr))
	if _, err := adm.CreateTopic(ctx, 3, 1, nil, "tmp"); err != nil {
		t.Fatal(err)
	}
	res, err := adm.DeleteTopics(ctx, "tmp", "never-was")
	if err != nil {
		t.Fatal(err)
	}
	if r := res["tmp"]; r.Err != nil {
		t.Fatalf("delete tmp: %v", r.Err)
	}
	if r := res["never-was"]; r.Err == nil {
		t.Fatal("deleting a missing topic succeeded")
	}
	if shards, _ := st.Shards(ctx); len(shards) != 0 {
		t.Fatalf("shards left after DeleteTopics: %q", shards)
	}
}
