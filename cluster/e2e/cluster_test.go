// Package e2e runs strata clusters as a user does: several `strata serve`
// processes on loopback sharing a real etcd, driven by Kafka clients.
package e2e

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/twmb/franz-go/pkg/kadm"
	"github.com/twmb/franz-go/pkg/kerr"
	"github.com/twmb/franz-go/pkg/kgo"
	"github.com/twmb/franz-go/pkg/kmsg"
	"go.uber.org/goleak"

	"strata/internal/testsvc"
)

var strataBin string

// The nodes are processes; what runs in the test process (clients,
// proxies, the etcd client of the checks) ends with each test: goleak
// checks it once the tests passed.
func TestMain(m *testing.M) { goleak.VerifyTestMain(withStrata{m}) }

// withStrata runs the tests with strataBin built (goleak.TestingM).
type withStrata struct{ m *testing.M }

func (w withStrata) Run() int { return testsvc.RunWithStrata(w.m, &strataBin) }

// cluster is n strata processes on one etcd prefix.
type cluster struct {
	t     *testing.T
	etcd  string
	pfx   string
	nodes map[int32]*testsvc.Process
	sets  []string  // more settings for every node
	opts  []kgo.Opt // more options for every client (TLS, SASL)
	// With proxies (newProxiedCluster): each node's Kafka listener as its
	// peers reach it, and its way to etcd.
	kproxy, eproxy map[int32]*netProxy
}

const sessionTTL = 2 * time.Second

func newCluster(t *testing.T, n int) *cluster {
	c := &cluster{t: t, etcd: testsvc.StartEtcd(t), pfx: "/" + testsvc.UniquePrefix(t), nodes: map[int32]*testsvc.Process{}}
	for id := int32(1); id <= int32(n); id++ {
		c.add(id)
	}
	return c
}

func (c *cluster) add(id int32) *testsvc.Process {
	sets := append([]string{"cluster.etcd_endpoints=" + c.etcd, "cluster.etcd_prefix=" + c.pfx, "cluster.session_ttl=" + sessionTTL.String(),
		"node.id=" + strconv.Itoa(int(id)), "tiering.enabled=false", "kafka.auto_create_topics=false"}, c.sets...)
	p := testsvc.StartProcess(c.t, strataBin, c.t.TempDir(), sets...)
	c.nodes[id] = p
	return p
}

func (c *cluster) client(id int32, opts ...kgo.Opt) *kgo.Client {
	c.t.Helper()
	cl, err := kgo.NewClient(append(append([]kgo.Opt{kgo.SeedBrokers(c.nodes[id].Kafka)}, c.opts...), opts...)...)
	if err != nil {
		c.t.Fatal(err)
	}
	c.t.Cleanup(cl.Close)
	return cl
}

