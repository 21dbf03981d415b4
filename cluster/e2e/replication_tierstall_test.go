package e2e

import (
	"context"
	"fmt"
	"os"
	"slices"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/twmb/franz-go/pkg/kgo"

	"strata/internal/testsvc"
)

// A leader killed between its rolls and their seal records: some thirty
// segments roll on the leader while a paused follower holds the high
// watermark, so none is sealed for the cluster, and the leader is killed.
// Whoever leads next derives the seals still to be made from its own log
// and records them once its ISR has reported; every sealed segment of the
// partition is then tiered within a bound, on every replica (none keeps a
// sealed segment local), and every record reads back.
func TestTieringAfterTheLeaderDiedBeforeItsSeals(t *testing.T) {
	shared := t.TempDir()
	c := &cluster{t: t, etcd: testsvc.StartEtcd(t), pfx: "/" + testsvc.UniquePrefix(t), nodes: map[int32]*testsvc.Process{},
		sets: []string{"tiering.enabled=true", "tiering.schedule=@every 1h", "tiering.min_sealed_age=0s", "tiering.local_retention=0s",
			"tiering.orphan_grace=1ms", "tiering.replica_grace=1s", "segment.max_bytes=4KiB", "segment.roll_check_interval=1",
			"cold.local.dir=" + shared,
			// Nobody leaves the ISR by lag while the test pauses a follower,
			// and the paused one keeps its lease.
			"cluster.replica_lag_time_max=60s", "cluster.session_ttl=8s"}}
	for id := int32(1); id <= 3; id++ {
		c.add(id)
	}
	two := "2"
	createReplicated(t, c, "stall", 1, 3, map[string]*string{"min.insync.replicas": &two})
	c.waitISR(1, "stall", 3)
	leaders, isrs := c.isrs(1, "stall")
	leader := leaders[0]
	// The follower first in the ISR is elected when the leader dies; the
	// last one, paused, holds the high watermark meanwhile (its log is
	// short: it must not be the one elected, or the acks=1 burst is gone).
	var followers []int32
	for _, r := range isrs[0] {
		if r != leader {
			followers = append(followers, r)
		}
	}
	other, paused := followers[0], followers[1]
	want := c.produce(leader, "stall", []int32{0}, 20, "before")[0]

	// The paused follower holds the high watermark: the leader seals
	// segment after segment and records none.
	c.nodes[paused].Signal(syscall.SIGSTOP)
	burst, err := c.produceBatches(leader, "stall", 30, "burst", kgo.LeaderAck())
	want = append(want, burst...)
	if err != nil {
		c.nodes[paused].Signal(syscall.SIGCONT)
		t.Fatalf("produce with acks=1 to leader %d: %v", leader, err)
	}
	// The other follower has copied every roll before the leader dies.
	rolled := c.localSegments(leader, "stall", "sealed")
	deadline := time.Now().Add(5 * time.Second)
	for c.localSegments(other, "stall", "sealed") < rolled {
		if time.Now().After(deadline) {
			c.nodes[paused].Signal(syscall.SIGCONT)
			t.Fatalf("node %d holds %d sealed segments of the %d the leader rolled", other, c.localSegments(other, "stall", "sealed"), rolled)
		}
		time.Sleep(50 * time.Millisecond)
	}
	// An operator sees the stall coming: the leader's sealed segments with
	// no record.
	deadline = time.Now().Add(5 * time.Second)
	for c.metric(leader, "strata_replica_unsealed_segments") < float64(rolled-1) {
		if time.Now().After(deadline) {
			c.nodes[paused].Signal(syscall.SIGCONT)
			t.Fatalf("leader %d: strata_replica_unsealed_segments %v with %d segments rolled and %d sealed for the cluster",
				leader, c.metric(leader, "strata_replica_unsealed_segments"), rolled, len(c.seals("stall", 0)))
		}
		time.Sleep(50 * time.Millisecond)
	}
	c.nodes[leader].Kill()
	c.nodes[paused].Signal(syscall.SIGCONT)
	c.waitLeader("stall", other, leader)
	c.restart(leader)
	c.waitISR(other, "stall", 3)
	nl, _ := c.isrs(other, "stall")
	want = append(want, c.produce(nl[0], "stall", []int32{0}, 20, "after")[0]...)

	c.allTiered("stall", 90*time.Second)
	for id := range c.nodes {
		for deadline := time.Now().Add(15 * time.Second); c.metric(id, "strata_replica_unsealed_segments") > 0; time.Sleep(200 * time.Millisecond) {
			if time.Now().After(deadline) {
				t.Fatalf("node %d: strata_replica_unsealed_segments %v once every segment is tiered", id, c.metric(id, "strata_replica_unsealed_segments"))
			}
		}
	}
	seals := c.seals("stall", 0)
	if len(seals) < rolled {
		t.Fatalf("%d segments sealed for the cluster, want at least the %d rolled before the kill", len(seals), rolled)
	}
	got := c.consume(nl[0], "stall", len(want))
	if !slices.Equal(got[0], want) {
		t.Fatalf("read back %d records through the new leader, want the %d produced", len(got[0]), len(want))
	}
	t.Logf("leader %d killed with its rolls unsealed; %d segments sealed for the cluster and tiered", leader, len(seals))
}

