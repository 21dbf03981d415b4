package e2e

import (
	"context"
	"encoding/binary"
	"errors"
	"fmt"
	"hash/crc32"
	"slices"
	"syscall"
	"testing"
	"time"

	"github.com/twmb/franz-go/pkg/kadm"
	"github.com/twmb/franz-go/pkg/kerr"
	"github.com/twmb/franz-go/pkg/kgo"
	"github.com/twmb/franz-go/pkg/kmsg"

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
	// A node that has just started may not have registered yet, and the
	// placement (rightly) refuses a factor above the live brokers.
	c.waitBrokers(int(rf))
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

// waitBrokers waits until node 1's Metadata lists at least n brokers.
func (c *cluster) waitBrokers(n int) {
	c.t.Helper()
	cl := c.client(1)
	deadline := time.Now().Add(30 * time.Second)
	for {
		md, err := c.metadata(cl)
		if err == nil && len(md.Brokers) >= n {
			return
		}
		if time.Now().After(deadline) {
			c.t.Fatalf("node 1 never listed %d brokers: %v", n, err)
		}
		time.Sleep(100 * time.Millisecond)
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
// idempotent acks=all load, again and again, on three nodes and on five:
// a follower in the ISR takes over, the killed node comes back as a
// follower and catches up, and no write that was acknowledged is lost,
// none is stored twice, no two reads disagree about an offset, and the
// replicas left hold the same records. With the last kill of each (for
// good) the suite kills a leader 20 times here.
func TestReplicatedLeaderKilledUnderLoad(t *testing.T) {
	for _, tc := range []struct {
		name         string
		nodes, kills int
		model        string // strata.file.model
	}{
		{"3 nodes", 3, 9, ""},
		{"5 nodes", 5, 9, ""},
		{"3 nodes, shared files", 3, 6, "shared"},
	} {
		t.Run(tc.name, func(t *testing.T) { leaderKilledUnderLoad(t, tc.nodes, tc.kills, tc.model) })
	}
}

func leaderKilledUnderLoad(t *testing.T, nodes, kills int, model string) {
	c := newClusterWith(t, nodes, "cluster.replica_lag_time_max=2s")
	two := "2"
	configs := map[string]*string{"min.insync.replicas": &two}
	if model != "" {
		configs["strata.file.model"] = &model
	}
	createReplicated(t, c, "rep", 3, 3, configs)
	c.waitISR(1, "rep", 3)
	h := newHistory()
	all := make([]int32, 0, nodes)
	for id := int32(1); id <= int32(nodes); id++ {
		all = append(all, id)
	}
	stop := c.startLoad(h, "rep", []int32{0, 1, 2}, 100, all[:3]...)
	defer stop()
	began := time.Now()
	for i := 0; i < kills; i++ {
		time.Sleep(time.Second)
		p := int32(i % 3)
		ask := int32(i%nodes) + 1
		leaders, _ := c.isrs(ask, "rep")
		victim := leaders[p]
		if victim < 0 {
			t.Fatalf("kill %d: partition %d has no leader: %v", i, p, leaders)
		}
		other := victim%int32(nodes) + 1
		t.Logf("kill %d: SIGKILL node %d, leader of rep-%d", i, victim, p)
		killed := time.Now()
		c.nodes[victim].Kill()
		next := c.newLeader(other, "rep", p, victim)
		t.Logf("kill %d: node %d leads rep-%d %s after", i, next, p, time.Since(killed).Round(100*time.Millisecond))
		c.restart(victim)
		c.waitISR(other, "rep", 3)
	}
	// The last kill is for good: every acknowledged record is read from
	// the replicas left, which hold the same records.
	leaders, _ := c.isrs(1, "rep")
	gone := leaders[0]
	c.nodes[gone].Kill()
	var live []int32
	for _, id := range all {
		if id != gone {
			live = append(live, id)
		}
	}
	c.newLeader(live[0], "rep", 0, gone)
	time.Sleep(time.Second)
	stop()
	c.readAll(h, live[0], "rep")
	c.sameCopies(h, "rep", live)
	n := h.check(t)
	t.Logf("%d kills in %s, %d records acknowledged; failures: %s", kills+1, time.Since(began).Round(time.Second), n, h.failures())
	if model == "shared" {
		for p := 0; p < 3; p++ {
			checkInSharedFiles(t, c, fmt.Sprintf("rep-%d", p))
		}
	}
}

// produceOne sends one record to topic's partition 0 at node `via` with
// the given acks (-1: all) in a Produce of its own, and returns the
// broker's answer: the test sees the error code itself, not a client's
// retries of it.
func (c *cluster) produceOne(via int32, topic, value string, acks int16, timeout time.Duration) error {
	c.t.Helper()
	rec := kmsg.Record{Value: []byte(value)}
	body := rec.AppendTo(nil)
	rec.Length = int32(len(body) - 1) // the length is a varint of what follows it; 0 took one byte
	body = rec.AppendTo(nil)
	now := time.Now().UnixMilli()
	b := kmsg.RecordBatch{PartitionLeaderEpoch: -1, Magic: 2, FirstTimestamp: now, MaxTimestamp: now,
		ProducerID: -1, ProducerEpoch: -1, FirstSequence: -1, NumRecords: 1, Records: body}
	raw := b.AppendTo(nil)
	binary.BigEndian.PutUint32(raw[8:], uint32(len(raw)-12))
	binary.BigEndian.PutUint32(raw[17:], crc32.Checksum(raw[21:], crc32.MakeTable(crc32.Castagnoli)))
	req := kmsg.NewPtrProduceRequest()
	req.Acks, req.TimeoutMillis = acks, int32(timeout/time.Millisecond)
	rt := kmsg.NewProduceRequestTopic()
	rt.Topic = topic
	rp := kmsg.NewProduceRequestTopicPartition()
	rp.Partition, rp.Records = 0, raw
	rt.Partitions = append(rt.Partitions, rp)
	req.Topics = append(req.Topics, rt)
	// franz-go sends a Produce with its own configured acks.
	ack := kgo.AllISRAcks()
	if acks == 1 {
		ack = kgo.LeaderAck()
	}
	cl := c.client(via, kgo.RequiredAcks(ack), kgo.DisableIdempotentWrite())
	defer cl.Close()
	ctx, cancel := context.WithTimeout(context.Background(), timeout+10*time.Second)
	defer cancel()
	// To the seed, the node itself: a client just made has no metadata yet.
	resp, err := req.RequestWith(ctx, cl.SeedBrokers()[0])
	if err != nil {
		return err
	}
	return kerr.ErrorForCode(resp.Topics[0].Partitions[0].ErrorCode)
}

// endOffset is what ListOffsets answers for partition 0's latest offset
// through node `via`: the high watermark.
func (c *cluster) endOffset(via int32, topic string) int64 {
	c.t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	ends, err := kadm.NewClient(c.client(via)).ListEndOffsets(ctx, topic)
	if err == nil {
		err = ends.Error()
	}
	if err != nil {
		c.t.Fatalf("end offsets of %s: %v", topic, err)
	}
	o, _ := ends.Lookup(topic, 0)
	return o.Offset
}

// acks=all with min.insync.replicas=2 on three replicas, as a user sees it:
// with both followers paused, a write times out (REQUEST_TIMED_OUT: its
// fate unknown); once they have left the ISR, acks=all is refused before
// anything is appended (NOT_ENOUGH_REPLICAS) while acks=1 is stored but
// not shown to consumers, since the high watermark cannot pass it; when the
// followers come back they catch up, rejoin, and everything stored shows.
func TestAcksAllAndMinISR(t *testing.T) {
	c := newClusterWith(t, 3, "cluster.replica_lag_time_max=1s")
	two := "2"
	createReplicated(t, c, "acks", 1, 3, map[string]*string{"min.insync.replicas": &two})
	c.waitISR(1, "acks", 3)
	leaders, _ := c.isrs(1, "acks")
	leader := leaders[0]
	// The leader takes writes once it has made its shard, a moment after
	// the placement; until then it answers NOT_LEADER_OR_FOLLOWER, which
	// clients retry.
	for deadline := time.Now().Add(10 * time.Second); ; time.Sleep(100 * time.Millisecond) {
		err := c.produceOne(leader, "acks", "first", -1, 5*time.Second)
		if err == nil {
			break
		}
		if !errors.Is(err, kerr.NotLeaderForPartition) || time.Now().After(deadline) {
			t.Fatalf("acks=all with the whole ISR: %v", err)
		}
	}
	if got := c.endOffset(leader, "acks"); got != 1 {
		t.Fatalf("after one acknowledged write the end offset is %d, want 1", got)
	}
	var followers []int32
	for id := range c.nodes {
		if id != leader {
			followers = append(followers, id)
			c.nodes[id].Signal(syscall.SIGSTOP)
		}
	}
	err := c.produceOne(leader, "acks", "paused", -1, 300*time.Millisecond)
	if !errors.Is(err, kerr.RequestTimedOut) {
		t.Fatalf("acks=all with both followers paused: %v, want REQUEST_TIMED_OUT", err)
	}
	// Past the lag time (and the paused nodes' leases) the ISR is the
	// leader alone.
	deadline := time.Now().Add(30 * time.Second)
	// Each try is its own record: one that timed out may be stored.
	var refused string
	for i := 0; ; i++ {
		refused = fmt.Sprintf("refused-%d", i)
		err = c.produceOne(leader, "acks", refused, -1, time.Second)
		if errors.Is(err, kerr.NotEnoughReplicas) {
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("acks=all with the ISR shrunk to the leader: %v, want NOT_ENOUGH_REPLICAS", err)
		}
		time.Sleep(300 * time.Millisecond)
	}
	if err := c.produceOne(leader, "acks", "leader-only", 1, 5*time.Second); err != nil {
		t.Fatalf("acks=1 with the ISR below min.insync.replicas: %v", err)
	}
	// "paused" may be stored (its answer was a timeout, not a refusal);
	// nothing past the first record is shown while the ISR is the leader.
	if got := c.endOffset(leader, "acks"); got != 1 {
		t.Fatalf("with the followers out of the ISR the end offset is %d, want 1 (the high watermark)", got)
	}
	for _, id := range followers {
		c.nodes[id].Signal(syscall.SIGCONT)
	}
	c.waitISR(leader, "acks", 3)
	h := newHistory()
	c.readAll(h, leader, "acks")
	var read []string
	for _, r := range h.read {
		read = append(read, r.value)
	}
	if !slices.Contains(read, "first") || !slices.Contains(read, "leader-only") || slices.Contains(read, refused) {
		t.Fatalf("read back %v: want first and leader-only (and perhaps those that timed out), never %s", read, refused)
	}
}