// metadata asks node `from` directly (kadm would answer from its cache).
func (c *cluster) metadata(cl *kgo.Client, topics ...string) (*kmsg.MetadataResponse, error) {
	req := kmsg.NewPtrMetadataRequest()
	req.Topics = []kmsg.MetadataRequestTopic{}
	for _, t := range topics {
		rt := kmsg.NewMetadataRequestTopic()
		rt.Topic = kmsg.StringPtr(t)
		req.Topics = append(req.Topics, rt)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	return req.RequestWith(ctx, cl)
}

// leaders waits until Metadata from node `from` satisfies ok, and returns
// the leader of each partition of topic then.
func (c *cluster) leaders(from int32, topic string, ok func(brokers int, leaders []int32) bool) []int32 {
	c.t.Helper()
	cl := c.client(from)
	deadline := time.Now().Add(30 * time.Second)
	var last string
	for time.Now().Before(deadline) {
		md, err := c.metadata(cl, topic)
		if err == nil && len(md.Topics) == 1 {
			leaders := make([]int32, len(md.Topics[0].Partitions))
			for _, pd := range md.Topics[0].Partitions {
				if int(pd.Partition) < len(leaders) {
					leaders[pd.Partition] = pd.Leader
				}
			}
			last = fmt.Sprintf("%d brokers, leaders %v", len(md.Brokers), leaders)
			if len(leaders) > 0 && ok(len(md.Brokers), leaders) {
				return leaders
			}
		} else if err != nil {
			last = err.Error()
		}
		time.Sleep(200 * time.Millisecond)
	}
	c.t.Fatalf("metadata from node %d never satisfied the test; last: %s", from, last)
	return nil
}

func allLed(brokers int, leaders []int32) bool { return !slices.Contains(leaders, -1) }

// produce writes n records to each partition in parts, bootstrapping from
// node `via`, and returns them by partition.
func (c *cluster) produce(via int32, topic string, parts []int32, n int, tag string) map[int32][]string {
	c.t.Helper()
	cl := c.client(via, kgo.RecordPartitioner(kgo.ManualPartitioner()), kgo.RequiredAcks(kgo.AllISRAcks()))
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	out := map[int32][]string{}
	for _, p := range parts {
		var recs []*kgo.Record
		for i := 0; i < n; i++ {
			v := fmt.Sprintf("%s-p%d-%03d", tag, p, i)
			recs = append(recs, &kgo.Record{Topic: topic, Partition: p, Value: []byte(v)})
			out[p] = append(out[p], v)
		}
		if err := cl.ProduceSync(ctx, recs...).FirstErr(); err != nil {
			c.t.Fatalf("produce to %s-%d through node %d: %v", topic, p, via, err)
		}
	}
	return out
}

// consume reads every record of topic's partitions from the start,
// bootstrapping from node `via`, until it has want of them.
func (c *cluster) consume(via int32, topic string, want int) map[int32][]string {
	c.t.Helper()
	cl := c.client(via, kgo.ConsumeTopics(topic), kgo.ConsumeResetOffset(kgo.NewOffset().AtStart()))
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	out := map[int32][]string{}
	got := 0
	for got < want {
		fs := cl.PollFetches(ctx)
		if ctx.Err() != nil {
			c.t.Fatalf("consumed %d of %d records of %s through node %d", got, want, topic, via)
		}
		fs.EachRecord(func(r *kgo.Record) {
			out[r.Partition] = append(out[r.Partition], string(r.Value))
			got++
		})
	}
	return out
}

// recreate creates a topic deleted a moment ago: its name is taken until
// the controller has cleared its objects from the bucket, and Kafka
// clients see TOPIC_ALREADY_EXISTS meanwhile, as from Kafka.
func recreate(t *testing.T, cl *kgo.Client, topic string, partitions int32) {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	for {
		resp, err := kadm.NewClient(cl).CreateTopic(ctx, partitions, 1, nil, topic)
		if err == nil {
			err = resp.Err
		}
		if err == nil {
			return
		}
		if !errors.Is(err, kerr.TopicAlreadyExists) || ctx.Err() != nil {
			t.Fatalf("create topic %s again: %v", topic, err)
		}
		time.Sleep(100 * time.Millisecond)
	}
}

func createTopic(t *testing.T, cl *kgo.Client, topic string, partitions int32) {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	resp, err := kadm.NewClient(cl).CreateTopic(ctx, partitions, 1, nil, topic)
	if err == nil {
		err = resp.Err
	}
	if err != nil {
		t.Fatalf("create topic %s: %v", topic, err)
	}
}

// Three nodes share one topic's partitions; clients bootstrapping from any
// node produce and consume all of them, each partition at its leader.
func TestThreeNodesServeOneTopic(t *testing.T) {
	c := newCluster(t, 3)
	// A replication factor above the live nodes is refused.
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	if resp, err := kadm.NewClient(c.client(1)).CreateTopic(ctx, 2, 4, nil, "replicated"); err == nil && !errors.Is(resp.Err, kerr.InvalidReplicationFactor) {
		t.Fatalf("a topic with replication factor 4 on 3 nodes: %v; want INVALID_REPLICATION_FACTOR", resp.Err)
	}
	createTopic(t, c.client(1), "orders", 6)
	leaders := c.leaders(2, "orders", func(brokers int, l []int32) bool { return brokers == 3 && allLed(brokers, l) })
	distinct := map[int32]bool{}
	for _, l := range leaders {
		distinct[l] = true
	}
	if len(distinct) != 3 {
		t.Fatalf("6 partitions on 3 nodes are led by %v: placement should spread them by load", leaders)
	}
	want := c.produce(2, "orders", []int32{0, 1, 2, 3, 4, 5}, 50, "a")
	got := c.consume(3, "orders", 300)
	// The admin API shows the same cluster from any node, and the
	// segments each node holds.
	for id := range c.nodes {
		view, err := c.adminView(id)
		if err != nil || !view.Cluster || len(view.Nodes) != 3 || view.Controller < 1 || len(view.Partitions) != 6 {
			t.Fatalf("GET /v1/cluster from node %d: %+v, %v", id, view, err)
		}
		for _, p := range view.Partitions {
			if p.Leader != leaders[p.Partition] || (p.Leader == id) != (len(p.Segments) > 0) {
				t.Errorf("node %d shows partition %d led by %d with %d segments here; leaders %v", id, p.Partition, p.Leader, len(p.Segments), leaders)
			}
		}
	}
	for p := int32(0); p < 6; p++ {
		if !slices.Equal(got[p], want[p]) {
			t.Errorf("partition %d (led by %d): read %d records %v..., want %d", p, leaders[p], len(got[p]), head(got[p]), len(want[p]))
		}
	}
}

// A killed node's partitions become leaderless (a retriable error) while
// every other partition keeps working; when it comes back it leads them
// again with everything it had acknowledged.
func TestKilledNodeComesBackWithItsData(t *testing.T) {
	c := newCluster(t, 3)
	createTopic(t, c.client(1), "logs", 6)
	leaders := c.leaders(1, "logs", func(brokers int, l []int32) bool { return brokers == 3 && allLed(brokers, l) })
	before := c.produce(1, "logs", []int32{0, 1, 2, 3, 4, 5}, 20, "before")

	c.nodes[3].Kill()
	var theirs, others []int32
	for p, l := range leaders {
		if l == 3 {
			theirs = append(theirs, int32(p))
		} else {
			others = append(others, int32(p))
		}
	}
	if len(theirs) == 0 {
		t.Fatalf("node 3 led none of %v: the test would prove nothing", leaders)
	}
	c.leaders(1, "logs", func(brokers int, l []int32) bool {
		for _, p := range theirs {
			if l[p] != -1 {
				return false
			}
		}
		return brokers == 2
	})
	during := c.produce(2, "logs", others, 20, "during")

	c.nodes[3].Restart()
	c.leaders(2, "logs", func(brokers int, l []int32) bool { return brokers == 3 && slices.Equal(l, leaders) })
	after := c.produce(3, "logs", []int32{0, 1, 2, 3, 4, 5}, 20, "after")
	// Its partitions' epoch moved twice (leaderless, then back): a fetch
	// at the epoch before is fenced, and OffsetForLeaderEpoch answers the
	// current one (KIP-320).
	p0 := theirs[0]
	md, err := c.metadata(c.client(3), "logs")
	if err != nil {
		t.Fatal(err)
	}
	epoch := md.Topics[0].Partitions[p0].LeaderEpoch
	if epoch < 2 {
		t.Fatalf("partition %d's epoch is %d after leaderless and back; want at least 2", p0, epoch)
	}
	cl := c.client(3)
	fetch := kmsg.NewPtrFetchRequest()
	ft := kmsg.NewFetchRequestTopic()
	ft.Topic = "logs"
	fp := kmsg.NewFetchRequestTopicPartition()
	fp.Partition, fp.CurrentLeaderEpoch, fp.PartitionMaxBytes = p0, epoch-2, 1<<20
	ft.Partitions = append(ft.Partitions, fp)
	fetch.Topics = append(fetch.Topics, ft)
	fetch.MaxBytes = 1 << 20
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	fr, err := fetch.RequestWith(ctx, cl)
	if err != nil || fr.Topics[0].Partitions[0].ErrorCode != kerr.FencedLeaderEpoch.Code {
		t.Fatalf("a fetch at epoch %d (current %d): %+v, %v; want FENCED_LEADER_EPOCH", epoch-2, epoch, fr, err)
	}
	ofe := kmsg.NewPtrOffsetForLeaderEpochRequest()
	ot := kmsg.NewOffsetForLeaderEpochRequestTopic()
	ot.Topic = "logs"
	op := kmsg.NewOffsetForLeaderEpochRequestTopicPartition()
	op.Partition, op.CurrentLeaderEpoch, op.LeaderEpoch = p0, epoch, epoch
	ot.Partitions = append(ot.Partitions, op)
	ofe.Topics = append(ofe.Topics, ot)
	or, err := ofe.RequestWith(ctx, cl)
	if err != nil || or.Topics[0].Partitions[0].ErrorCode != 0 || or.Topics[0].Partitions[0].LeaderEpoch != epoch ||
		or.Topics[0].Partitions[0].EndOffset != int64(len(before[p0])+len(after[p0])) {
		t.Fatalf("OffsetForLeaderEpoch at epoch %d: %+v, %v; want epoch %d ending at %d", epoch, or, err, epoch, len(before[p0])+len(after[p0]))
	}
	got := c.consume(1, "logs", 6*20+len(others)*20+6*20)
	for p := int32(0); p < 6; p++ {
		want := append(append(append([]string(nil), before[p]...), during[p]...), after[p]...)
		if !slices.Equal(got[p], want) {
			t.Errorf("partition %d: read %d records %v..., want %d", p, len(got[p]), head(got[p]), len(want))
		}
	}
}

// A node that joins leads new topics' partitions at once, and existing
// partitions from their next roll on; no history moves.
func TestNewNodeTakesNewTopicsAndNextSegments(t *testing.T) {
	c := &cluster{t: t, etcd: testsvc.StartEtcd(t), pfx: "/" + testsvc.UniquePrefix(t), nodes: map[int32]*testsvc.Process{},
		sets: []string{"segment.max_bytes=4KiB", "segment.roll_check_interval=5"}}
	c.add(1)
	c.add(2)
	createTopic(t, c.client(1), "old", 4)
	oldLeaders := c.leaders(1, "old", allLed)
	began := time.Now()
	history := map[int32][]string{}
	for i := 0; i < 10; i++ { // ten appends per partition: several sealed segments each
		for p, vs := range c.produce(1, "old", []int32{0, 1, 2, 3}, 20, fmt.Sprintf("history%d", i)) {
			history[p] = append(history[p], vs...)
		}
	}
	held := map[int32]string{1: c.holdings(1, "old"), 2: c.holdings(2, "old")}
	if !strings.Contains(held[1]+held[2], `"state":"sealed"`) {
		t.Fatalf("no sealed segment of the old topic: the test would prove nothing\n%s\n%s", held[1], held[2])
	}
	c.add(3)
	c.leaders(1, "old", func(brokers int, l []int32) bool { return brokers == 3 })
	createTopic(t, c.client(3), "new", 6)
	newLeaders := c.leaders(2, "new", allLed)
	if !slices.Contains(newLeaders, 3) {
		t.Errorf("the new node leads none of the new topic's partitions: %v", newLeaders)
	}
	if now := c.leaders(3, "old", allLed); !slices.Equal(now, oldLeaders) {
		t.Errorf("the old topic's leaders moved from %v to %v when a node joined", oldLeaders, now)
	}
	// History stays where it is: the same segments, sealed with the same
	// checksums, on the same nodes; the new node holds none of them.
	for id, before := range held {
		if after := c.holdings(id, "old"); after != before {
			t.Errorf("node %d's segments of the old topic changed when a node joined:\nbefore %s\nafter  %s", id, before, after)
		}
	}
	if h := c.holdings(3, "old"); h != "" {
		t.Errorf("the new node holds segments of the old topic: %s", h)
	}

	// At their next rolls, partitions of the old topic move to the new node
	// from their log end on: it leads them and writes their new segments,
	// the earlier offsets stay on the nodes that wrote them, and every
	// offset still reads through any broker.
	produced := map[int32][]string{}
	for p, vs := range history {
		produced[p] = slices.Clone(vs)
	}
	var moved []int32
	deadline := time.Now().Add(90 * time.Second)
	for i, after := 0, 0; after < 2; i++ { // and two rounds after the move
		if len(moved) > 0 {
			after++
		}
		if time.Now().After(deadline) {
			t.Fatalf("no partition of the old topic moved to the new node at its rolls; leaders %v", c.leaders(1, "old", allLed))
		}
		for p, vs := range c.produce(2, "old", []int32{0, 1, 2, 3}, 20, fmt.Sprintf("after%d", i)) {
			produced[p] = append(produced[p], vs...)
		}
		if len(moved) == 0 {
			for p, l := range c.leaders(1, "old", allLed) {
				if l == 3 {
					moved = append(moved, int32(p))
				}
			}
		}
	}
	view, err := c.adminView(3)
	if err != nil {
		t.Fatal(err)
	}
	t.Logf("partitions %v moved to node 3 at their rolls", moved)
	for _, p := range view.Partitions {
		if p.Topic != "old" || !slices.Contains(moved, p.Partition) {
			continue
		}
		if len(p.Spans) != 2 || p.Spans[0].Start != 0 || p.Spans[1].Node != 3 || p.Leader != 3 || p.Epoch < 1 {
			t.Errorf("old-%d moved to node 3, but its record says leader %d, epoch %d, spans %+v", p.Partition, p.Leader, p.Epoch, p.Spans)
			continue
		}
		t.Logf("old-%d: leader %d, epoch %d, spans %+v, %d segments on node 3", p.Partition, p.Leader, p.Epoch, p.Spans, len(p.Segments))
		for _, s := range p.Segments {
			if int64(s.Start) < p.Spans[1].Start {
				t.Errorf("node 3 holds old-%d from offset %d, before the handoff at %d: history was copied", p.Partition, s.Start, p.Spans[1].Start)
			}
		}
	}
	for id, before := range held {
		after := c.holdings(id, "old")
		for _, seg := range strings.SplitAfter(before, "; ") {
			if !strings.Contains(after, seg) {
				t.Errorf("node %d's sealed segment %q of the old topic changed or went when partitions moved:\n%s", id, seg, after)
			}
		}
	}
	total := 0
	for _, vs := range produced {
		total += len(vs)
	}
	if got := c.consume(3, "old", total); !equalParts(got, produced) {
		t.Errorf("reading the old topic from offset 0 through node 3 after partitions %v moved: got %d records per partition, want %d", moved, counts(got), counts(produced))
	}
	// Offsets by position and by time come from the node holding them.
	adm := kadm.NewClient(c.client(2))
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	starts, err := adm.ListStartOffsets(ctx, "old")
	if err != nil {
		t.Fatal(err)
	}
	byTime, err := adm.ListOffsetsAfterMilli(ctx, began.UnixMilli(), "old")
	if err != nil {
		t.Fatal(err)
	}
	for _, p := range moved {
		if o, _ := starts.Lookup("old", p); o.Err != nil || o.Offset != 0 {
			t.Errorf("old-%d's earliest offset through its new leader: %d (%v), want 0", p, o.Offset, o.Err)
		}
		if o, _ := byTime.Lookup("old", p); o.Err != nil || o.Offset != 0 {
			t.Errorf("old-%d's offset for a time before its first record, through its new leader: %d (%v), want 0", p, o.Offset, o.Err)
		}
	}
	// DeleteRecords through any broker: first within the old node's part,
	// then past the handoff into the new leader's; the earliest offset and
	// the first record read follow.
	p := moved[0]
	var handoff int64
	for _, vp := range view.Partitions {
		if vp.Topic == "old" && vp.Partition == p {
			handoff = vp.Spans[1].Start
		}
	}
	for _, off := range []int64{handoff / 2, handoff + 5} {
		del, err := adm.DeleteRecords(ctx, kadm.Offsets{"old": {p: {Topic: "old", Partition: p, At: off}}})
		if err == nil {
			err = del.Error()
		}
		if err != nil {
			t.Fatalf("DeleteRecords old-%d before %d (the handoff is at %d): %v", p, off, handoff, err)
		}
		starts, err := adm.ListStartOffsets(ctx, "old")
		if err != nil {
			t.Fatal(err)
		}
		if o, _ := starts.Lookup("old", p); o.Offset != off {
			t.Errorf("after DeleteRecords before %d (the handoff is at %d), old-%d's earliest offset is %d", off, handoff, p, o.Offset)
		}
		cl := c.client(1, kgo.ConsumePartitions(map[string]map[int32]kgo.Offset{"old": {p: kgo.NewOffset().AtStart()}}))
		fs := cl.PollRecords(ctx, 1)
		if recs := fs.Records(); len(recs) != 1 || string(recs[0].Value) != produced[p][off] {
			t.Errorf("after DeleteRecords before %d, the first record of old-%d read is %v (%v), want %q", off, p, recs, fs.Errors(), produced[p][off])
		}
	}
}

func counts(parts map[int32][]string) map[int32]int {
	out := map[int32]int{}
	for p, vs := range parts {
		out[p] = len(vs)
	}
	return out
}

// holdings is what node id's admin API says it holds of topic's sealed
// segments: number, offsets and checksum, in order.
func (c *cluster) holdings(id int32, topic string) string {
	c.t.Helper()
	view, err := c.adminView(id)
	if err != nil {
		c.t.Fatal(err)
	}
	var b strings.Builder
	for _, p := range view.Partitions {
		if p.Topic != topic {
			continue
		}
		for _, s := range p.Segments {
			if s.State == "sealed" {
				fmt.Fprintf(&b, `p%d/%d %d-%d %08x "state":"sealed"; `, p.Partition, s.No, s.Start, s.End, s.Checksum)
			}
		}
	}
	return b.String()
}

func head(s []string) []string { return s[:min(3, len(s))] }

// controller waits until Metadata from node `from` names a controller that
// ok accepts, and returns it.
func (c *cluster) controller(from int32, ok func(int32) bool) int32 {
	c.t.Helper()
	cl := c.client(from)
	deadline := time.Now().Add(sessionTTL + 20*time.Second)
	last := int32(-2)
	for time.Now().Before(deadline) {
		if md, err := c.metadata(cl); err == nil {
			last = md.ControllerID
			if ok(md.ControllerID) {
				return md.ControllerID
			}
		}
		time.Sleep(200 * time.Millisecond)
	}
	c.t.Fatalf("metadata from node %d never named an acceptable controller; last %d", from, last)
	return -1
}

// The controller is killed: another node is elected within the session
// TTL and a few seconds, and it places a new topic.
func TestControllerKilledAnotherTakesOver(t *testing.T) {
	c := newCluster(t, 3)
	first := c.controller(1, func(id int32) bool { return id > 0 })
	c.nodes[first].Kill()
	other := int32(1)
	if first == 1 {
		other = 2
	}
	start := time.Now()
	next := c.controller(other, func(id int32) bool { return id > 0 && id != first })
	t.Logf("controller %d killed; %d took over in %s (session TTL %s)", first, next, time.Since(start).Round(100*time.Millisecond), sessionTTL)
	createTopic(t, c.client(other), "after", 4)
	leaders := c.leaders(other, "after", allLed)
	if slices.Contains(leaders, first) {
		t.Errorf("a partition of a topic created after node %d died is led by it: %v", first, leaders)
	}
}

// A consumer group works through any node: its coordinator is one node,
// its committed offsets are in etcd, and a later member bootstrapping
// from another node resumes where the group committed.
func TestConsumerGroupAcrossNodes(t *testing.T) {
	c := newCluster(t, 3)
	createTopic(t, c.client(1), "events", 6)
	c.leaders(1, "events", func(brokers int, l []int32) bool { return brokers == 3 && allLed(brokers, l) })
	all := []int32{0, 1, 2, 3, 4, 5}
	first := c.produce(1, "events", all, 10, "first")
	group := func(via int32, want int) map[int32][]string {
		cl := c.client(via, kgo.ConsumerGroup("g"), kgo.ConsumeTopics("events"),
			kgo.ConsumeResetOffset(kgo.NewOffset().AtStart()), kgo.DisableAutoCommit())
		ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
		defer cancel()
		out := map[int32][]string{}
		for got := 0; got < want; {
			fs := cl.PollFetches(ctx)
			if ctx.Err() != nil {
				t.Fatalf("group member through node %d read %d of %d records", via, got, want)
			}
			fs.EachRecord(func(r *kgo.Record) { out[r.Partition] = append(out[r.Partition], string(r.Value)); got++ })
		}
		if err := cl.CommitUncommittedOffsets(ctx); err != nil {
			t.Fatalf("commit through node %d: %v", via, err)
		}
		cl.Close() // leaves the group
		return out
	}
	if got := group(1, 60); !equalParts(got, first) {
		t.Fatalf("the first member read %v, want %v", got, first)
	}
	second := c.produce(2, "events", all, 10, "second")
	if got := group(3, 60); !equalParts(got, second) {
		t.Fatalf("a member through another node read %v, want only what came after the commit %v", got, second)
	}
}

func equalParts(a, b map[int32][]string) bool {
	if len(a) != len(b) {
		return false
	}
	for p, v := range a {
		if !slices.Equal(v, b[p]) {
			return false
		}
	}
	return true
}

// segmentsHere is how many partitions of topic node id holds segments of,
// by its admin API.
func (c *cluster) segmentsHere(id int32, topic string) int {
	c.t.Helper()
	view, err := c.adminView(id)
	if err != nil {
		c.t.Fatal(err)
	}
	n := 0
	for _, p := range view.Partitions {
		if p.Topic == topic && len(p.Segments) > 0 {
			n++
		}
	}
	return n
}

// A topic deleted and created again while a node that held it was down:
// when the node returns, its shards of the old topic go, and no old record
// reads back through the new topic.
func TestRecreatedTopicStartsEmpty(t *testing.T) {
	c := newCluster(t, 2)
	createTopic(t, c.client(1), "re", 2)
	leaders := c.leaders(1, "re", func(brokers int, l []int32) bool { return brokers == 2 && allLed(brokers, l) })
	c.produce(1, "re", []int32{0, 1}, 10, "old")
	c.nodes[2].Stop()
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	adm := kadm.NewClient(c.client(1))
	if _, err := adm.DeleteTopics(ctx, "re"); err != nil {
		t.Fatal(err)
	}
	recreate(t, c.client(1), "re", 2)
	c.leaders(1, "re", func(brokers int, l []int32) bool { return brokers == 1 && allLed(brokers, l) })
	c.nodes[2].Restart()
	c.leaders(1, "re", func(brokers int, l []int32) bool { return brokers == 2 })
	deadline := time.Now().Add(30 * time.Second)
	for c.segmentsHere(2, "re") > 0 && time.Now().Before(deadline) {
		time.Sleep(200 * time.Millisecond)
	}
	if n := c.segmentsHere(2, "re"); n > 0 {
		t.Fatalf("node 2 (leader of %v before) still holds %d partitions of the deleted topic", leaders, n)
	}
	want := c.produce(1, "re", []int32{0, 1}, 5, "new")
	if got := c.consume(2, "re", 10); !equalParts(got, want) {
		t.Fatalf("the re-created topic reads %v, want only %v", got, want)
	}
}
