package e2e

import (
	"context"
	"testing"
	"time"

	"github.com/twmb/franz-go/pkg/kadm"
	"github.com/twmb/franz-go/pkg/kerr"
	"github.com/twmb/franz-go/pkg/kgo"
	"github.com/twmb/franz-go/pkg/kmsg"
)

// DeleteRecords is answered only once every ISR member has deleted (Kafka's
// low watermark): the leader SIGKILLed the moment its answer arrives leaves
// a successor whose log starts at the deletion, which serves none of the
// deleted offsets, also after the old leader returns.
func TestDeleteRecordsHoldsThroughLeaderKill(t *testing.T) {
	c := newClusterWith(t, 3)
	createReplicated(t, c, "del", 1, 3, map[string]*string{"min.insync.replicas": kadm.StringPtr("2")})
	c.waitISR(1, "del", 3)
	leaders, _ := c.isrs(1, "del")
	leader := leaders[0]
	c.produce(leader, "del", []int32{0}, 100, "rec")
	c.waitISR(leader, "del", 3)
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	del, err := kadm.NewClient(c.client(leader)).DeleteRecords(ctx, kadm.Offsets{"del": {0: {Topic: "del", Partition: 0, At: 60}}})
	if err == nil {
		err = del.Error()
	}
	if err != nil {
		t.Fatalf("DeleteRecords before 60: %v", err)
	}
	c.nodes[leader].Kill()
	next := c.newLeader(leader%3+1, "del", 0, leader)
	checkStart := func(via int32, when string) {
		t.Helper()
		starts, err := kadm.NewClient(c.client(via)).ListStartOffsets(ctx, "del")
		if err == nil {
			err = starts.Error()
		}
		if o, _ := starts.Lookup("del", 0); err != nil || o.Offset != 60 {
			t.Fatalf("%s: the log of del-0 starts at %d (%v) at node %d, want 60: an acknowledged delete undone", when, o.Offset, err, via)
		}
		// A read of a deleted offset is refused, not answered.
		req := kmsg.NewPtrFetchRequest()
		req.MaxBytes, req.MaxWaitMillis = 1<<20, 100
		rt := kmsg.NewFetchRequestTopic()
		rt.Topic = "del"
		rp := kmsg.NewFetchRequestTopicPartition()
		rp.FetchOffset, rp.PartitionMaxBytes, rp.CurrentLeaderEpoch = 10, 1<<20, -1
		rt.Partitions = append(rt.Partitions, rp)
		req.Topics = append(req.Topics, rt)
		cl := c.client(via)
		resp, err := req.RequestWith(ctx, cl.Broker(int(via)))
		if err != nil {
			t.Fatal(err)
		}
		if p := resp.Topics[0].Partitions[0]; p.ErrorCode != kerr.OffsetOutOfRange.Code {
			t.Fatalf("%s: a fetch of deleted offset 10 at node %d answered %v with %d bytes, want OFFSET_OUT_OF_RANGE", when, via, kerr.ErrorForCode(p.ErrorCode), len(p.RecordBatches))
		}
	}
	checkStart(next, "the leader killed as DeleteRecords answered")
	c.nodes[leader].Restart()
	c.waitISR(next, "del", 3)
	now, _ := c.isrs(next, "del")
	checkStart(now[0], "the old leader back")
	// Consumers from the start read from 60 on.
	cl := c.client(now[0], kgo.ConsumeTopics("del"), kgo.ConsumeResetOffset(kgo.NewOffset().AtStart()))
	fs := cl.PollFetches(ctx)
	if recs := fs.Records(); len(recs) == 0 || recs[0].Offset != 60 {
		t.Fatalf("a consumer from the start read %d records from offset %v (%v), want from 60", len(recs), recs, fs.Errors())
	}
}
