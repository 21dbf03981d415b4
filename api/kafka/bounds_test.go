package kafka

import (
	"bytes"
	"context"
	"encoding/binary"
	"errors"
	"fmt"
	"hash/crc32"
	"io"
	"math/rand/v2"
	"net"
	"os"
	"runtime"
	"slices"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"syscall"
	"testing"
	"time"

	"github.com/klauspost/compress/zstd"
	"github.com/twmb/franz-go/pkg/kadm"
	"github.com/twmb/franz-go/pkg/kerr"
	"github.com/twmb/franz-go/pkg/kgo"
	"github.com/twmb/franz-go/pkg/kmsg"

	"strata/engine/memory"
	"strata/engine/record"
	"strata/engine/segment"
	"strata/engine/store"
)

// ListOffsets with timestamp -3 (MAX_TIMESTAMP) answers the first record
// holding the largest timestamp, not the first record.
func TestListOffsetsMaxTimestamp(t *testing.T) {
	addr, _ := startServer(t, Config{AutoCreateTopics: true})
	c := client(t, addr, kgo.DefaultProduceTopic("ts"), kgo.AllowAutoTopicCreation())
	ctx := context.Background()
	base := time.UnixMilli(1_700_000_000_000)
	for _, d := range []int{5, 9, 3, 9, 1} {
		if err := c.ProduceSync(ctx, &kgo.Record{Timestamp: base.Add(time.Duration(d) * time.Millisecond), Value: []byte("v")}).FirstErr(); err != nil {
			t.Fatal(err)
		}
	}
	req := kmsg.NewPtrListOffsetsRequest()
	req.Version = 7
	rt := kmsg.NewListOffsetsRequestTopic()
	rt.Topic = "ts"
	rp := kmsg.NewListOffsetsRequestTopicPartition()
	rp.Timestamp = -3
	rt.Partitions = append(rt.Partitions, rp)
	req.Topics = append(req.Topics, rt)
	resp, err := req.RequestWith(ctx, c)
	if err != nil {
		t.Fatal(err)
	}
	got := resp.Topics[0].Partitions[0]
	if got.ErrorCode != 0 || got.Offset != 1 || got.Timestamp != base.UnixMilli()+9 {
		t.Fatalf("MAX_TIMESTAMP: error %d, offset %d, timestamp %d; want offset 1 at %d", got.ErrorCode, got.Offset, got.Timestamp, base.UnixMilli()+9)
	}
}

// Topic names are checked as Kafka checks them, before any partition is
// made: up to 249 bytes works with any partition count, 250 is
// INVALID_TOPIC_EXCEPTION, never an UNKNOWN_SERVER_ERROR or half a topic.
func TestTopicNameLengths(t *testing.T) {
	addr, s := startServer(t, Config{})
	c := client(t, addr)
	for _, tc := range []struct {
		length     int
		partitions int32
		want       int16
	}{
		{246, 200, errNone},
		{248, 1, errNone},
		{249, 12, errNone},
		{250, 1, kerr.InvalidTopicException.Code},
	} {
		name := strings.Repeat("n", tc.length-4) + fmt.Sprintf("%04d", tc.length)
		req := kmsg.NewPtrCreateTopicsRequest()
		rt := kmsg.NewCreateTopicsRequestTopic()
		rt.Topic, rt.NumPartitions, rt.ReplicationFactor = name, tc.partitions, 1
		req.Topics = append(req.Topics, rt)
		resp, err := req.RequestWith(context.Background(), c)
		if err != nil {
			t.Fatal(err)
		}
		if code := resp.Topics[0].ErrorCode; code != tc.want {
			t.Fatalf("a %d-byte topic name with %d partitions: error %d, want %d", tc.length, tc.partitions, code, tc.want)
		}
		shards, _ := s.Shards(context.Background())
		n := 0
		for _, sh := range shards {
			if tp, _ := store.ParseShard(sh); tp.Topic == name {
				n++
			}
		}
		if want := map[bool]int32{true: tc.partitions}[tc.want == errNone]; int32(n) != want {
			t.Fatalf("a %d-byte topic name: %d partitions made, want %d", tc.length, n, want)
		}
	}
}

// A record batch over max.message.bytes answers MESSAGE_TOO_LARGE and
// stores nothing; the partition keeps taking writes and the broker starts
// again on its data.
func TestMessageTooLarge(t *testing.T) {
	dir := t.TempDir()
	cfg := Config{AutoCreateTopics: true}
	addr, e, stop := serveDir(t, dir, cfg)
	c := client(t, addr, kgo.DefaultProduceTopic("big"), kgo.AllowAutoTopicCreation(), kgo.ProducerBatchMaxBytes(64<<20),
		kgo.ProducerBatchCompression(kgo.NoCompression()), kgo.RecordRetries(1))
	ctx := context.Background()
	roomy := strconv.Itoa(8 << 20)
	if _, err := kadm.NewClient(c).CreateTopic(ctx, 1, 1, map[string]*string{"max.message.bytes": &roomy}, "roomy"); err != nil {
		t.Fatal(err)
	}
	produce := func(topic string, size int) error {
		return c.ProduceSync(ctx, &kgo.Record{Topic: topic, Value: bytes.Repeat([]byte("x"), size)}).FirstErr()
	}
	for _, tc := range []struct {
		topic string
		size  int
		want  error
	}{
		{"big", 1000, nil},
		{"big", 2 << 20, kerr.MessageTooLarge},
		{"big", 1000, nil},
		{"roomy", 2 << 20, nil}, // the topic's own max.message.bytes
		{"roomy", 9 << 20, kerr.MessageTooLarge},
	} {
		if err := produce(tc.topic, tc.size); !errors.Is(err, tc.want) && !(tc.want == nil && err == nil) {
			t.Fatalf("produce %d bytes to %s: %v, want %v", tc.size, tc.topic, err, tc.want)
		}
	}
	if _, high, _ := e.Watermarks(ctx, "big-0"); high != 2 {
		t.Fatalf("big-0 holds %d records, want the 2 that fit", high)
	}
	c.Close()
	stop()
	_, e, stop = serveDir(t, dir, cfg)
	defer stop()
	recs, err := e.Read(ctx, "big-0", 0, store.Budget{})
	if err != nil || len(recs) != 2 {
		t.Fatalf("after a restart big-0 reads %d records (%v), want 2", len(recs), err)
	}
}

