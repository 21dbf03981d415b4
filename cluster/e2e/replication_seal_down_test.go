package e2e

import (
	"context"
	"slices"
	"testing"
	"time"

	"github.com/twmb/franz-go/pkg/kgo"
)

// Sealing never waits on a dead replica: with a follower killed, the ISR
// shrinks to the two left and the segments rolled meanwhile are sealed for
// the cluster with those two. When the follower is back it copies what it
// missed, rolling where the leader rolled, and the seals of its copies that
// agree name it too.
func TestSealWithAReplicaDown(t *testing.T) {
	c := newClusterWith(t, 3, "cluster.replica_lag_time_max=2s", "segment.max_bytes=64KiB", "segment.roll_check_interval=1")
	two := "2"
	createReplicated(t, c, "down", 1, 3, map[string]*string{"min.insync.replicas": &two})
	c.waitISR(1, "down", 3)
	leaders, _ := c.isrs(1, "down")
	leader := leaders[0]
	down := leader%3 + 1
	h := newHistory()
	stop := c.startLoad(h, "down", []int32{0}, 300, leader)
	defer stop()
	time.Sleep(2 * time.Second)
	c.nodes[down].Kill()
	// Segments sealed while it is down are recorded without it.
	var without []uint64
	for deadline := time.Now().Add(20 * time.Second); len(without) < 2; time.Sleep(200 * time.Millisecond) {
		without = without[:0]
		for start, s := range c.seals("down", 0) {
			if !slices.Contains(s.Replicas, down) {
				without = append(without, start)
			}
		}
		if time.Now().After(deadline) {
			t.Fatalf("with node %d down, %d segments were sealed for the cluster without it; want 2: %v", down, len(without), c.seals("down", 0))
		}
	}
	c.nodes[down].Restart()
	c.waitISR(leader, "down", 3)
	time.Sleep(2 * time.Second)
	stop()
	// Once it holds them, its equal copies of the recent segments count.
	deadline := time.Now().Add(20 * time.Second)
	for {
		mine := c.sealedHere(down, "down")
		missing := 0
		for start, s := range c.seals("down", 0) {
			if cp, ok := mine[start]; ok && cp.CRC == s.CRC && cp.Last == s.Last && !slices.Contains(s.Replicas, down) {
				missing++
			}
		}
		if missing == 0 {
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("node %d holds %d sealed copies equal to the leader's that their seals do not name: %v", down, missing, c.seals("down", 0))
		}
		time.Sleep(200 * time.Millisecond)
	}
	c.readAll(h, leader, "down")
	h.check(t)
	t.Logf("%d segments sealed without node %d while it was down", len(without), down)
}

// A follower's copying is paced by cluster.follower_throttled_rate: one
// that comes back far behind catches up at that pace, not at the disk's,
// and then rejoins the ISR.
func TestFollowerThrottled(t *testing.T) {
	c := newClusterWith(t, 3, "cluster.replica_lag_time_max=2s", "cluster.follower_throttled_rate=512KiB")
	createReplicated(t, c, "slow", 1, 3, nil)
	c.waitISR(1, "slow", 3)
	leaders, _ := c.isrs(1, "slow")
	leader := leaders[0]
	behind := leader%3 + 1
	c.nodes[behind].Kill()
	cl := c.client(leader)
	value := make([]byte, 1024)
	for i := 0; i < 4096; i++ { // 4 MiB
		cl.Produce(context.Background(), &kgo.Record{Topic: "slow", Value: value}, nil)
	}
	if err := cl.Flush(context.Background()); err != nil {
		t.Fatal(err)
	}
	back := time.Now()
	c.nodes[behind].Restart()
	c.waitISR(leader, "slow", 3)
	// 4 MiB at 512 KiB/s, the first MiB at once (the limiter's burst).
	if took := time.Since(back); took < 4*time.Second {
		t.Fatalf("the throttled follower caught up on 4 MiB in %s; at 512 KiB/s it takes about 6s", took)
	}
}
