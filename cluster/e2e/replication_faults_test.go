package e2e

import (
	"fmt"
	"os"
	"slices"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"
)

// replicatedTopic creates topic on c with replication factor 3 and
// min.insync.replicas 2 (and more configs as key, value pairs), and waits
// until every partition has all three in sync.
func replicatedTopic(t *testing.T, c *cluster, topic string, partitions int32, kv ...string) {
	t.Helper()
	two := "2"
	configs := map[string]*string{"min.insync.replicas": &two}
	for i := 0; i+1 < len(kv); i += 2 {
		configs[kv[i]] = &kv[i+1]
	}
	createReplicated(t, c, topic, partitions, 3, configs)
	c.waitISR(1, topic, 3)
}

// The GC-pause case: the leader of a partition stops (SIGSTOP) past its
// lease under idempotent acks=all load, a follower from the ISR takes over,
// and the old leader resumes (SIGCONT) believing for a moment that it
// still leads. Whatever it takes then is never acknowledged: a Produce
// sent to it the moment it resumes fails, with acks=all and with acks=1.
// It rejoins as a follower of the new leader with no record that differs,
// and nothing acknowledged is lost.
func TestReplicatedLeaderPausedPastItsLease(t *testing.T) {
	c := newClusterWith(t, 3, "cluster.replica_lag_time_max=1s")
	replicatedTopic(t, c, "gc", 3)
	h := newHistory()
	stop := c.startLoad(h, "gc", []int32{0, 1, 2}, 100, 1, 2, 3)
	defer stop()
	for round := 0; round < 2; round++ {
		time.Sleep(time.Second)
		leaders, _ := c.isrs(1, "gc")
		old := leaders[0]
		other := old%3 + 1
		t.Logf("round %d: SIGSTOP node %d, leader of gc-0", round, old)
		c.nodes[old].Signal(syscall.SIGSTOP)
		next := c.newLeader(other, "gc", 0, old)
		time.Sleep(500 * time.Millisecond)
		c.nodes[old].Signal(syscall.SIGCONT)
		// Sent at once: the old leader may not know yet that its lease is
		// gone. Each value is recorded as failed, so that if it was stored
		// anyway (its fate unknown), the checker still accepts reading it.
		for _, acks := range []int16{-1, 1} {
			v := fmt.Sprintf("gc-resumed-%d-acks%d", round, acks)
			err := c.produceOne(old, "gc", v, acks, 2*time.Second)
			if err == nil {
				t.Errorf("round %d: node %d, paused past its lease while node %d took over, acknowledged %s with acks=%d", round, old, next, v, acks)
				h.ack(v, 0, -1) // the checker looks for it
				continue
			}
			h.mu.Lock()
			h.failed[v] = err
			h.mu.Unlock()
			t.Logf("round %d: node %d resumed and answered acks=%d with %v", round, old, acks, err)
		}
		c.waitISR(next, "gc", 3)
	}
	stop()
	c.readAll(h, 1, "gc")
	c.sameCopies(h, "gc", []int32{1, 2, 3})
	t.Logf("%d records acknowledged; failures: %s", h.check(t), h.failures())
}

// A cut between the leader of gc-0 and its peers (the Kafka traffic they
// send it: followers' fetches) and/or etcd, either way or both.
type cut struct {
	name       string
	peers      []int // directions held at the leader's Kafka proxy
	etcd       []int // directions held at the leader's etcd proxy
	failover   bool  // the leader loses its lease: another must take over
	noFailover bool  // the leader keeps its lease and its leadership
}

// The leader of a partition is cut off from its followers, from etcd, or
// from both, both ways, under idempotent acks=all load from clients that
// still reach it (the Jepsen 2013 case: a leader whose followers cannot
// reach it must not shrink the ISR to itself and acknowledge alone).
// After each cut heals, all three replicas are in sync again; at the end
// nothing acknowledged is lost and the replicas hold the same records.
func TestReplicatedLeaderPartitionedBothWays(t *testing.T) {
	partitionedLeader(t, []cut{
		{name: "from followers and etcd", peers: []int{toTarget, fromTarget}, etcd: []int{toTarget, fromTarget}, failover: true},
		{name: "from followers, etcd reachable", peers: []int{toTarget, fromTarget}, noFailover: true},
		{name: "from etcd, followers reachable", etcd: []int{toTarget, fromTarget}, failover: true},
	})
}

