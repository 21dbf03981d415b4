package kafka

import (
	"context"
	"encoding/binary"
	"hash/crc32"
	"math"
	"testing"

	"github.com/twmb/franz-go/pkg/kerr"
	"github.com/twmb/franz-go/pkg/kgo"
	"github.com/twmb/franz-go/pkg/kmsg"

	"strata/engine/record"
	"strata/engine/segment"
	"strata/partition"
)

// An idempotent producer's retry that reaches a restarted broker is
// answered with the offsets the batch got before the restart, not stored
// twice; sequences and epochs are checked against what the log holds.
func TestIdempotenceSurvivesARestart(t *testing.T) {
	dir := t.TempDir()
	ctx := context.Background()
	const pid = 77
	start := func() (*kgo.Client, func()) {
		addr, _, stop := serveDir(t, dir, Config{AutoCreateTopics: true})
		c, err := kgo.NewClient(kgo.SeedBrokers(addr))
		if err != nil {
			t.Fatal(err)
		}
		return c, func() { c.Close(); stop() }
	}
	produce := func(c *kgo.Client, epoch int16, first int32, n int) (int16, int64) {
		t.Helper()
		return produceIdempotent(t, c, "idem", pid, epoch, first, n)
	}
	c, stop := start()
	if code, base := produce(c, 0, 0, 3); code != 0 || base != 0 {
		t.Fatalf("first batch: error %d, base %d", code, base)
	}
	if code, base := produce(c, 0, 3, 2); code != 0 || base != 3 {
		t.Fatalf("second batch: error %d, base %d", code, base)
	}
	stop()

	c, stop = start()
	defer stop()
	for _, step := range []struct {
		name     string
		epoch    int16
		first    int32
		n        int
		wantCode int16
		wantBase int64
	}{
		{"the last batch again, after the restart", 0, 3, 2, errNone, 3},
		{"the first batch again", 0, 0, 3, errNone, 0},
		{"the next batch", 0, 5, 4, errNone, 5},
		{"a gap in the sequence", 0, 12, 1, kerr.OutOfOrderSequenceNumber.Code, -1},
		{"a new epoch", 1, 0, 1, errNone, 9},
		{"the old epoch, fenced", 0, 9, 1, kerr.InvalidProducerEpoch.Code, -1},
	} {
		if code, base := produce(c, step.epoch, step.first, step.n); code != step.wantCode || base != step.wantBase {
			t.Fatalf("%s: error %d, base %d; want error %d, base %d", step.name, code, base, step.wantCode, step.wantBase)
		}
	}
	// The log holds each record once: 3 + 2 + 4 + 1.
	lo := kmsg.NewPtrListOffsetsRequest()
	lt := kmsg.NewListOffsetsRequestTopic()
	lt.Topic = "idem"
	lp := kmsg.NewListOffsetsRequestTopicPartition()
	lp.Timestamp = -1
	lt.Partitions = append(lt.Partitions, lp)
	lo.Topics = append(lo.Topics, lt)
	lresp, err := lo.RequestWith(ctx, c)
	if err != nil {
		t.Fatal(err)
	}
	if end := lresp.Topics[0].Partitions[0].Offset; end != 10 {
		t.Fatalf("the log ends at %d; want 10 (every batch once)", end)
	}
}

// produceIdempotent sends one batch of n records from producer pid at
// epoch with sequences from first, as an idempotent producer would, and
// returns the partition's error code and base offset.
func produceIdempotent(t *testing.T, c *kgo.Client, topic string, pid int64, epoch int16, first int32, n int) (int16, int64) {
	t.Helper()
	recs := make([]record.Record, n)
	for i := range recs {
		recs[i] = record.Record{Timestamp: 1_700_000_000_000, Value: []byte{byte(first) + byte(i)}}
	}
	batch := encodeBatch(nil, recs)
	binary.BigEndian.PutUint64(batch[43:], uint64(pid))
	binary.BigEndian.PutUint16(batch[51:], uint16(epoch))
	binary.BigEndian.PutUint32(batch[53:], uint32(first))
	binary.BigEndian.PutUint32(batch[17:], crc32.Checksum(batch[21:], castagnoli))
	resp, err := produceRequest(topic, batch).RequestWith(context.Background(), c)
	if err != nil {
		t.Fatal(err)
	}
	p := resp.Topics[0].Partitions[0]
	return p.ErrorCode, p.BaseOffset
}

