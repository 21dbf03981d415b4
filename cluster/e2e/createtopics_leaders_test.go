package e2e

import (
	"context"
	"fmt"
	"testing"
	"time"

	"github.com/twmb/franz-go/pkg/kerr"
	"github.com/twmb/franz-go/pkg/kgo"
	"github.com/twmb/franz-go/pkg/kmsg"
)

// CreateTopics and CreatePartitions answer once the node that took them
// knows a leader for every new partition (Kafka's rule): a client that asks
// that node's Metadata right after the answer, as franz-go's TestIssue523
// does, never sees LEADER_NOT_AVAILABLE, and its first produce to each new
// partition is taken by the leader Metadata names.
func TestCreateTopicsAnswersOnceLeadersAreKnown(t *testing.T) {
	c := newCluster(t, 3)
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	for deadline := time.Now().Add(30 * time.Second); ; time.Sleep(100 * time.Millisecond) {
		if md, err := c.metadata(c.client(1)); err == nil && len(md.Brokers) == 3 {
			break
		} else if time.Now().After(deadline) {
			t.Fatalf("3 nodes never registered: %v %v", md, err)
		}
	}
	for via := int32(1); via <= 3; via++ {
		cl := c.client(via)
		for round, rf := range []int16{3, 1, 3} {
			topic := fmt.Sprintf("new-%d-%d", via, round)
			req := kmsg.NewPtrCreateTopicsRequest()
			req.TimeoutMillis = 30_000
			rt := kmsg.NewCreateTopicsRequestTopic()
			rt.Topic, rt.NumPartitions, rt.ReplicationFactor = topic, 6, rf
			req.Topics = append(req.Topics, rt)
			resp, err := req.RequestWith(ctx, cl.Broker(int(via)))
			if err != nil || resp.Topics[0].ErrorCode != 0 {
				t.Fatalf("create %s (rf %d) at node %d: %v %v", topic, rf, via, err, kerr.ErrorForCode(resp.Topics[0].ErrorCode))
			}
			leaderless(t, cl, via, topic, 6, "after CreateTopics")

			grow := kmsg.NewPtrCreatePartitionsRequest()
			grow.TimeoutMillis = 30_000
			gt := kmsg.NewCreatePartitionsRequestTopic()
			gt.Topic, gt.Count = topic, 9
			grow.Topics = append(grow.Topics, gt)
			gresp, err := grow.RequestWith(ctx, cl.Broker(int(via)))
			if err != nil || gresp.Topics[0].ErrorCode != 0 {
				t.Fatalf("grow %s at node %d: %v %v", topic, via, err, kerr.ErrorForCode(gresp.Topics[0].ErrorCode))
			}
			leaderless(t, cl, via, topic, 9, "after CreatePartitions")

			var recs []*kgo.Record
			for p := int32(0); p < 9; p++ {
				recs = append(recs, &kgo.Record{Topic: topic, Partition: p, Value: []byte("first")})
			}
			// A new client: this one's cache knows 6 partitions.
			pcl := c.client(via, kgo.RecordPartitioner(kgo.ManualPartitioner()), kgo.RequiredAcks(kgo.AllISRAcks()))
			if err := pcl.ProduceSync(ctx, recs...).FirstErr(); err != nil {
				t.Fatalf("produce to every partition of %s through node %d: %v", topic, via, err)
			}
		}
	}
}

// leaderless fails the test if node via's Metadata, asked at once, lacks a
// leader for any of topic's partitions.
func leaderless(t *testing.T, cl *kgo.Client, via int32, topic string, partitions int, when string) {
	t.Helper()
	req := kmsg.NewPtrMetadataRequest()
	rt := kmsg.NewMetadataRequestTopic()
	rt.Topic = kmsg.StringPtr(topic)
	req.Topics = append(req.Topics, rt)
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	md, err := req.RequestWith(ctx, cl.Broker(int(via)))
	if err != nil {
		t.Fatalf("metadata from node %d %s: %v", via, when, err)
	}
	if len(md.Topics) != 1 || md.Topics[0].ErrorCode != 0 || len(md.Topics[0].Partitions) != partitions {
		t.Fatalf("metadata from node %d %s of %s: %+v", via, when, topic, md.Topics)
	}
	for _, p := range md.Topics[0].Partitions {
		if p.ErrorCode != 0 || p.Leader < 0 {
			t.Errorf("node %d's metadata %s: %s-%d has leader %d, %v", via, when, topic, p.Partition, p.Leader, kerr.ErrorForCode(p.ErrorCode))
		}
	}
}
