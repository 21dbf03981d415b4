package e2e

import (
	"fmt"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"
	"time"

	"strata/internal/testsvc"
)

// A replicated partition's sealed segments are tiered from any replica
// whose copy agreed at the seal: with the leader that wrote them dead, the
// two followers tier every one of them (each segment once, by claims), and
// every record reads back through the new leader, the tiered ones from the
// bucket.
func TestTieringFromAnyReplicaWithTheLeaderDead(t *testing.T) {
	shared := t.TempDir()
	c := &cluster{t: t, etcd: testsvc.StartEtcd(t), pfx: "/" + testsvc.UniquePrefix(t), nodes: map[int32]*testsvc.Process{},
		sets: []string{"tiering.enabled=true", "tiering.schedule=@every 1h", "tiering.min_sealed_age=0s", "tiering.local_retention=0s",
			"tiering.orphan_grace=1ms", "segment.max_bytes=4KiB", "segment.roll_check_interval=5", "cold.local.dir=" + shared,
			"cluster.replica_lag_time_max=2s"}}
	for id := int32(1); id <= 3; id++ {
		c.add(id)
	}
	two := "2"
	createReplicated(t, c, "tiered", 1, 3, map[string]*string{"min.insync.replicas": &two})
	c.waitISR(1, "tiered", 3)
	leaders, _ := c.isrs(1, "tiered")
	leader := leaders[0]
	var want []string
	for round := range 6 {
		want = append(want, c.produce(leader, "tiered", []int32{0}, 50, fmt.Sprintf("t%d", round))[0]...)
	}
	// Every segment the leader sealed is sealed for the cluster.
	deadline := time.Now().Add(30 * time.Second)
	var seals map[uint64]sealRecord
	for {
		seals = c.seals("tiered", 0)
		if len(seals) >= 2 && len(seals) >= len(c.sealedHere(leader, "tiered")) {
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("%d segments sealed for the cluster, the leader holds %d", len(seals), len(c.sealedHere(leader, "tiered")))
		}
		time.Sleep(200 * time.Millisecond)
	}
	c.nodes[leader].Kill()
	var left []int32
	for id := range c.nodes {
		if id != leader {
			left = append(left, id)
		}
	}
	slices.Sort(left)
	// Once its lease has expired the cluster knows it is dead.
	c.waitLeader("tiered", left[0], leader)
	// The preferred replica (least loaded, live) tiers first; the other
	// leaves the segments to it. Each runs twice.
	uploaded := map[string]int32{}
	for range 2 {
		for _, id := range left {
			for _, u := range c.tierRun(id).Uploaded {
				if by, ok := uploaded[u.Key]; ok {
					t.Fatalf("%s uploaded twice: by nodes %d and %d", u.Key, by, id)
				}
				uploaded[u.Key] = id
			}
		}
	}
	dir := filepath.Join(shared, "topic=tiered", "partition=0")
	entries, err := os.ReadDir(dir)
	if err != nil {
		t.Fatalf("with leader %d dead, nothing was tiered: %v", leader, err)
	}
	var objects []string
	for _, e := range entries {
		if strings.HasSuffix(e.Name(), ".parquet") {
			objects = append(objects, e.Name())
		}
	}
	if len(objects) < len(seals) || len(uploaded) != len(objects) {
		t.Fatalf("with leader %d dead: %d objects in the bucket, %d uploaded, %d segments sealed for the cluster", leader, len(objects), len(uploaded), len(seals))
	}
	got := c.consume(left[0], "tiered", len(want))
	if !slices.Equal(got[0], want) {
		t.Fatalf("read back %d records through the new leader, want the %d produced", len(got[0]), len(want))
	}
	t.Logf("leader %d dead; %d segments tiered by nodes %v", leader, len(objects), uploaded)
}

// waitLeader waits until node `from` names a live leader of topic's
// partition 0 other than old.
func (c *cluster) waitLeader(topic string, from, old int32) {
	c.t.Helper()
	deadline := time.Now().Add(30 * time.Second)
	for {
		l, _ := c.isrs(from, topic)
		if l[0] >= 0 && l[0] != old {
			return
		}
		if time.Now().After(deadline) {
			c.t.Fatalf("%s: no leader other than the dead node %d: %v", topic, old, l)
		}
		time.Sleep(100 * time.Millisecond)
	}
}