// zstdBomb is one record batch whose records inflate to n bytes of zeros.
func zstdBomb(t *testing.T, n int) []byte { return bombBatch(n) }

func bombBatch(n int) []byte {
	recs := []record.Record{{Value: make([]byte, n)}}
	plain := encodeBatch(nil, recs)
	body := plain[61:] // the records, after the batch header
	enc, _ := zstd.NewWriter(nil)
	packed := enc.EncodeAll(body, nil)
	batch := append(append([]byte(nil), plain[:61]...), packed...)
	binary.BigEndian.PutUint32(batch[8:], uint32(len(batch)-12))
	binary.BigEndian.PutUint16(batch[21:], 4) // attributes: zstd
	binary.BigEndian.PutUint32(batch[17:], crcOf(batch[21:]))
	return batch
}

// A Produce of many small zstd batches that each inflate to tens of
// megabytes is refused past the request's inflate budget: the partitions
// past it answer MESSAGE_TOO_LARGE and the heap never holds more than the
// budget's worth.
func TestDecompressionBombIsBounded(t *testing.T) {
	addr, s := startServer(t, Config{AutoCreateTopics: true, DefaultPartitions: 8, MaxInflatedBytes: 64 << 20})
	c := client(t, addr)
	bomb := zstdBomb(t, 30<<20)
	if len(bomb) > 64<<10 {
		t.Fatalf("the bomb is %d bytes; it should be small", len(bomb))
	}
	req := produceRequest("bomb", bomb, bomb, bomb, bomb, bomb, bomb, bomb, bomb)
	createTopic(t, c, "bomb", 8)
	var before runtime.MemStats
	runtime.GC()
	runtime.ReadMemStats(&before)
	peak := watchHeap(t)
	resp, err := req.RequestWith(context.Background(), c)
	if err != nil {
		t.Fatal(err)
	}
	refused := 0
	for _, p := range resp.Topics[0].Partitions {
		switch p.ErrorCode {
		case kerr.MessageTooLarge.Code:
			refused++
		case errNone:
		default:
			t.Fatalf("partition %d: error %d", p.Partition, p.ErrorCode)
		}
	}
	if refused < 6 {
		t.Fatalf("%d of 8 bomb partitions refused; a 64 MiB budget holds two 30 MiB ones", refused)
	}
	if grew := int64(peak()) - int64(before.HeapInuse); grew > 400<<20 {
		t.Fatalf("the heap grew by %d MiB answering 8 bombs; the budget is 64 MiB", grew>>20)
	}
	for p := 0; p < 8; p++ {
		_, high, _ := s.Watermarks(context.Background(), fmt.Sprintf("bomb-%d", p))
		if code := resp.Topics[0].Partitions[p].ErrorCode; (code == errNone) != (high == 1) {
			t.Fatalf("bomb-%d: answer %d, but holds %d records", p, code, high)
		}
	}
}

// watchHeap samples the heap in use until the returned function is called,
// which returns the largest sample.
func watchHeap(t *testing.T) func() uint64 {
	var peak atomic.Uint64
	stop := make(chan struct{})
	done := make(chan struct{})
	go func() {
		defer close(done)
		for {
			var m runtime.MemStats
			runtime.ReadMemStats(&m)
			if m.HeapInuse > peak.Load() {
				peak.Store(m.HeapInuse)
			}
			select {
			case <-stop:
				return
			case <-time.After(5 * time.Millisecond):
			}
		}
	}()
	var once sync.Once
	get := func() uint64 {
		once.Do(func() { close(stop); <-done })
		return peak.Load()
	}
	t.Cleanup(func() { get() })
	return get
}

func createTopic(t *testing.T, c *kgo.Client, topic string, partitions int32) {
	t.Helper()
	req := kmsg.NewPtrCreateTopicsRequest()
	rt := kmsg.NewCreateTopicsRequestTopic()
	rt.Topic, rt.NumPartitions, rt.ReplicationFactor = topic, partitions, 1
	req.Topics = append(req.Topics, rt)
	resp, err := req.RequestWith(context.Background(), c)
	if err != nil || resp.Topics[0].ErrorCode != 0 {
		t.Fatalf("create %s: %v %v", topic, err, resp)
	}
}

