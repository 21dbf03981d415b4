package e2e

import (
	"context"
	"fmt"
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
	cl := c.client(leader, kgo.RecordPartitioner(kgo.ManualPartitioner()), kgo.RequiredAcks(kgo.LeaderAck()), kgo.DisableIdempotentWrite())
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	for batch := range 30 {
		var recs []*kgo.Record
		for i := range 40 {
			v := fmt.Sprintf("burst-%02d-%02d-%s", batch, i, strings.Repeat("x", 80))
			recs = append(recs, &kgo.Record{Topic: "stall", Partition: 0, Value: []byte(v)})
			want = append(want, v)
		}
		if err := cl.ProduceSync(ctx, recs...).FirstErr(); err != nil {
			cancel()
			c.nodes[paused].Signal(syscall.SIGCONT)
			t.Fatalf("produce with acks=1 to leader %d: %v", leader, err)
		}
	}
	cancel()
	cl.Close()
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
	if n := len(c.seals("stall", 0)); n > 1 {
		t.Logf("%d segments sealed for the cluster before the kill", n)
	}
	c.nodes[leader].Kill()
	c.nodes[paused].Signal(syscall.SIGCONT)
	c.waitLeader("stall", other, leader)
	c.restart(leader)
	c.waitISR(other, "stall", 3)
	nl, _ := c.isrs(other, "stall")
	want = append(want, c.produce(nl[0], "stall", []int32{0}, 20, "after")[0]...)

	// Every sealed segment is sealed for the cluster and tiered, from
	// every replica's disk, within the bound.
	deadline = time.Now().Add(90 * time.Second)
	for {
		for id := int32(1); id <= 3; id++ {
			c.tierRun(id)
		}
		left := map[int32]int{}
		for id := int32(1); id <= 3; id++ {
			if n := c.localSegments(id, "stall", "sealed") + c.localSegments(id, "stall", "uploading"); n > 0 {
				left[id] = n
			}
		}
		if len(left) == 0 {
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("sealed segments still local and not tiered, by node: %v; %d segments sealed for the cluster", left, len(c.seals("stall", 0)))
		}
		time.Sleep(500 * time.Millisecond)
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
