package e2e

import (
	"testing"
	"time"
)

// strata.acks.all=quorum: acks=all waits for a majority of the three
// replicas, so a write may be on the leader and one follower only. When
// the leader is killed, the followers stop copying it and report their
// logs; the controller elects the longest of a majority, so no write a
// majority acknowledged is lost, and the old leader comes back a follower.
func TestQuorumLeaderKilledUnderLoad(t *testing.T) {
	c := newClusterWith(t, 3, "cluster.replica_lag_time_max=2s")
	two, quorum := "2", "quorum"
	createReplicated(t, c, "quorum", 1, 3, map[string]*string{"min.insync.replicas": &two, "strata.acks.all": &quorum})
	c.waitISR(1, "quorum", 3)
	h := newHistory()
	stop := c.startLoad(h, "quorum", []int32{0}, 200, 1, 2, 3)
	defer stop()
	for i := 0; i < 3; i++ {
		time.Sleep(2 * time.Second)
		leaders, _ := c.isrs(int32(i%3)+1, "quorum")
		victim := leaders[0]
		if victim < 0 {
			t.Fatalf("kill %d: no leader: %v", i, leaders)
		}
		t.Logf("kill %d: SIGKILL node %d, the leader", i, victim)
		c.nodes[victim].Kill()
		// The two left elect one of themselves.
		other := victim%3 + 1
		deadline := time.Now().Add(30 * time.Second)
		for {
			l, _ := c.isrs(other, "quorum")
			if l[0] >= 0 && l[0] != victim {
				break
			}
			if time.Now().After(deadline) {
				t.Fatalf("kill %d: no new leader among the two left: %v", i, l)
			}
			time.Sleep(100 * time.Millisecond)
		}
		c.nodes[victim].Restart()
		c.waitISR(other, "quorum", 3)
	}
	time.Sleep(time.Second)
	stop()
	c.readAll(h, 1, "quorum")
	n := h.check(t)
	t.Logf("%d records acknowledged; failures: %s", n, h.failures())
}