// Clients that announce huge frames and then send nothing hold no memory
// and do not stop a normal producer; a non-Produce frame over 1 MiB closes
// its connection.
func TestHugeFramesAreBounded(t *testing.T) {
	addr, _ := startServer(t, Config{AutoCreateTopics: true, FrameTimeout: 2 * time.Second})
	var before runtime.MemStats
	runtime.GC()
	runtime.ReadMemStats(&before)
	peak := watchHeap(t)
	var conns []net.Conn
	for i := 0; i < 30; i++ {
		conn, err := net.Dial("tcp", addr)
		if err != nil {
			t.Fatal(err)
		}
		conns = append(conns, conn)
		var hdr [10]byte
		binary.BigEndian.PutUint32(hdr[:], 99<<20)
		// api key 0 (Produce), version 9: the frame announces 99 MiB.
		binary.BigEndian.PutUint16(hdr[6:], 9)
		conn.Write(hdr[:])
	}
	c := client(t, addr, kgo.DefaultProduceTopic("calm"), kgo.AllowAutoTopicCreation())
	for i := 0; i < 100; i++ {
		if err := c.ProduceSync(context.Background(), &kgo.Record{Value: []byte("still here")}).FirstErr(); err != nil {
			t.Fatalf("a normal produce beside 30 huge announced frames: %v", err)
		}
	}
	if grew := int64(peak()) - int64(before.HeapInuse); grew > 200<<20 {
		t.Fatalf("30 frames announcing 99 MiB each grew the heap by %d MiB", grew>>20)
	}
	// The frames never come: the server closes those connections.
	for i, conn := range conns {
		conn.SetReadDeadline(time.Now().Add(10 * time.Second))
		if _, err := conn.Read(make([]byte, 1)); !errors.Is(err, io.EOF) && !errors.Is(err, syscall.ECONNRESET) {
			t.Fatalf("connection %d with a stalled frame: %v; want it closed by the server", i, err)
		}
		conn.Close()
	}
	// A Metadata request of 2 MiB is refused: decoding it could take 100x that.
	conn, err := net.Dial("tcp", addr)
	if err != nil {
		t.Fatal(err)
	}
	defer conn.Close()
	var hdr [8]byte
	binary.BigEndian.PutUint32(hdr[:], 2<<20)
	binary.BigEndian.PutUint16(hdr[4:], 3) // Metadata
	conn.Write(hdr[:])
	conn.SetReadDeadline(time.Now().Add(10 * time.Second))
	if _, err := conn.Read(make([]byte, 1)); !errors.Is(err, io.EOF) && !errors.Is(err, syscall.ECONNRESET) {
		t.Fatalf("a 2 MiB Metadata frame: %v; want the connection closed", err)
	}
}

// Connections past the per-address bound are closed at once; the ones
// within it keep working.
func TestConnectionBounds(t *testing.T) {
	addr, _ := startServer(t, Config{MaxConnectionsPerIP: 5})
	var conns []net.Conn
	defer func() {
		for _, c := range conns {
			c.Close()
		}
	}()
	for i := 0; i < 5; i++ {
		conn, err := net.Dial("tcp", addr)
		if err != nil {
			t.Fatal(err)
		}
		conns = append(conns, conn)
	}
	// Make sure the five are accepted before the sixth arrives.
	for _, conn := range conns {
		if err := apiVersions(conn); err != nil {
			t.Fatalf("a connection within the bound: %v", err)
		}
	}
	extra, err := net.Dial("tcp", addr)
	if err != nil {
		t.Fatal(err)
	}
	defer extra.Close()
	if err := apiVersions(extra); err == nil {
		t.Fatal("a sixth connection from one address was served; the bound is 5")
	}
	conns[0].Close()
	conns = conns[1:]
	deadline := time.Now().Add(10 * time.Second)
	for {
		again, err := net.Dial("tcp", addr)
		if err != nil {
			t.Fatal(err)
		}
		err = apiVersions(again)
		again.Close()
		if err == nil {
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("no connection served after one of the five closed: %v", err)
		}
		time.Sleep(20 * time.Millisecond)
	}
}

// apiVersions sends ApiVersions v0 on conn and reads the answer.
func apiVersions(conn net.Conn) error {
	conn.SetDeadline(time.Now().Add(5 * time.Second))
	frame := []byte{0, 0, 0, 10, 0, 18, 0, 0, 0, 0, 0, 1, 0, 0}
	if _, err := conn.Write(frame); err != nil {
		return err
	}
	var size [4]byte
	if _, err := io.ReadFull(conn, size[:]); err != nil {
		return err
	}
	_, err := io.ReadFull(conn, make([]byte, binary.BigEndian.Uint32(size[:])))
	return err
}

// failingListener fails its first Accepts the way a process out of file
// descriptors does.
type failingListener struct {
	net.Listener
	fails atomic.Int32
}

func (l *failingListener) Accept() (net.Conn, error) {
	if l.fails.Add(-1) >= 0 {
		return nil, &net.OpError{Op: "accept", Net: "tcp", Err: syscall.EMFILE}
	}
	return l.Listener.Accept()
}

// An accept error (EMFILE at the fd limit) does not end the listener: the
// server backs off and serves the next connection.
func TestAcceptErrorsDoNotStopTheListener(t *testing.T) {
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	fl := &failingListener{Listener: ln}
	fl.fails.Store(5)
	srv := New(store.Store(nil), Config{Logger: quiet})
	served := make(chan error, 1)
	go func() { served <- srv.Serve(fl) }()
	defer srv.Shutdown(context.Background())
	conn, err := net.Dial("tcp", ln.Addr().String())
	if err != nil {
		t.Fatal(err)
	}
	defer conn.Close()
	if err := apiVersions(conn); err != nil {
		t.Fatalf("after 5 failed accepts: %v", err)
	}
	select {
	case err := <-served:
		t.Fatalf("Serve returned: %v", err)
	default:
	}
}

// countingStore counts the reads a real store serves, and their bytes.
type countingStore struct {
	store.Store
	reads, bytes atomic.Int64
}

func (c *countingStore) Read(ctx context.Context, shard string, offset uint64, b store.Budget) ([]record.Record, error) {
	recs, err := c.Store.Read(ctx, shard, offset, b)
	c.reads.Add(1)
	for i := range recs {
		c.bytes.Add(int64(record.Size(&recs[i])))
	}
	return recs, err
}

