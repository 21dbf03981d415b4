package e2e

import (
	"context"
	"path/filepath"
	"slices"
	"testing"
	"time"

	"github.com/twmb/franz-go/pkg/kadm"
)

// Replication runs over the engines' replication seam, so a replicated
// topic works on each engine: the leader is killed, a follower takes
// over with every acknowledged record, and the killed node comes back a
// follower and catches up (a memory topic's node comes back empty and is
// filled again from the leader).
func TestReplicationOnEveryEngine(t *testing.T) {
	for _, engine := range []string{"segment", "pebble", "memory", "shared"} {
		t.Run(engine, func(t *testing.T) {
			args := []string{"cluster.replica_lag_time_max=2s"}
			if engine == "shared" { // segments small enough to seal, for their checksums to agree
				args = append(args, "segment.max_bytes=4KiB", "segment.roll_check_interval=1")
			}
			c := newClusterWith(t, 3, args...)
			two, eng := "2", engine
			configs := map[string]*string{"min.insync.replicas": &two, "strata.engine": &eng}
			if engine == "shared" { // the segment engine, its partitions in the shared files
				seg, model := "segment", "shared"
				configs["strata.engine"], configs["strata.file.model"] = &seg, &model
			}
			createReplicated(t, c, "on-"+engine, 1, 3, configs)
			topic := "on-" + engine
			c.waitISR(1, topic, 3)
			leaders, _ := c.isrs(1, topic)
			leader := leaders[0]
			want := c.produce(leader, topic, []int32{0}, 100, "before")[0]
			c.nodes[leader].Kill()
			other := leader%3 + 1
			c.waitLeader(topic, other, leader)
			l, _ := c.isrs(other, topic)
			want = append(want, c.produce(l[0], topic, []int32{0}, 100, "after")[0]...)
			c.nodes[leader].Restart()
			c.waitISR(other, topic, 3)
			got := c.consume(other, topic, len(want))
			if !slices.Equal(got[0], want) {
				t.Fatalf("read %d records %v..., want the %d produced", len(got[0]), head(got[0]), len(want))
			}
			if engine == "shared" {
				checkSharedReplicas(t, c, topic)
			}
			// Records deleted at the leader are deleted at its followers:
			// the next leader's log starts there too.
			ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
			defer cancel()
			adm := kadm.NewClient(c.client(other))
			del, err := adm.DeleteRecords(ctx, kadm.Offsets{topic: {0: {Topic: topic, Partition: 0, At: 50}}})
			if err == nil {
				err = del.Error()
			}
			if err != nil {
				t.Fatalf("DeleteRecords before 50: %v", err)
			}
			// Answered once the ISR has deleted too: the leader may die at once.
			l, _ = c.isrs(other, topic)
			c.nodes[l[0]].Kill()
			survivor := l[0]%3 + 1
			c.waitLeader(topic, survivor, l[0])
			starts, err := kadm.NewClient(c.client(survivor)).ListStartOffsets(ctx, topic)
			if err == nil {
				err = starts.Error()
			}
			if o, _ := starts.Lookup(topic, 0); err != nil || o.Offset != 50 {
				t.Fatalf("after DeleteRecords before 50 and a failover, the log starts at %d (%v), want 50", o.Offset, err)
			}
		})
	}
}

// checkSharedReplicas checks a replicated topic in the shared files: no
// node keeps a segment file of the partition (its records are in each
// node's own shared files), and the segments sealed so far were recorded
// once the replicas' checksums (of the record bytes) agreed.
func checkSharedReplicas(t *testing.T, c *cluster, topic string) {
	t.Helper()
	checkInSharedFiles(t, c, topic+"-0")
	deadline := time.Now().Add(30 * time.Second)
	for {
		agreed := 0
		for _, s := range c.seals(topic, 0) {
			if len(s.Replicas) >= 2 {
				agreed++
			}
		}
		if agreed > 0 {
			return
		}
		if time.Now().After(deadline) {
			t.Fatalf("no sealed segment of %s-0 recorded with two or more agreeing replicas: %v", topic, c.seals(topic, 0))
		}
		time.Sleep(200 * time.Millisecond)
	}
}

// checkInSharedFiles checks that no node keeps a segment file of shard
// (its records are in each node's own shared files) and that every node
// has shared files.
func checkInSharedFiles(t *testing.T, c *cluster, shard string) {
	t.Helper()
	for id, n := range c.nodes {
		if m, _ := filepath.Glob(filepath.Join(n.Dir(), shard, "*.msg")); len(m) > 0 {
			t.Errorf("node %d keeps segment files of %s: %v", id, shard, m)
		}
		if m, _ := filepath.Glob(filepath.Join(n.Dir(), "shared", "*.msg")); len(m) == 0 {
			t.Errorf("node %d has no shared file", id)
		}
	}
}