// A producer whose sequences pass math.MaxInt32 goes on from 0, as Kafka's
// does: nothing after the wrap is taken for a duplicate (which a client
// counts as stored), and retries across the wrap, before and after a
// restart, get their first offsets back.
func TestSequenceWrap(t *testing.T) {
	dir := t.TempDir()
	const pid = 91
	addr, _, stop := serveDir(t, dir, Config{AutoCreateTopics: true})
	c := client(t, addr)
	steps := []struct {
		name     string
		first    int32
		n        int
		wantCode int16
		wantBase int64
	}{
		{"the batch before the wrap", math.MaxInt32 - 4, 3, errNone, 0},
		{"a batch that wraps", math.MaxInt32 - 1, 3, errNone, 3},
		{"the batch after the wrap", 1, 4, errNone, 6},
		{"a retry of the batch that wrapped", math.MaxInt32 - 1, 3, errNone, 3},
	}
	for _, st := range steps {
		if code, base := produceIdempotent(t, c, "wrap", pid, 0, st.first, st.n); code != st.wantCode || base != st.wantBase {
			t.Fatalf("%s: error %d, base %d; want error %d, base %d", st.name, code, base, st.wantCode, st.wantBase)
		}
	}
	c.Close()
	stop()
	addr, e, stop := serveDir(t, dir, Config{AutoCreateTopics: true})
	defer stop()
	c = client(t, addr)
	for _, st := range append(steps[1:], struct {
		name     string
		first    int32
		n        int
		wantCode int16
		wantBase int64
	}{"the next batch, after a restart", 5, 1, errNone, 10}) {
		if code, base := produceIdempotent(t, c, "wrap", pid, 0, st.first, st.n); code != st.wantCode || base != st.wantBase {
			t.Fatalf("after a restart, %s: error %d, base %d; want error %d, base %d", st.name, code, base, st.wantCode, st.wantBase)
		}
	}
	if _, high, _ := e.Watermarks(context.Background(), "wrap-0"); high != 11 {
		t.Fatalf("the log ends at %d; want 11 (every batch once)", high)
	}
}

// A log that ends inside a producer's batch (the node crashed while
// appending it, and its log kept only the first part) answers the
// producer's retry of the whole batch by storing the rest, with the
// batch's first offset: never OUT_OF_ORDER_SEQUENCE_NUMBER, after which a
// client would send the batch again and its first part would be stored
// twice.
func TestRetryCompletesABatchTheLogEndsInside(t *testing.T) {
	dir := t.TempDir()
	ctx := context.Background()
	const pid = 78
	e, err := segment.Open(segment.Config{Dir: dir + "/data", Workers: 1, Logger: quiet})
	if err != nil {
		t.Fatal(err)
	}
	if err := e.CreateShard(ctx, "cut-0"); err != nil {
		t.Fatal(err)
	}
	// One whole batch, sequences 0-2, then the first 2 records of the
	// batch of sequences 3-7.
	var recs []record.Record
	for seq := int32(0); seq < 5; seq++ {
		recs = append(recs, record.Record{Timestamp: 1_700_000_000_000, Value: []byte{byte(seq)},
			ProtocolData: partition.ProducerData(pid, 0, seq, seq == 2)})
	}
	if _, err := e.Append(ctx, "cut-0", recs); err != nil {
		t.Fatal(err)
	}
	if err := e.Close(); err != nil {
		t.Fatal(err)
	}
	addr, _, stop := serveDir(t, dir, Config{})
	defer stop()
	c := client(t, addr)
	for _, step := range []struct {
		name     string
		first    int32
		n        int
		wantCode int16
		wantBase int64
	}{
		{"the retry of the cut batch", 3, 5, errNone, 3},
		{"the same retry again", 3, 5, errNone, 3},
		{"the next batch", 8, 2, errNone, 8},
	} {
		if code, base := produceIdempotent(t, c, "cut", pid, 0, step.first, step.n); code != step.wantCode || base != step.wantBase {
			t.Fatalf("%s: error %v, base %d; want error %v, base %d", step.name, kerr.ErrorForCode(code), base, kerr.ErrorForCode(step.wantCode), step.wantBase)
		}
	}
	// Each sequence once, in order: 0-9 at offsets 0-9.
	got := fetchValues(t, c, "cut", 0)
	if len(got) != 10 {
		t.Fatalf("the log holds %d records, want 10 (every sequence once): %v", len(got), got)
	}
	for i, v := range got {
		if v != byte(i) {
			t.Fatalf("offset %d holds the record of sequence %d, want %d: %v", i, v, i, got)
		}
	}
}

