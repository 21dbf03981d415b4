package peer

import (
	"bytes"
	"context"
	"log/slog"
	"testing"

	"github.com/twmb/franz-go/pkg/kerr"
	"github.com/twmb/franz-go/pkg/kmsg"

	"strata/engine/memory"
	"strata/engine/record"
	"strata/engine/store"
)

// copyReadOf is the Fetch a peer's Client.ReadCopy sends for partitions
// of topic t from their offsets, as the receiving node decodes it (at
// version 12, the last to name topics, not their ids).
func copyReadOf(t *testing.T, from int32, offsets map[int32]int64) *kmsg.FetchRequest {
	t.Helper()
	req := kmsg.NewPtrFetchRequest()
	req.ReplicaID, req.ReplicaState.ID = from, from
	rt := kmsg.NewFetchRequestTopic()
	rt.Topic = "t"
	for p, off := range offsets {
		rp := kmsg.NewFetchRequestTopicPartition()
		rp.Partition, rp.FetchOffset, rp.PartitionMaxBytes, rp.CurrentLeaderEpoch = p, off, 1<<20, -1
		rp.UnknownTags.Set(tagCopyRead, nil)
		rt.Partitions = append(rt.Partitions, rp)
	}
	req.Topics = append(req.Topics, rt)
	req.SetVersion(12)
	got := kmsg.NewPtrFetchRequest()
	got.SetVersion(12)
	if err := got.ReadFrom(req.AppendTo(nil)); err != nil {
		t.Fatal(err)
	}
	return got
}

// A copy read is answered at once from the node's log up to its log end,
// past the high watermark it knows, in strata's records byte for byte as
// stored; an offset outside the log or a partition it does not hold is an
// error on that partition alone.
func TestCopyReadAnswersFromTheLogEnd(t *testing.T) {
	ctx := context.Background()
	st := memory.New(0)
	if err := st.CreateShard(ctx, "t-0"); err != nil {
		t.Fatal(err)
	}
	recs := []record.Record{{Offset: 0, Value: []byte("a"), Tags: []string{"x"}}, {Offset: 1, Value: []byte("bb"), Key: []byte("k")}, {Offset: 2, Value: []byte("ccc")}}
	if err := st.AppendAt(ctx, "t-0", recs); err != nil {
		t.Fatal(err)
	}
	if err := st.SetHighWatermark(ctx, "t-0", 1); err != nil {
		t.Fatal(err)
	}
	var want []byte
	stored, err := st.ReadToLogEnd(ctx, "t-0", 0, store.Budget{MaxBytes: 1 << 20})
	if err != nil {
		t.Fatal(err)
	}
	for i := range stored {
		want, _ = record.Append(want, &stored[i])
	}
	s := &Server{Store: st, Log: slog.New(slog.DiscardHandler)}
	poll := func(context.Context, *kmsg.FetchRequest, func() (*kmsg.FetchResponse, bool)) kmsg.Response {
		t.Fatal("a copy read waited")
		return nil
	}
	resp, ok := s.Answer(ctx, copyReadOf(t, 2, map[int32]int64{0: 0, 1: 0}), poll)
	if !ok {
		t.Fatal("a copy read was left to the front end")
	}
	for _, p := range resp.(*kmsg.FetchResponse).Topics[0].Partitions {
		if !markedCopyRead(p.UnknownTags) {
			t.Errorf("partition %d's answer is not marked as a copy read", p.Partition)
		}
		switch p.Partition {
		case 0:
			if p.ErrorCode != 0 || !bytes.Equal(p.RecordBatches, want) {
				t.Errorf("t-0: error %d, %d bytes; want the %d stored bytes of 3 records, past the high watermark", p.ErrorCode, len(p.RecordBatches), len(want))
			}
			if got, err := decodeCopyRead(p.RecordBatches); err != nil || len(got) != 3 {
				t.Errorf("t-0's answer decodes to %d records, %v", len(got), err)
			}
		case 1:
			if p.ErrorCode != kerr.UnknownTopicOrPartition.Code {
				t.Errorf("t-1, not held here: error %d, want UNKNOWN_TOPIC_OR_PARTITION", p.ErrorCode)
			}
		}
	}
	for _, off := range []int64{-1, 4} {
		resp, _ := s.Answer(ctx, copyReadOf(t, 2, map[int32]int64{0: off}), poll)
		if p := resp.(*kmsg.FetchResponse).Topics[0].Partitions[0]; p.ErrorCode != kerr.OffsetOutOfRange.Code {
			t.Errorf("a copy read at %d: error %d, want OFFSET_OUT_OF_RANGE", off, p.ErrorCode)
		}
	}
}

// Only a peer's fetch whose every partition is marked is the Server's: a
// consumer's (no replica id), one partly marked, and a follower's on a
// node that replicates nothing go to the front end.
func TestAnswerLeavesOtherFetchesToTheFrontEnd(t *testing.T) {
	ctx := context.Background()
	s := &Server{Store: memory.New(0), Log: slog.New(slog.DiscardHandler)}
	poll := func(context.Context, *kmsg.FetchRequest, func() (*kmsg.FetchResponse, bool)) kmsg.Response {
		return nil
	}
	consumer := copyReadOf(t, -1, map[int32]int64{0: 0})
	partly := copyReadOf(t, 2, map[int32]int64{0: 0, 1: 0})
	partly.Topics[0].Partitions[1].UnknownTags = kmsg.Tags{}
	follower := copyReadOf(t, 2, map[int32]int64{0: 0})
	follower.Topics[0].Partitions[0].UnknownTags = kmsg.Tags{}
	follower.Topics[0].Partitions[0].UnknownTags.Set(tagReplicaFetch, []byte{0})
	for name, r := range map[string]*kmsg.FetchRequest{"a consumer's": consumer, "a partly marked": partly, "a follower's": follower} {
		if _, ok := s.Answer(ctx, r, poll); ok {
			t.Errorf("%s fetch was answered as a peer's", name)
		}
	}
	var none *Server
	if _, ok := none.Answer(ctx, copyReadOf(t, 2, map[int32]int64{0: 0}), poll); ok {
		t.Error("a node alone (no Server) answered a copy read")
	}
}
