package e2e

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"testing"
	"time"

	"github.com/twmb/franz-go/pkg/kadm"
	"github.com/twmb/franz-go/pkg/kerr"
	"github.com/twmb/franz-go/pkg/kmsg"
)

// CreatePartitions sent to any node grows a topic across the cluster: the
// controller places the new partitions on live nodes, every node's
// Metadata shows them, they start empty and take records; the old
// partitions keep their leaders and their records, and the topic's
// configs (in its etcd record, which the grow rewrites) are unchanged.
// Shrinking is refused as Kafka refuses it.
func TestCreatePartitionsAcrossNodes(t *testing.T) {
	c := newCluster(t, 3)
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	adm1 := kadm.NewClient(c.client(1))
	cfgs := map[string]*string{"retention.ms": kadm.StringPtr("3600000"), "strata.parquet.codec": kadm.StringPtr("snappy")}
	if resp, err := adm1.CreateTopic(ctx, 3, 1, cfgs, "orders"); err != nil || resp.Err != nil {
		t.Fatalf("create orders: %v %v", err, resp.Err)
	}
	before := c.leaders(1, "orders", func(brokers int, l []int32) bool { return brokers == 3 && allLed(brokers, l) })
	old := c.produce(2, "orders", []int32{0, 1, 2}, 20, "before")

	// Sent straight to a node that is not the controller (a Kafka client
	// would send it to the controller Metadata names; strata's nodes each
	// take it).
	ctrl := c.controller(1, func(id int32) bool { return id >= 1 })
	via := int32(1)
	for via == ctrl {
		via++
	}
	req := kmsg.NewPtrCreatePartitionsRequest()
	req.TimeoutMillis = 30_000
	rt := kmsg.NewCreatePartitionsRequestTopic()
	rt.Topic, rt.Count = "orders", 6
	req.Topics = append(req.Topics, rt)
	raw, err := c.client(via).Broker(int(via)).Request(ctx, req)
	if err != nil {
		t.Fatal(err)
	}
	if r := raw.(*kmsg.CreatePartitionsResponse).Topics[0]; r.ErrorCode != 0 {
		t.Fatalf("grow orders to 6 partitions at node %d (the controller is %d): %v %v", via, ctrl, kerr.ErrorForCode(r.ErrorCode), r.ErrorMessage)
	}
	adm := kadm.NewClient(c.client(via))
	for id := range c.nodes {
		after := c.leaders(id, "orders", func(brokers int, l []int32) bool { return len(l) == 6 && allLed(brokers, l) })
		if !slices.Equal(after[:3], before) {
			t.Errorf("node %d: the old partitions' leaders went from %v to %v", id, before, after[:3])
		}
		// Placed by load: three new partitions on three equally loaded nodes.
		if distinct(after[3:]) != 3 || slices.ContainsFunc(after[3:], func(l int32) bool { return l < 1 || l > 3 }) {
			t.Errorf("node %d: the new partitions are led by %v: want one on each live node", id, after[3:])
		}
	}
	// A new partition's leader makes its shard a moment after Metadata
	// names it; until then ListOffsets answers a retriable error.
	var ends kadm.ListedOffsets
	for deadline := time.Now().Add(20 * time.Second); ; time.Sleep(100 * time.Millisecond) {
		var err error
		if ends, err = adm.ListEndOffsets(ctx, "orders"); err == nil && ends.Error() == nil {
			break
		} else if time.Now().After(deadline) {
			t.Fatalf("end offsets of orders after the grow: %v %v", err, ends.Error())
		}
	}
	got := map[int32]int64{}
	ends.Each(func(o kadm.ListedOffset) { got[o.Partition] = o.Offset })
	if want := map[int32]int64{0: 20, 1: 20, 2: 20, 3: 0, 4: 0, 5: 0}; fmt.Sprint(got) != fmt.Sprint(want) {
		t.Fatalf("after the grow, end offsets %v, want %v: the old partitions keep their records, the new ones start empty", got, want)
	}

	// Every partition takes records, through any node, and reads back.
	more := c.produce(3, "orders", []int32{0, 1, 2, 3, 4, 5}, 20, "after")
	read := c.consume(1, "orders", 3*20+6*20)
	for p := int32(0); p < 6; p++ {
		want := append(slices.Clone(old[p]), more[p]...)
		if !slices.Equal(read[p], want) {
			t.Errorf("partition %d: read %d records %v..., want %d %v...", p, len(read[p]), head(read[p]), len(want), head(want))
		}
	}

	// The configs survive the grow, on every node.
	for id := range c.nodes {
		rcs, err := kadm.NewClient(c.client(id)).DescribeTopicConfigs(ctx, "orders")
		if err != nil {
			t.Fatal(err)
		}
		rc, err := rcs.On("orders", nil)
		if err != nil {
			t.Fatalf("node %d: describe configs of orders: %v", id, err)
		}
		for key, want := range map[string]string{"retention.ms": "3600000", "strata.parquet.codec": "snappy"} {
			i := slices.IndexFunc(rc.Configs, func(c kadm.Config) bool { return c.Key == key })
			if i < 0 || rc.Configs[i].MaybeValue() != want || rc.Configs[i].Source.String() != "DYNAMIC_TOPIC_CONFIG" {
				t.Errorf("node %d after the grow: %s is %+v, want %s from the topic", id, key, rc.Configs[max(i, 0)], want)
			}
		}
	}

	// No shrinking, and no grow of a topic that does not exist.
	resp, err := kadm.NewClient(c.client(2)).UpdatePartitions(ctx, 4, "orders", "never")
	if err != nil {
		t.Fatal(err)
	}
	if r := resp["orders"]; !errors.Is(r.Err, kerr.InvalidPartitions) || r.ErrMessage != "The topic orders currently has 6 partition(s); 4 would not be an increase." {
		t.Errorf("shrinking orders to 4: %v %q", r.Err, r.ErrMessage)
	}
	if r := resp["never"]; !errors.Is(r.Err, kerr.UnknownTopicOrPartition) {
		t.Errorf("growing a topic that does not exist: %v", r.Err)
	}
}