// As above, one way at a time: followers' fetches never reach the leader;
// they reach it (and count as their proof of what they hold) but its
// answers never come back; its requests to etcd are lost; etcd's answers
// to it are lost.
func TestReplicatedLeaderPartitionedOneWay(t *testing.T) {
	partitionedLeader(t, []cut{
		{name: "followers' fetches lost", peers: []int{toTarget}, noFailover: true},
		{name: "the leader's answers to followers lost", peers: []int{fromTarget}, noFailover: true},
		{name: "the leader's requests to etcd lost", etcd: []int{toTarget}, failover: true},
		{name: "etcd's answers to the leader lost", etcd: []int{fromTarget}},
	})
}

func partitionedLeader(t *testing.T, cuts []cut) {
	c := newProxiedCluster(t, 3, "cluster.replica_lag_time_max=1s")
	replicatedTopic(t, c, "net", 3)
	h := newHistory()
	stop := c.startLoad(h, "net", []int32{0, 1, 2}, 100, 1, 2, 3)
	defer stop()
	for _, k := range cuts {
		time.Sleep(time.Second)
		leaders, _ := c.isrs(1, "net")
		l := leaders[0]
		other := l%3 + 1
		cutAt := time.Now()
		for _, d := range k.peers {
			c.kproxy[l].hold(d)
		}
		for _, d := range k.etcd {
			c.eproxy[l].hold(d)
		}
		t.Logf("%s: node %d, leader of net-0, cut off", k.name, l)
		if k.failover {
			next := c.newLeader(other, "net", 0, l)
			t.Logf("%s: node %d leads net-0 %s after the cut", k.name, next, time.Since(cutAt).Round(100*time.Millisecond))
		}
		// Past the lag time, and past the lease when it is cut from etcd.
		time.Sleep(time.Until(cutAt.Add(sessionTTL + 2*time.Second)))
		if k.noFailover {
			// The followers cannot keep up: the ISR shrinks to the leader,
			// below min.insync.replicas, so acks=all refuses to append.
			// The leader notices within the lag time; its etcd write and
			// the other node's view of it come after, later on a loaded
			// machine, so the ISR is polled for a while.
			now, isr := c.isrs(other, "net")
			for deadline := time.Now().Add(10 * time.Second); !slices.Equal(isr[0], []int32{l}) && now[0] == l && time.Now().Before(deadline); {
				time.Sleep(100 * time.Millisecond)
				now, isr = c.isrs(other, "net")
			}
			if now[0] != l {
				t.Errorf("%s: net-0 moved from node %d to %d, though node %d kept its lease", k.name, l, now[0], l)
			}
			if !slices.Equal(isr[0], []int32{l}) {
				t.Errorf("%s: net-0's ISR is %v %s after its followers were cut off; want the leader %d alone", k.name, isr[0], time.Since(cutAt).Round(100*time.Millisecond), l)
			}
			v := "net-refused-" + strings.ReplaceAll(k.name, " ", "-")
			err := c.produceOne(l, "net", v, -1, time.Second)
			h.mu.Lock()
			if err == nil {
				h.acked[v] = at{0, -1}
				t.Errorf("%s: node %d acknowledged an acks=all write with its followers cut off", k.name, l)
			} else {
				h.failed[v] = err
			}
			h.mu.Unlock()
		}
		acksCut := h.numAcked()
		c.kproxy[l].heal()
		c.eproxy[l].heal()
		healed := time.Now()
		c.waitISR(other, "net", 3)
		t.Logf("%s: healed after %s; all in sync %s later (%d acknowledged so far)", k.name, healed.Sub(cutAt).Round(100*time.Millisecond),
			time.Since(healed).Round(100*time.Millisecond), acksCut)
	}
	time.Sleep(time.Second)
	stop()
	c.readAll(h, 1, "net")
	c.sameCopies(h, "net", []int32{1, 2, 3})
	t.Logf("%d records acknowledged; failures: %s", h.check(t), h.failures())
}