// A Fetch of many full partitions reads about max_bytes from the store,
// not every partition whole; an idle long poll reads nothing until an
// append wakes it, and the append wakes it at once.
func TestFetchReadsWithinMaxBytesAndWaitsForAppends(t *testing.T) {
	_, e, stop := serveDir(t, t.TempDir(), Config{})
	defer stop()
	ctx := context.Background()
	cs := &countingStore{Store: e}
	srv := New(cs, Config{Logger: quiet, AutoCreateTopics: true})
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	go srv.Serve(ln)
	defer srv.Shutdown(ctx)
	c := client(t, ln.Addr().String())
	createTopic(t, c, "wide", 20)
	value := make([]byte, 10<<10)
	rng := rand.New(rand.NewPCG(1, 1))
	for p := 0; p < 20; p++ {
		recs := make([]record.Record, 100) // 1 MiB a partition
		for i := range recs {
			for j := range value {
				value[j] = byte(rng.IntN(256))
			}
			recs[i].Value = append([]byte(nil), value...)
		}
		if _, err := e.Append(ctx, fmt.Sprintf("wide-%d", p), recs); err != nil {
			t.Fatal(err)
		}
	}
	fetch := func(maxBytes int32, maxWait time.Duration, offset int64) *kmsg.FetchResponse {
		req := kmsg.NewPtrFetchRequest()
		req.Version, req.ReplicaID, req.MaxBytes, req.MinBytes = 11, -1, maxBytes, 1
		req.MaxWaitMillis = int32(maxWait / time.Millisecond)
		rt := kmsg.NewFetchRequestTopic()
		rt.Topic = "wide"
		for p := int32(0); p < 20; p++ {
			rp := kmsg.NewFetchRequestTopicPartition()
			rp.Partition, rp.FetchOffset, rp.PartitionMaxBytes, rp.CurrentLeaderEpoch, rp.LogStartOffset = p, offset, 2<<20, -1, -1
			rt.Partitions = append(rt.Partitions, rp)
		}
		req.Topics = append(req.Topics, rt)
		resp, err := req.RequestWith(ctx, c)
		if err != nil {
			t.Fatal(err)
		}
		return resp
	}
	fetch(3<<20, 0, 0)
	if read := cs.bytes.Load(); read > 4<<20 {
		t.Fatalf("a 3 MiB fetch of 20 partitions of 1 MiB read %d MiB from the store", read>>20)
	}

	// Long poll at the end of every partition: nothing to read until an append.
	cs.reads.Store(0)
	got := make(chan *kmsg.FetchResponse, 1)
	start := time.Now()
	go func() { got <- fetch(1<<20, 20*time.Second, 100) }()
	time.Sleep(500 * time.Millisecond)
	if n := cs.reads.Load(); n > 20 {
		t.Fatalf("an idle long poll read the store %d times in 500ms; once per partition is enough", n)
	}
	if _, err := e.Append(ctx, "wide-7", []record.Record{{Value: []byte("wake up")}}); err != nil {
		t.Fatal(err)
	}
	srv.partitions.Wake("wide-7") // as a Produce through the front end does
	resp := <-got
	if waited := time.Since(start); waited > 10*time.Second {
		t.Fatalf("the long poll answered after %v; the append should wake it", waited)
	}
	recs, _, err := decodeBatches(resp.Topics[0].Partitions[7].RecordBatches, ptr(int64(1<<30)))
	if err != nil || len(recs) != 1 || string(recs[0].Value) != "wake up" {
		t.Fatalf("the woken poll answered %v (%v)", recs, err)
	}
}

// Partitions are bounded per topic and per broker.
func TestPartitionBounds(t *testing.T) {
	addr, _ := startServer(t, Config{MaxPartitionsPerTopic: 50, MaxPartitions: 80})
	c := client(t, addr)
	for _, tc := range []struct {
		topic      string
		partitions int32
		want       int16
	}{
		{"a", 51, kerr.InvalidPartitions.Code},
		{"b", 50, errNone},
		{"c", 31, kerr.PolicyViolation.Code},
		{"d", 30, errNone},
	} {
		req := kmsg.NewPtrCreateTopicsRequest()
		rt := kmsg.NewCreateTopicsRequestTopic()
		rt.Topic, rt.NumPartitions, rt.ReplicationFactor = tc.topic, tc.partitions, 1
		req.Topics = append(req.Topics, rt)
		resp, err := req.RequestWith(context.Background(), c)
		if err != nil {
			t.Fatal(err)
		}
		if code := resp.Topics[0].ErrorCode; code != tc.want {
			t.Fatalf("topic %s with %d partitions: error %d, want %d", tc.topic, tc.partitions, code, tc.want)
		}
	}
}

func crcOf(b []byte) uint32 { return crc32.Checksum(b, castagnoli) }

// produceRequest is an acks=all Produce (v9) to topic carrying one batch
// for each partition from 0.
func produceRequest(topic string, batches ...[]byte) *kmsg.ProduceRequest {
	req := kmsg.NewPtrProduceRequest()
	req.Version, req.Acks, req.TimeoutMillis = 9, -1, 30_000
	rt := kmsg.NewProduceRequestTopic()
	rt.Topic = topic
	for p, b := range batches {
		rp := kmsg.NewProduceRequestTopicPartition()
		rp.Partition, rp.Records = int32(p), b
		rt.Partitions = append(rt.Partitions, rp)
	}
	req.Topics = append(req.Topics, rt)
	return req
}