// localSegments counts node id's segments of topic's partition 0 in state.
func (c *cluster) localSegments(id int32, topic, state string) int {
	c.t.Helper()
	a, err := c.adminView(id)
	if err != nil {
		c.t.Fatalf("node %d: %v", id, err)
	}
	n := 0
	for _, p := range a.Partitions {
		if p.Topic == topic && p.Partition == 0 {
			for _, s := range p.Segments {
				if s.State == state {
					n++
				}
			}
		}
	}
	return n
}

// produceBatches writes n batches of 40 records of ~100 bytes to topic's
// partition 0 through node via, each in a Produce of its own: with 4 KiB
// segments each rolls one. It returns the values acknowledged.
func (c *cluster) produceBatches(via int32, topic string, n int, tag string, acks kgo.Acks) ([]string, error) {
	c.t.Helper()
	opts := []kgo.Opt{kgo.RecordPartitioner(kgo.ManualPartitioner()), kgo.RequiredAcks(acks)}
	if acks != kgo.AllISRAcks() {
		opts = append(opts, kgo.DisableIdempotentWrite())
	}
	cl := c.client(via, opts...)
	defer cl.Close()
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	var acked []string
	for batch := range n {
		var recs []*kgo.Record
		var vals []string
		for i := range 40 {
			v := fmt.Sprintf("%s-%02d-%02d-%s", tag, batch, i, strings.Repeat("x", 80))
			recs = append(recs, &kgo.Record{Topic: topic, Partition: 0, Value: []byte(v)})
			vals = append(vals, v)
		}
		if err := cl.ProduceSync(ctx, recs...).FirstErr(); err != nil {
			return acked, err
		}
		acked = append(acked, vals...)
	}
	return acked, nil
}

// allTiered runs tiering on every node until none holds a sealed segment
// of topic's partition 0 that is not tiered, within bound.
func (c *cluster) allTiered(topic string, bound time.Duration) {
	c.t.Helper()
	deadline := time.Now().Add(bound)
	for {
		for id := range c.nodes {
			c.tierRun(id)
		}
		left := map[int32]int{}
		for id := range c.nodes {
			if n := c.localSegments(id, topic, "sealed") + c.localSegments(id, topic, "uploading"); n > 0 {
				left[id] = n
			}
		}
		if len(left) == 0 {
			return
		}
		if time.Now().After(deadline) {
			c.t.Fatalf("sealed segments of %s still local and not tiered after %s, by node: %v; %d segments sealed for the cluster",
				topic, bound, left, len(c.seals(topic, 0)))
		}
		time.Sleep(500 * time.Millisecond)
	}
}

// A follower rebuilt from an empty folder, once the partition's history
// is tiered, copies that history from its leader rolling where the
// leader's segments started, the tiered ones too: its copies are the
// segments sealed for the cluster, so it tiers (adopts) them and drops
// them from its disk like every other replica, and the segments it rolls
// after are sealed and tiered as well.
func TestRebuiltFollowerTiersItsCopyOfTheHistory(t *testing.T) {
	shared := t.TempDir()
	c := &cluster{t: t, etcd: testsvc.StartEtcd(t), pfx: "/" + testsvc.UniquePrefix(t), nodes: map[int32]*testsvc.Process{},
		sets: []string{"tiering.enabled=true", "tiering.schedule=@every 1h", "tiering.min_sealed_age=0s", "tiering.local_retention=0s",
			"tiering.orphan_grace=1ms", "tiering.replica_grace=1s", "segment.max_bytes=4KiB", "segment.roll_check_interval=1",
			"cold.local.dir=" + shared, "cluster.replica_lag_time_max=2s"}}
	for id := int32(1); id <= 3; id++ {
		c.add(id)
	}
	two := "2"
	createReplicated(t, c, "rebuilt", 1, 3, map[string]*string{"min.insync.replicas": &two})
	c.waitISR(1, "rebuilt", 3)
	leaders, _ := c.isrs(1, "rebuilt")
	leader := leaders[0]
	want, err := c.produceBatches(leader, "rebuilt", 10, "before", kgo.AllISRAcks())
	if err != nil {
		t.Fatal(err)
	}
	c.allTiered("rebuilt", 60*time.Second)

	lost := leader%3 + 1
	c.nodes[lost].Kill()
	dir := c.nodes[lost].Dir()
	if err := os.RemoveAll(dir); err != nil {
		t.Fatal(err)
	}
	if err := os.MkdirAll(dir, 0o755); err != nil {
		t.Fatal(err)
	}
	c.restart(lost)
	c.waitISR(leader, "rebuilt", 3)
	after, err := c.produceBatches(leader, "rebuilt", 10, "after", kgo.AllISRAcks())
	if err != nil {
		t.Fatal(err)
	}
	want = append(want, after...)
	c.allTiered("rebuilt", 90*time.Second)
	got := c.consume(leader, "rebuilt", len(want))
	if !slices.Equal(got[0], want) {
		t.Fatalf("read back %d records, want the %d produced", len(got[0]), len(want))
	}
	t.Logf("node %d rebuilt from an empty folder; %d segments sealed for the cluster, none left local", lost, len(c.seals("rebuilt", 0)))
}