// A slow follower (paused again and again, never long enough to lose its
// lease) falls behind on two topics that share a leader's fate: it leaves
// the ISR and rejoins when it keeps up again. Under strata.acks.all=quorum
// acks=all needs a majority only, so writes keep being acknowledged every
// second while it lags; nothing acknowledged is lost on either topic.
func TestSlowFollowerLeavesISRAndRejoins(t *testing.T) {
	c := newClusterWith(t, 3, "cluster.replica_lag_time_max=1s")
	replicatedTopic(t, c, "isr", 1)
	replicatedTopic(t, c, "quorum", 1, "strata.acks.all", "quorum")
	li, _ := c.isrs(1, "isr")
	lq, _ := c.isrs(1, "quorum")
	var slow int32
	for id := int32(1); id <= 3; id++ {
		if id != li[0] && id != lq[0] {
			slow = id
		}
	}
	hi, hq := newHistory(), newHistory()
	var via []int32
	for id := int32(1); id <= 3; id++ {
		if id != slow {
			via = append(via, id)
		}
	}
	stopI := c.startLoad(hi, "isr", []int32{0}, 100, via...)
	defer stopI()
	stopQ := c.startLoad(hq, "quorum", []int32{0}, 100, via...)
	defer stopQ()
	// The lag is measured from when both topics take writes.
	for deadline := time.Now().Add(15 * time.Second); hi.numAcked() == 0 || hq.numAcked() == 0; time.Sleep(100 * time.Millisecond) {
		if time.Now().After(deadline) {
			t.Fatalf("no write acknowledged 15s after the load started: isr %d, quorum %d", hi.numAcked(), hq.numAcked())
		}
	}
	time.Sleep(500 * time.Millisecond)
	t.Logf("node %d follows isr-0 (led by %d) and quorum-0 (led by %d), slowly", slow, li[0], lq[0])
	began := time.Now()
	var left sync.Map // topic: whether slow was seen out of its ISR
	watch := make(chan struct{})
	go func() {
		defer close(watch)
		for time.Since(began) < 8*time.Second {
			for _, topic := range []string{"isr", "quorum"} {
				if _, isr := c.isrs(via[0], topic); !slices.Contains(isr[0], slow) {
					left.Store(topic, true)
				}
			}
			time.Sleep(200 * time.Millisecond)
		}
	}()
	for time.Since(began) < 8*time.Second {
		c.nodes[slow].Signal(syscall.SIGSTOP)
		time.Sleep(1200 * time.Millisecond)
		c.nodes[slow].Signal(syscall.SIGCONT)
		time.Sleep(300 * time.Millisecond)
	}
	<-watch
	for s := began; s.Add(time.Second).Before(began.Add(8 * time.Second)); s = s.Add(time.Second) {
		if n := hq.acks(s, s.Add(time.Second)); n == 0 {
			t.Errorf("quorum: no write acknowledged in [%s, %s) of the slow follower's lag", s.Sub(began), s.Add(time.Second).Sub(began))
		}
	}
	for _, topic := range []string{"isr", "quorum"} {
		if _, ok := left.Load(topic); !ok {
			t.Errorf("%s: node %d, paused for 1.2s of every 1.5s with a lag time of 1s, never left the ISR", topic, slow)
		}
	}
	c.waitISR(via[0], "isr", 3)
	c.waitISR(via[0], "quorum", 3)
	t.Logf("the slow follower rejoined both ISRs %s after its last pause", time.Since(began.Add(8*time.Second)).Round(100*time.Millisecond))
	stopI()
	stopQ()
	for topic, h := range map[string]*history{"isr": hi, "quorum": hq} {
		c.readAll(h, via[0], topic)
		c.sameCopies(h, topic, []int32{1, 2, 3})
		t.Logf("%s: %d records acknowledged; failures: %s", topic, h.check(t), h.failures())
	}
}

// The Java client, idempotent with acks=all, produces through a leader's
// SIGKILL: it retries what the dead leader did not acknowledge at the new
// one, which answers a batch the old leader had already replicated with
// its first offset instead of writing it twice.
func TestJavaIdempotentProducerThroughLeaderKill(t *testing.T) {
	c := newClusterWith(t, 3, "cluster.replica_lag_time_max=2s")
	replicatedTopic(t, c, "java", 3)
	leaders, _ := c.isrs(1, "java")
	victim := leaders[0]
	other := victim%3 + 1
	out := make(chan string, 1)
	go func() { out <- runJava(t, "IdempotentProducer", c.nodes[other].Kafka, "java", "12", "200") }()
	time.Sleep(4 * time.Second)
	t.Logf("SIGKILL node %d, leader of java-0, under the Java producer", victim)
	c.nodes[victim].Kill()
	c.newLeader(other, "java", 0, victim)
	c.restart(victim)
	h := newHistory()
	acked := 0
	for _, line := range strings.Split(<-out, "\n") {
		f := strings.Fields(line)
		switch {
		case len(f) == 4 && f[0] == "ack":
			p, err1 := strconv.ParseInt(f[1], 10, 32)
			o, err2 := strconv.ParseInt(f[2], 10, 64)
			if err1 != nil || err2 != nil {
				t.Fatalf("the Java producer printed %q", line)
			}
			h.ack(f[3], int32(p), o)
			acked++
		case len(f) >= 2 && f[0] == "fail":
			h.mu.Lock()
			h.failed[f[1]] = fmt.Errorf("%s", strings.Join(f[2:], " "))
			h.mu.Unlock()
		}
	}
	c.waitISR(other, "java", 3)
	c.readAll(h, other, "java")
	c.sameCopies(h, "java", []int32{1, 2, 3})
	t.Logf("Java: %d records acknowledged through a leader kill; failures: %s", h.check(t), h.failures())
}