// The in-flight budget: a request that fits passes a larger one waiting;
// a release grants waiters that now fit; one larger than the budget runs
// alone; a waiter gives up at shutdown.
func TestBudget(t *testing.T) {
	b := newBudget(100)
	stop := make(chan struct{})
	granted := func(n int64) chan error {
		ch := make(chan error, 1)
		go func() { ch <- b.acquire(stop, n) }()
		return ch
	}
	waiting := func(ch chan error) bool {
		select {
		case <-ch:
			return false
		case <-time.After(20 * time.Millisecond):
			return true
		}
	}
	if err := b.acquire(stop, 60); err != nil {
		t.Fatal(err)
	}
	big := granted(50)
	if !waiting(big) {
		t.Fatal("60 + 50 of a 100 budget was granted")
	}
	if err := <-granted(30); err != nil { // fits beside the 60, ahead of the waiting 50
		t.Fatal(err)
	}
	b.release(60)
	if waiting(big) {
		t.Fatal("the waiting 50 was not granted when 60 came back")
	}
	b.release(30)
	b.release(50)
	if err := <-granted(500); err != nil { // over the whole budget: alone
		t.Fatal(err)
	}
	last := granted(1)
	if !waiting(last) {
		t.Fatal("a request was granted beside one larger than the budget")
	}
	close(stop)
	if err := <-last; !errors.Is(err, errShuttingDown) {
		t.Fatalf("a waiter at shutdown: %v", err)
	}
	b.release(500)
	if b.used != 0 || len(b.waiters) != 0 {
		t.Fatalf("after everything came back: used %d, %d waiters", b.used, len(b.waiters))
	}
}

// A connection whose Produce is refused for what it carries is throttled
// (muted, and told so in throttle_time_ms), longer each time while the
// refusals go on; a produce that is taken ends it.
func TestRefusedProducersAreThrottled(t *testing.T) {
	addr, _ := startServer(t, Config{AutoCreateTopics: true})
	c := client(t, addr)
	createTopic(t, c, "thr", 1)
	send := func(records []byte) (int16, int32) {
		resp, err := produceRequest("thr", records).RequestWith(context.Background(), c)
		if err != nil {
			t.Fatal(err)
		}
		return resp.Topics[0].Partitions[0].ErrorCode, resp.ThrottleMillis
	}
	bomb := bombBatch(100 << 20)
	for _, want := range []int32{100, 200, 400} {
		if code, throttle := send(bomb); code != kerr.MessageTooLarge.Code || throttle != want {
			t.Fatalf("a bomb: error %d, throttled %dms; want MESSAGE_TOO_LARGE, %dms", code, throttle, want)
		}
	}
	good := encodeBatch(nil, []record.Record{{Value: []byte("fine")}})
	if code, throttle := send(good); code != 0 || throttle != 0 {
		t.Fatalf("a good batch after the bombs: error %d, throttled %dms", code, throttle)
	}
}

// A long poll whose client goes away ends then, not when max_wait runs out.
func TestLongPollEndsWhenTheClientGoes(t *testing.T) {
	_, e, stop := serveDir(t, t.TempDir(), Config{})
	defer stop()
	srv := New(e, Config{Logger: quiet})
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	go srv.Serve(ln)
	defer srv.Shutdown(context.Background())
	e.CreateShard(context.Background(), "idle-0")
	req := kmsg.NewPtrFetchRequest()
	req.Version, req.ReplicaID, req.MaxWaitMillis, req.MinBytes, req.MaxBytes = 11, -1, 60_000, 1, 1<<20
	rt := kmsg.NewFetchRequestTopic()
	rt.Topic = "idle"
	rp := kmsg.NewFetchRequestTopicPartition()
	rp.PartitionMaxBytes, rp.CurrentLeaderEpoch, rp.LogStartOffset = 1<<20, -1, -1
	rt.Partitions = append(rt.Partitions, rp)
	req.Topics = append(req.Topics, rt)
	conn, err := net.Dial("tcp", ln.Addr().String())
	if err != nil {
		t.Fatal(err)
	}
	frame := seedFrame(req, 11)
	conn.Write(append(binary.BigEndian.AppendUint32(nil, uint32(len(frame))), frame...))
	waiting := func() int {
		return srv.partitions.Waiting("idle-0")
	}
	for deadline := time.Now().Add(10 * time.Second); waiting() == 0; time.Sleep(10 * time.Millisecond) {
		if time.Now().After(deadline) {
			t.Fatal("the long poll never started waiting")
		}
	}
	conn.Close()
	for deadline := time.Now().Add(10 * time.Second); waiting() != 0; time.Sleep(10 * time.Millisecond) {
		if time.Now().After(deadline) {
			t.Fatal("the long poll still waits 10s after its client went away (max_wait is 60s)")
		}
	}
}

// serveMemory serves a memory store with cfg, and returns the server, for
// tests that look at its budget.
func serveMemory(t *testing.T, cfg Config) (string, *Server) {
	t.Helper()
	return serveStore(t, memory.New(100_000), cfg)
}

// serveSegments is serveMemory over the segment engine.
func serveSegments(t *testing.T, cfg Config) (string, *Server) {
	t.Helper()
	e, err := segment.Open(segment.Config{Dir: t.TempDir(), Logger: quiet})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { e.Close() })
	return serveStore(t, e, cfg)
}

func serveStore(t testing.TB, st store.Store, cfg Config) (string, *Server) {
	t.Helper()
	if cfg.Logger == nil {
		cfg.Logger = quiet
	}
	srv := New(st, cfg)
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	go srv.Serve(ln)
	t.Cleanup(func() {
		ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
		defer cancel()
		srv.Shutdown(ctx)
	})
	return ln.Addr().String(), srv
}