// fetchValues reads partition 0 of topic from offset, one byte a value.
func fetchValues(t *testing.T, c *kgo.Client, topic string, offset int64) []byte {
	t.Helper()
	req := kmsg.NewPtrFetchRequest()
	req.MaxBytes, req.MaxWaitMillis = 1<<20, 100
	rt := kmsg.NewFetchRequestTopic()
	rt.Topic = topic
	rp := kmsg.NewFetchRequestTopicPartition()
	rp.FetchOffset, rp.PartitionMaxBytes = offset, 1<<20
	rt.Partitions = append(rt.Partitions, rp)
	req.Topics = append(req.Topics, rt)
	resp, err := req.RequestWith(context.Background(), c)
	if err != nil {
		t.Fatal(err)
	}
	p := resp.Topics[0].Partitions[0]
	if p.ErrorCode != 0 {
		t.Fatalf("fetch %s: %v", topic, kerr.ErrorForCode(p.ErrorCode))
	}
	var out []byte
	for raw := p.RecordBatches; len(raw) > 0; {
		var b kmsg.RecordBatch
		if err := b.ReadFrom(raw); err != nil {
			t.Fatal(err)
		}
		raw = raw[12+int(b.Length):]
		data := b.Records
		for i := int32(0); i < b.NumRecords; i++ {
			l, k := binary.Varint(data)
			var r kmsg.Record
			if err := r.ReadFrom(data[:k+int(l)]); err != nil {
				t.Fatal(err)
			}
			data = data[k+int(l):]
			out = append(out, r.Value...)
		}
	}
	return out
}

// A batch whose header disagrees with its records is refused with
// INVALID_RECORD, as Kafka's log validator refuses it, and nothing of it is
// stored: idempotence takes a batch's sequence range from its header, so a
// lying header would make the producer's next real batch look like a
// duplicate (answered as stored, stored nowhere). Transactional batches
// are refused while strata has no transactions. The producer's next honest
// batch is stored where it belongs.
func TestProduceRefusesBatchesThatLie(t *testing.T) {
	addr, s := startServer(t, Config{AutoCreateTopics: true, DefaultPartitions: 1})
	c := client(t, addr)
	createTopic(t, c, "lies", 1)
	const pid = 5
	batch := func(n int, edit func(b []byte) []byte) []byte {
		recs := make([]record.Record, n)
		for i := range recs {
			recs[i] = record.Record{Timestamp: 1_700_000_000_000, Value: []byte{byte(i)}}
		}
		b := encodeBatch(nil, recs)
		binary.BigEndian.PutUint64(b[43:], pid)
		binary.BigEndian.PutUint16(b[51:], 0)
		binary.BigEndian.PutUint32(b[53:], 0)
		b = edit(b)
		binary.BigEndian.PutUint32(b[17:], crc32.Checksum(b[21:], castagnoli))
		return b
	}
	put32 := func(at int, v int32) func([]byte) []byte {
		return func(b []byte) []byte { binary.BigEndian.PutUint32(b[at:], uint32(v)); return b }
	}
	attrs := func(a uint16) func([]byte) []byte {
		return func(b []byte) []byte { binary.BigEndian.PutUint16(b[21:], a); return b }
	}
	const lastOffsetDelta, count = 23, 57
	for _, tc := range []struct {
		name    string
		records []byte
		want    int16
	}{
		{"last offset delta past the records", batch(2, put32(lastOffsetDelta, 100)), kerr.InvalidRecord.Code},
		{"a negative last offset delta", batch(2, put32(lastOffsetDelta, -5)), kerr.InvalidRecord.Code},
		{"a count below the records", batch(2, func(b []byte) []byte { return put32(lastOffsetDelta, 0)(put32(count, 1)(b)) }), kerr.InvalidRecord.Code},
		{"a count of zero", batch(1, func(b []byte) []byte { return put32(lastOffsetDelta, -1)(put32(count, 0)(b)) }), kerr.InvalidRecord.Code},
		{"a control batch", batch(1, attrs(0x20)), kerr.InvalidRecord.Code},
		{"a transactional batch", batch(1, attrs(0x10)), kerr.InvalidTxnState.Code},
		{"two batches for one partition", append(batch(2, func(b []byte) []byte { return b }), batch(2, func(b []byte) []byte { return b })...), kerr.InvalidRecord.Code},
		{"no batch at all", []byte{}, kerr.InvalidRecord.Code},
	} {
		resp, err := produceRequest("lies", tc.records).RequestWith(context.Background(), c)
		if err != nil {
			t.Fatal(err)
		}
		if p := resp.Topics[0].Partitions[0]; p.ErrorCode != tc.want || p.BaseOffset != -1 {
			t.Errorf("%s: error %d, base offset %d; want error %d, -1", tc.name, p.ErrorCode, p.BaseOffset, tc.want)
		}
	}
	if _, high, err := s.Watermarks(context.Background(), "lies-0"); err != nil || high != 0 {
		t.Fatalf("after the refusals the log ends at %d (%v); want nothing stored", high, err)
	}
	if code, base := produceIdempotent(t, c, "lies", pid, 0, 0, 3); code != errNone || base != 0 {
		t.Errorf("the producer's first honest batch: error %d, base %d; want stored at 0", code, base)
	}
	if code, base := produceIdempotent(t, c, "lies", pid, 0, 3, 1); code != errNone || base != 3 {
		t.Errorf("its next batch: error %d, base %d; want stored at 3", code, base)
	}
}