// A node loses its data folder (killed, folder deleted, started again
// with the same id): it comes back empty and its followers' pull refills
// it from the leaders, segment by segment where they rolled, until it is
// in every ISR again holding every record, with the same sealed segments
// (by checksum) as the leader.
func TestNodeLostItsDataRefilled(t *testing.T) {
	c := newClusterWith(t, 3, "cluster.replica_lag_time_max=1s", "segment.max_bytes=4KiB", "segment.roll_check_interval=5")
	replicatedTopic(t, c, "disk", 2)
	h := newHistory()
	for _, vs := range c.produce(1, "disk", []int32{0, 1}, 200, "before") {
		for _, v := range vs {
			h.ack(v, -1, -1) // offsets unknown to ProduceSync's caller: found by value
		}
	}
	leaders, _ := c.isrs(1, "disk")
	const lost = int32(3)
	t.Logf("leaders %v; node %d loses its data folder", leaders, lost)
	c.nodes[lost].Kill()
	// Out of every ISR first: a node back with nothing must not count as
	// holding what it held.
	deadline := time.Now().Add(30 * time.Second)
	for {
		ls, isr := c.isrs(1, "disk")
		out := true
		for p := range ls {
			out = out && ls[p] >= 0 && ls[p] != lost && !slices.Contains(isr[p], lost)
		}
		if out {
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("node %d, killed, is still led or in sync: leaders %v, ISRs %v", lost, ls, isr)
		}
		time.Sleep(200 * time.Millisecond)
	}
	for _, vs := range c.produce(1, "disk", []int32{0, 1}, 100, "during") {
		for _, v := range vs {
			h.ack(v, -1, -1)
		}
	}
	dir := c.nodes[lost].Dir()
	if err := os.RemoveAll(dir); err != nil {
		t.Fatal(err)
	}
	if err := os.MkdirAll(dir, 0o755); err != nil {
		t.Fatal(err)
	}
	c.restart(lost)
	c.waitISR(1, "disk", 3)
	for _, vs := range c.produce(2, "disk", []int32{0, 1}, 50, "after") {
		for _, v := range vs {
			h.ack(v, -1, -1)
		}
	}
	// Every node, the refilled one too, holds every record, the same.
	c.sameCopies(h, "disk", []int32{1, 2, 3})
	leaders, _ = c.isrs(1, "disk")
	mine, theirs := c.holdings(lost, "disk"), c.holdings(leaders[0], "disk")
	if !strings.Contains(theirs, "sealed") {
		t.Fatalf("the leader holds no sealed segment: the test proves nothing about rolls\n%s", theirs)
	}
	if mine != theirs {
		t.Errorf("node %d's sealed segments after the refill differ from the leader's (node %d):\n%s\n%s", lost, leaders[0], mine, theirs)
	}
	checkByValue(t, h)
}

// checkByValue is history.check for producers whose offsets are unknown:
// every acknowledged value read exactly once per reader (the replicas'
// copies agree offset by offset, which sameCopies checked).
func checkByValue(t *testing.T, h *history) {
	t.Helper()
	h.mu.Lock()
	defer h.mu.Unlock()
	where := map[string]at{}
	for _, r := range h.read {
		if prev, ok := where[r.value]; ok && prev != r.at {
			t.Errorf("%q stored twice: at %v and %v", r.value, prev, r.at)
		}
		where[r.value] = r.at
	}
	lost := 0
	for v := range h.acked {
		if _, ok := where[v]; !ok {
			lost++
		}
	}
	if lost > 0 || len(h.acked) == 0 {
		t.Errorf("%d of %d acknowledged records lost", lost, len(h.acked))
	}
}
