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
)

// What a broker does with a producer's batch, given what it knows.
func TestSequenceCheck(t *testing.T) {
	known := &producerState{epoch: 2, lastSeq: 19, recent: []seqRange{{0, 9, 100}, {10, 19, 150}}}
	wrapped := &producerState{lastSeq: 1, recent: []seqRange{{math.MaxInt32 - 4, math.MaxInt32 - 2, 497}, {math.MaxInt32 - 1, 1, 500}}}
	for _, tc := range []struct {
		name        string
		st          *producerState
		epoch       int16
		first, last int32
		want        verdict
		wantBase    int64
	}{
		{"a producer never seen", nil, 0, 0, 4, appendBatch, -1},
		{"a producer never seen, mid-stream", nil, 3, 40, 44, appendBatch, -1},
		{"the next batch", known, 2, 20, 29, appendBatch, -1},
		{"a retry of the last batch", known, 2, 10, 19, duplicateBatch, 150},
		{"a retry of an earlier batch", known, 2, 0, 9, duplicateBatch, 100},
		{"a retry of part of a run", known, 2, 3, 5, duplicateBatch, 103},
		{"a duplicate older than the recent batches", &producerState{epoch: 2, lastSeq: 19, recent: []seqRange{{10, 19, 150}}}, 2, 0, 9, unknownDuplicate, -1},
		{"a gap", known, 2, 25, 29, outOfOrder, -1},
		{"overlapping what is stored", known, 2, 15, 25, outOfOrder, -1},
		{"a new epoch from zero", known, 3, 0, 4, appendBatch, -1},
		{"a new epoch not from zero", known, 3, 20, 24, outOfOrder, -1},
		{"a fenced epoch", known, 1, 20, 24, fencedEpoch, -1},
		// Sequences wrap from math.MaxInt32 to 0, as Kafka's do.
		{"a batch that wraps", &producerState{lastSeq: math.MaxInt32 - 2}, 0, math.MaxInt32 - 1, 1, appendBatch, -1},
		{"the batch after the wrap", wrapped, 0, 2, 6, appendBatch, -1},
		{"a retry of the batch that wrapped", wrapped, 0, math.MaxInt32 - 1, 1, duplicateBatch, 500},
		{"a retry of its part past the wrap", wrapped, 0, 0, 1, duplicateBatch, 502},
		{"a gap after the wrap", wrapped, 0, 5, 6, outOfOrder, -1},
	} {
		t.Run(tc.name, func(t *testing.T) {
			v, base := check(tc.st, tc.epoch, tc.first, tc.last)
			if v != tc.want || base != tc.wantBase {
				t.Fatalf("check = %d, base %d; want %d, base %d", v, base, tc.want, tc.wantBase)
			}
		})
	}
}

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
