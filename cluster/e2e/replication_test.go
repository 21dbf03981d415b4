package e2e

import (
	"context"
	"slices"
	"testing"
	"time"

	"github.com/twmb/franz-go/pkg/kadm"

	"strata/internal/testsvc"
)

// newClusterWith starts n nodes with more settings.
func newClusterWith(t *testing.T, n int, sets ...string) *cluster {
	c := &cluster{t: t, etcd: testsvc.StartEtcd(t), pfx: "/" + testsvc.UniquePrefix(t), nodes: map[int32]*testsvc.Process{}, sets: sets}
	for id := int32(1); id <= int32(n); id++ {
		c.add(id)
	}
	return c
}

// createReplicated creates topic with replication factor rf and configs.
func createReplicated(t *testing.T, c *cluster, topic string, partitions int32, rf int16, configs map[string]*string) {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	resp, err := kadm.NewClient(c.client(1)).CreateTopic(ctx, partitions, rf, configs, topic)
	if err == nil {
		err = resp.Err
	}
	if err != nil {
		t.Fatalf("create topic %s with replication factor %d: %v", topic, rf, err)
	}
}

// isrs asks node `from` for topic's partitions' leaders and ISRs.
func (c *cluster) isrs(from int32, topic string) (leaders map[int32]int32, isr map[int32][]int32) {
	c.t.Helper()
	md, err := c.metadata(c.client(from), topic)
	if err != nil || len(md.Topics) != 1 {
		c.t.Fatalf("metadata of %s from node %d: %v", topic, from, err)
	}
	leaders, isr = map[int32]int32{}, map[int32][]int32{}
	for _, p := range md.Topics[0].Partitions {
		leaders[p.Partition] = p.Leader
		s := slices.Clone(p.ISR)
		slices.Sort(s)
		isr[p.Partition] = s
	}
	return leaders, isr
}

// waitISR waits until node `from` says every partition of topic has a
// live leader and all n replicas in sync.
func (c *cluster) waitISR(from int32, topic string, n int) {
	c.t.Helper()
	deadline := time.Now().Add(60 * time.Second)
	for {
		leaders, isr := c.isrs(from, topic)
		ok := len(leaders) > 0
		for p, l := range leaders {
			ok = ok && l >= 0 && len(isr[p]) == n
		}
		if ok {
			return
		}
		if time.Now().After(deadline) {
			c.t.Fatalf("topic %s: leaders %v, ISRs %v: want every partition led with %d in sync", topic, leaders, isr, n)
		}
		time.Sleep(200 * time.Millisecond)
	}
}

// The leader of a partition with three replicas is killed (SIGKILL) under
// idempotent acks=all load, again and again: a follower in the ISR takes
// over, the killed node comes back as a follower and catches up, and no
// write that was acknowledged is lost, none is stored twice, and no two
// reads disagree about an offset.
func TestReplicatedLeaderKilledUnderLoad(t *testing.T) {
	c := newClusterWith(t, 3, "cluster.replica_lag_time_max=2s")
	two := "2"
	createReplicated(t, c, "rep", 3, 3, map[string]*string{"min.insync.replicas": &two})
	c.waitISR(1, "rep", 3)
	h := newHistory()
	stop := c.startLoad(h, "rep", []int32{0, 1, 2}, 100, 1, 2, 3)
	defer stop()
	const kills = 4
	for i := 0; i < kills; i++ {
		time.Sleep(2 * time.Second)
		leaders, _ := c.isrs(1+int32(i%3), "rep")
		victim := leaders[int32(i%3)]
		if victim < 0 {
			t.Fatalf("kill %d: partition %d has no leader: %v", i, i%3, leaders)
		}
		t.Logf("kill %d: SIGKILL node %d, leader of rep-%d", i, victim, i%3)
		c.nodes[victim].Kill()
		time.Sleep(sessionTTL + time.Second)
		c.nodes[victim].Restart()
		c.waitISR(victim%3+1, "rep", 3)
	}
	// The last kill is for good: every acknowledged record is read from
	// the two replicas left.
	leaders, _ := c.isrs(1, "rep")
	gone := leaders[0]
	c.nodes[gone].Kill()
	left := gone%3 + 1
	time.Sleep(2 * time.Second)
	stop()
	c.readAll(h, left, "rep")
	n := h.check(t)
	t.Logf("%d kills, %d records acknowledged; failures: %s", kills, n, h.failures())
}