func (b *budget) inUse() int64 {
	b.mu.Lock()
	defer b.mu.Unlock()
	return b.used
}

// closedByServer fails the test unless the server closes conn within a
// generous deadline (far shorter than the server's frame timeout).
func closedByServer(t *testing.T, conn net.Conn, what string) {
	t.Helper()
	conn.SetReadDeadline(time.Now().Add(10 * time.Second))
	if _, err := conn.Read(make([]byte, 1)); !errors.Is(err, io.EOF) && !errors.Is(err, syscall.ECONNRESET) {
		t.Fatalf("%s: %v; want the connection closed by the server at once", what, err)
	}
}

// Frames whose size is announced but whose bytes do not come hold none of
// the shared in-flight budget beyond twice what they sent: nine clients
// announcing frames half the budget's size and sending 64 KiB of each do
// not stall a producer, and hold about what they sent.
func TestStalledFramesHoldWhatTheySent(t *testing.T) {
	addr, srv := serveMemory(t, Config{AutoCreateTopics: true, MaxInflightBytes: 8 << 20, FrameTimeout: 5 * time.Minute})
	const attackers, sent = 9, 64 << 10
	for i := 0; i < attackers; i++ {
		conn, err := net.Dial("tcp", addr)
		if err != nil {
			t.Fatal(err)
		}
		defer conn.Close()
		if err := apiVersions(conn); err != nil {
			t.Fatalf("ApiVersions beside %d stalled frames: %v", i, err)
		}
		frame := make([]byte, 4+sent)
		binary.BigEndian.PutUint32(frame, 4<<20) // a Produce (key 0) v9 frame of 4 MiB, never finished
		binary.BigEndian.PutUint16(frame[6:], 9)
		if _, err := conn.Write(frame); err != nil {
			t.Fatal(err)
		}
	}
	// The server has read what they sent once it holds that much budget.
	for deadline := time.Now().Add(10 * time.Second); srv.inflight.inUse() < attackers*sent && time.Now().Before(deadline); {
		time.Sleep(time.Millisecond)
	}
	if used := srv.inflight.inUse(); used < attackers*sent || used > 2*attackers*sent {
		t.Fatalf("%d stalled frames that sent %d KiB each hold %d KiB of the in-flight budget; want at most twice what they sent",
			attackers, sent>>10, used>>10)
	}
	c := client(t, addr, kgo.DefaultProduceTopic("calm"), kgo.AllowAutoTopicCreation())
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	if err := c.ProduceSync(ctx, &kgo.Record{Value: []byte("still here")}).FirstErr(); err != nil {
		t.Fatalf("a produce beside %d stalled frames: %v", attackers, err)
	}
}

// Frames taken as they arrive cannot deadlock the budget: when every byte
// in use is held by frames waiting for more, the oldest gets the rest of
// its frame, over the budget; the others wait for room as before.
func TestBudgetLetsTheOldestWaitingFrameFinish(t *testing.T) {
	b := newBudget(100)
	stop := make(chan struct{})
	if got, err := b.take(stop, 60, 0, 100); got != 60 || err != nil {
		t.Fatalf("first 60 of a frame of 100: %d %v", got, err)
	}
	if got, err := b.take(stop, 40, 0, 160); got != 40 || err != nil {
		t.Fatalf("first 40 of a frame of 160: %d %v", got, err)
	}
	type grant struct {
		n   int64
		err error
	}
	takeAsync := func(n, held, rest int64) chan grant {
		ch := make(chan grant, 1)
		go func() { got, err := b.take(stop, n, held, rest); ch <- grant{got, err} }()
		return ch
	}
	first := takeAsync(40, 60, 40) // the full budget: waits while the second frame could still give back
	select {
	case g := <-first:
		t.Fatalf("granted %d while another frame held the rest and was not waiting", g.n)
	case <-time.After(20 * time.Millisecond):
	}
	second := takeAsync(80, 40, 120) // now both wait: the oldest is let over the budget
	if g := <-first; g.n != 40 || g.err != nil {
		t.Fatalf("the oldest waiting frame: %+v; want its remaining 40", g)
	}
	select {
	case g := <-second:
		t.Fatalf("the second frame was granted %d beside one over the budget", g.n)
	case <-time.After(20 * time.Millisecond):
	}
	b.release(100) // the first frame answered: the second holds all that is in use
	if g := <-second; g.n != 120 || g.err != nil {
		t.Fatalf("the second frame once the first was answered: %+v; want its remaining 120", g)
	}
	b.release(160)
	if b.used != 0 || b.waitingHeld != 0 || len(b.waiters) != 0 {
		t.Fatalf("after everything came back: used %d, waiters hold %d, %d waiters", b.used, b.waitingHeld, len(b.waiters))
	}
}

