package e2e

import (
	"context"
	"errors"
	"testing"
	"time"

	"github.com/twmb/franz-go/pkg/kerr"
	"github.com/twmb/franz-go/pkg/kmsg"
	clientv3 "go.etcd.io/etcd/client/v3"
	"go.uber.org/zap"

	stratacluster "strata/cluster"
)

// peerSecret reads the secret the nodes prove their replica requests with,
// as a node does from etcd.
func (c *cluster) peerSecret() []byte {
	c.t.Helper()
	cli, err := clientv3.New(clientv3.Config{Endpoints: []string{c.etcd}, DialTimeout: 5 * time.Second, Logger: zap.NewNop()})
	if err != nil {
		c.t.Fatal(err)
	}
	defer cli.Close()
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	s, err := stratacluster.PeerSecret(ctx, cli, c.pfx)
	if err != nil {
		c.t.Fatal(err)
	}
	return s
}

// A client that is not a node sends the leader a follower's fetch under
// the live follower's id, at the leader's log end, while the real follower
// is cut off: the leader answers it as a consumer's, the high watermark
// stays where the real follower left it, and acks=all is not acknowledged
// for a write only the leader holds. Kafka asks CLUSTER_ACTION of replica
// fetches; strata asks for the cluster's peer proof (docs/replication.md).
func TestStrangerFollowerFetchDoesNotMoveHighWatermark(t *testing.T) {
	c := newProxiedCluster(t, 2, "cluster.replica_lag_time_max=60s")
	two := "2"
	createReplicated(t, c, "guarded", 1, 2, map[string]*string{"min.insync.replicas": &two})
	c.waitISR(1, "guarded", 2)
	leaders, _ := c.isrs(1, "guarded")
	leader := leaders[0]
	follower := 3 - leader
	for deadline := time.Now().Add(10 * time.Second); ; time.Sleep(100 * time.Millisecond) {
		err := c.produceOne(leader, "guarded", "first", -1, 5*time.Second)
		if err == nil {
			break
		}
		if !errors.Is(err, kerr.NotLeaderForPartition) || time.Now().After(deadline) {
			t.Fatalf("acks=all with the whole ISR: %v", err)
		}
	}
	if got := c.endOffset(leader, "guarded"); got != 1 {
		t.Fatalf("after one acknowledged write the end offset is %d, want 1", got)
	}
	// The follower reaches the leader only through the leader's proxy:
	// holding it stops its fetches while its lease stays live.
	c.kproxy[leader].hold(toTarget)
	c.kproxy[leader].hold(fromTarget)
	if err := c.produceOne(leader, "guarded", "unreplicated", -1, 300*time.Millisecond); !errors.Is(err, kerr.RequestTimedOut) {
		t.Fatalf("acks=all with the follower cut off: %v, want REQUEST_TIMED_OUT", err)
	}

	md, err := c.metadata(c.client(leader), "guarded")
	if err != nil || len(md.Topics) != 1 || len(md.Topics[0].Partitions) != 1 {
		t.Fatalf("metadata: %v", err)
	}
	epoch := md.Topics[0].Partitions[0].LeaderEpoch
	stranger := func(offset int64) kmsg.FetchResponseTopicPartition {
		t.Helper()
		req := kmsg.NewPtrFetchRequest()
		req.ReplicaID, req.MaxBytes, req.MaxWaitMillis = follower, 1<<20, 0
		rt := kmsg.NewFetchRequestTopic()
		rt.Topic = "guarded"
		rp := kmsg.NewFetchRequestTopicPartition()
		rp.Partition, rp.FetchOffset, rp.PartitionMaxBytes, rp.CurrentLeaderEpoch = 0, offset, 1<<20, epoch
		rp.UnknownTags.Set(0x5301, []byte{0}) // a follower's fetch (peer/wire.go)
		rt.Partitions = append(rt.Partitions, rp)
		req.Topics = append(req.Topics, rt)
		ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
		defer cancel()
		cl := c.client(leader)
		resp, err := req.RequestWith(ctx, cl.Broker(int(leader)))
		if err != nil || len(resp.Topics) != 1 || len(resp.Topics[0].Partitions) != 1 {
			t.Fatalf("the stranger's follower fetch: %v %+v", err, resp)
		}
		return resp.Topics[0].Partitions[0]
	}
	// At the leader's log end (2: "unreplicated" is stored there), as the
	// follower would fetch once it held it.
	got := stranger(2)
	got.UnknownTags.Each(func(k uint32, _ []byte) {
		if k == 0x5301 {
			t.Errorf("the leader answered a stranger as its follower (strata's replica records)")
		}
	})
	if hw := c.endOffset(leader, "guarded"); hw != 1 {
		t.Fatalf("after a stranger's follower fetch under node %d's id the high watermark is %d, want 1: a write only the leader holds counts as committed", follower, hw)
	}
	if err := c.produceOne(leader, "guarded", "still-unreplicated", -1, 300*time.Millisecond); !errors.Is(err, kerr.RequestTimedOut) {
		t.Fatalf("acks=all with the follower cut off, after a stranger's follower fetch: %v, want REQUEST_TIMED_OUT", err)
	}

	// The real follower, back in touch, proves its fetches and catches up.
	c.kproxy[leader].heal()
	deadline := time.Now().Add(30 * time.Second)
	for c.endOffset(leader, "guarded") < 3 {
		if time.Now().After(deadline) {
			t.Fatalf("the follower did not catch up after the heal: the high watermark is %d, want 3", c.endOffset(leader, "guarded"))
		}
		time.Sleep(100 * time.Millisecond)
	}
}