// Before SASL authentication a connection may send ApiVersions and SASL
// frames of at most 512 KiB (Kafka's sasl.server.max.receive.size), which
// take nothing of the shared in-flight budget; any other request, or a
// larger frame, closes the connection on its header, before its body is
// read or decoded.
func TestPreAuthFramesAreBounded(t *testing.T) {
	addr, srv := serveMemory(t, Config{AutoCreateTopics: true, Auth: authConfig(t, ""), FrameTimeout: 5 * time.Minute})
	dial := func() net.Conn {
		c, err := net.Dial("tcp", addr)
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { c.Close() })
		return c
	}
	header := func(size int, key, version int16) []byte {
		h := binary.BigEndian.AppendUint32(nil, uint32(size))
		h = binary.BigEndian.AppendUint16(h, uint16(key))
		return binary.BigEndian.AppendUint16(h, uint16(version))
	}
	conn := dial()
	conn.Write(header(100, 1, 12))
	closedByServer(t, conn, "the header of a Fetch before authentication")
	conn = dial()
	conn.Write(header(512<<10+1, saslAuthenticateKey, 2))
	closedByServer(t, conn, "the header of a SaslAuthenticate frame of 512 KiB + 1 before authentication")

	// Strangers holding frames up to the limit do not take from the budget
	// the authenticated clients share.
	for i := 0; i < 20; i++ {
		conn := dial()
		conn.Write(append(header(512<<10, saslAuthenticateKey, 2), make([]byte, 64<<10)...))
	}
	c := saslClient(t, addr, MechScramSHA256, "root", "root-pw-1", kgo.DefaultProduceTopic("calm"), kgo.AllowAutoTopicCreation())
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	if err := c.ProduceSync(ctx, &kgo.Record{Value: []byte("signed in")}).FirstErr(); err != nil {
		t.Fatalf("an authenticated produce beside strangers' frames: %v", err)
	}
	if used := srv.inflight.inUse(); used != 0 {
		t.Fatalf("strangers' frames hold %d KiB of the shared in-flight budget; want none", used>>10)
	}

	// Fetch frames packed with topic entries, which decode to many times
	// their size, are never decoded: the heap does not grow with them.
	fetch := kmsg.NewPtrFetchRequest()
	fetch.SetVersion(12)
	fetch.Topics = make([]kmsg.FetchRequestTopic, 340_000)
	frame, err := encodeFrame(fetch, 12)
	if err != nil {
		t.Fatal(err)
	}
	fetch = nil
	var before runtime.MemStats
	runtime.GC()
	runtime.ReadMemStats(&before)
	peak := watchHeap(t)
	var conns []net.Conn
	for i := 0; i < 16; i++ {
		conn := dial()
		conn.Write(frame)
		conns = append(conns, conn)
	}
	for i, conn := range conns {
		closedByServer(t, conn, fmt.Sprintf("stranger %d's Fetch of %d KiB", i, len(frame)>>10))
	}
	if grew := int64(peak()) - int64(before.HeapInuse); grew > 64<<20 {
		t.Fatalf("16 unauthenticated Fetch frames of %d KiB grew the heap by %d MiB", len(frame)>>10, grew>>20)
	}
}

// encodeFrame is req as a client frames it, size prefix included.
func encodeFrame(req kmsg.Request, version int16) ([]byte, error) {
	req.SetVersion(version)
	f := binary.BigEndian.AppendUint32(nil, 0)
	f = binary.BigEndian.AppendUint16(f, uint16(req.Key()))
	f = binary.BigEndian.AppendUint16(f, uint16(version))
	f = binary.BigEndian.AppendUint32(f, 1)
	f = binary.BigEndian.AppendUint16(f, 0xffff) // null client id
	if req.IsFlexible() {
		f = append(f, 0)
	}
	f = req.AppendTo(f)
	if len(f) > 1<<20 {
		return nil, fmt.Errorf("frame of %d bytes: over the 1 MiB a non-Produce request may be", len(f))
	}
	binary.BigEndian.PutUint32(f, uint32(len(f)-4))
	return f, nil
}

// A Fetch's max_bytes is capped at kafka.fetch_max_bytes (Kafka's
// fetch.max.bytes), a partition named many times is read once, as Kafka
// reads a fetch's partitions into a map, and the answers of many
// connections fetching at once hold no more than
// kafka.max_inflight_fetch_bytes together.
func TestFetchAnswersAreBounded(t *testing.T) {
	const capBytes, shared, value = 1 << 20, 3 << 20, 16 << 10
	addr, srv := serveSegments(t, Config{AutoCreateTopics: true, FetchMaxBytes: capBytes, MaxInflightFetchBytes: shared})
	var peak atomic.Int64
	srv.answers.gauge = func(n int64) {
		if n > peak.Load() {
			peak.Store(n)
		}
	}
	c := client(t, addr, kgo.DefaultProduceTopic("big"), kgo.AllowAutoTopicCreation(), kgo.ProducerBatchMaxBytes(1<<20))
	for i := 0; i < 256; i++ { // 4 MiB in the partition
		c.Produce(context.Background(), &kgo.Record{Value: bytes.Repeat([]byte{byte(i)}, value)}, nil)
	}
	if err := c.Flush(context.Background()); err != nil {
		t.Fatal(err)
	}
	fetch := func(c *kgo.Client, names int) *kmsg.FetchResponse {
		req := kmsg.NewPtrFetchRequest()
		req.ReplicaID, req.MaxBytes, req.MaxWaitMillis = -1, 2_000_000_000, 0
		for i := 0; i < names; i++ {
			rt := kmsg.NewFetchRequestTopic()
			rt.Topic = "big"
			rp := kmsg.NewFetchRequestTopicPartition()
			rp.PartitionMaxBytes, rp.CurrentLeaderEpoch, rp.LogStartOffset = 2_000_000_000, -1, -1
			rt.Partitions = append(rt.Partitions, rp)
			req.Topics = append(req.Topics, rt)
		}
		resp, err := req.RequestWith(context.Background(), c)
		if err != nil {
			t.Fatal(err)
		}
		return resp
	}
	resp := fetch(c, 60)
	parts, size := 0, 0
	for _, rt := range resp.Topics {
		for _, rp := range rt.Partitions {
			parts++
			size += len(rp.RecordBatches)
		}
	}
	if parts != 1 || size == 0 || size > capBytes+2*value {
		t.Fatalf("a fetch naming one partition 60 times with max_bytes 2e9: %d partitions, %d KiB; want it once, at most fetch_max_bytes (%d KiB)",
			parts, size>>10, capBytes>>10)
	}

	// Eight fetches at once, each allowed fetch_max_bytes: together they
	// hold at most the shared bound (and a batch over it), and each is
	// answered with records.
	peak.Store(0)
	var wg sync.WaitGroup
	for i := 0; i < 8; i++ {
		c := client(t, addr) // a connection of its own
		wg.Add(1)
		go func() {
			defer wg.Done()
			for j := 0; j < 5; j++ {
				if resp := fetch(c, 1); len(resp.Topics[0].Partitions[0].RecordBatches) == 0 {
					t.Errorf("a fetch beside 7 others answered no records: %+v", resp.Topics[0].Partitions[0])
				}
			}
		}()
	}
	wg.Wait()
	if p := peak.Load(); p == 0 || p > shared+2*value {
		t.Fatalf("fetch answers held %d KiB at most; want at most max_inflight_fetch_bytes (%d KiB)", p>>10, shared>>10)
	}
	if used := srv.answers.inUse(); used != 0 {
		t.Fatalf("%d bytes of the answer budget still held after every answer was written", used)
	}
}

// Frames whose clients stop sending part-way, enough of them to fill the
// in-flight budget, hold it only until a request waits for room and their
// connections have delivered nothing for the stall bound: then they are
// closed and their bytes go to the waiting request, long before the frame
// timeout.
func TestStalledFramesFillingTheBudgetAreEvicted(t *testing.T) {
	addr, srv := serveMemory(t, Config{AutoCreateTopics: true, MaxInflightBytes: 4 << 20, FrameTimeout: 5 * time.Minute})
	srv.inflight.mu.Lock()
	srv.inflight.stallAfter = 300 * time.Millisecond
	srv.inflight.mu.Unlock()
	const attackers, sent = 8, 1 << 20
	var conns []net.Conn
	for i := 0; i < attackers; i++ {
		conn, err := net.Dial("tcp", addr)
		if err != nil {
			t.Fatal(err)
		}
		defer conn.Close()
		frame := make([]byte, 4+sent)
		binary.BigEndian.PutUint32(frame, 16<<20) // a Produce (key 0) v9 frame of 16 MiB, never finished
		binary.BigEndian.PutUint16(frame[6:], 9)
		if _, err := conn.Write(frame); err != nil {
			t.Fatal(err)
		}
		conns = append(conns, conn)
	}
	for deadline := time.Now().Add(10 * time.Second); srv.inflight.inUse() < 4<<20 && time.Now().Before(deadline); {
		time.Sleep(time.Millisecond)
	}
	if used := srv.inflight.inUse(); used < 4<<20 {
		t.Fatalf("%d stalled frames of 1 MiB sent hold %d KiB; the test wants them to fill the 4 MiB budget", attackers, used>>10)
	}
	c := client(t, addr, kgo.DefaultProduceTopic("calm"), kgo.AllowAutoTopicCreation())
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	if err := c.ProduceSync(ctx, &kgo.Record{Value: []byte("still here")}).FirstErr(); err != nil {
		t.Fatalf("a produce while %d stalled frames fill the budget: %v", attackers, err)
	}
	closed := 0
	for _, conn := range conns {
		conn.SetReadDeadline(time.Now().Add(5 * time.Second))
		if _, err := conn.Read(make([]byte, 1)); err != nil && !errors.Is(err, os.ErrDeadlineExceeded) {
			closed++
		}
	}
	if closed == 0 {
		t.Fatalf("none of the %d stalled connections was closed", attackers)
	}
}

// Names Kafka refuses beyond their characters: its internal topics', and
// one that collides with an existing topic's once '.' reads as '_'. The
// refusal says why, as Kafka's does, and makes nothing.
func TestTopicNamesKafkaRefuses(t *testing.T) {
	addr, s := startServer(t, Config{})
	c := client(t, addr)
	for _, tc := range []struct {
		name    string
		want    int16
		message string
	}{
		{"dot.und", errNone, ""},
		{"dot_und", kerr.InvalidTopicException.Code, "Topic 'dot_und' collides with existing topic: dot.und"},
		{"dot.und", kerr.TopicAlreadyExists.Code, "Topic 'dot.und' already exists."},
		{"__consumer_offsets", kerr.InvalidTopicException.Code, "Topic '__consumer_offsets' is reserved for Kafka's internal use."},
		{"__transaction_state", kerr.InvalidTopicException.Code, "Topic '__transaction_state' is reserved for Kafka's internal use."},
		{"__mine", errNone, ""},
	} {
		req := kmsg.NewPtrCreateTopicsRequest()
		rt := kmsg.NewCreateTopicsRequestTopic()
		rt.Topic, rt.NumPartitions, rt.ReplicationFactor = tc.name, 1, 1
		req.Topics = append(req.Topics, rt)
		resp, err := req.RequestWith(context.Background(), c)
		if err != nil {
			t.Fatal(err)
		}
		got := resp.Topics[0]
		if got.ErrorCode != tc.want || (tc.message != "" && (got.ErrorMessage == nil || *got.ErrorMessage != tc.message)) {
			t.Errorf("create %q: error %d, message %v; want %d, %q", tc.name, got.ErrorCode, got.ErrorMessage, tc.want, tc.message)
		}
	}
	shards, _ := s.Shards(context.Background())
	if !slices.Equal(shards, []string{"__mine-0", "dot.und-0"}) {
		t.Errorf("shards after the creates: %v; want only __mine-0 and dot.und-0", shards)
	}
}
