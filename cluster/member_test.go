package cluster

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	clientv3 "go.etcd.io/etcd/client/v3"
	"go.uber.org/zap"

	"strata/engine/store"
	"strata/internal/testsvc"

	"strata/metadata"
)

// ttl is short so that expiry takes seconds; etcd's minimum is 1.5s.
const ttl = 2 * time.Second

func etcdClient(t *testing.T) *clientv3.Client {
	t.Helper()
	cli, err := clientv3.New(clientv3.Config{Endpoints: []string{testsvc.StartEtcd(t)}, DialTimeout: 5 * time.Second, Logger: zap.NewNop()})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { cli.Close() })
	return cli
}

// logs records what the Members log, so tests check what an operator
// would read.
type logs struct {
	mu    sync.Mutex
	lines []string
	attrs []slog.Attr
}

func (l *logs) Enabled(context.Context, slog.Level) bool { return true }
func (l *logs) WithAttrs(as []slog.Attr) slog.Handler {
	return &logsWith{l, as}
}
func (l *logs) WithGroup(string) slog.Handler                 { return l }
func (l *logs) Handle(_ context.Context, r slog.Record) error { return l.add(nil, r) }

func (l *logs) add(as []slog.Attr, r slog.Record) error {
	var b strings.Builder
	fmt.Fprintf(&b, "%s %s", r.Level, r.Message)
	for _, a := range as {
		fmt.Fprintf(&b, " %s", a)
	}
	r.Attrs(func(a slog.Attr) bool { fmt.Fprintf(&b, " %s", a); return true })
	l.mu.Lock()
	defer l.mu.Unlock()
	l.lines = append(l.lines, b.String())
	return nil
}

// has reports whether a line holds every one of parts.
func (l *logs) has(parts ...string) bool {
	l.mu.Lock()
	defer l.mu.Unlock()
	for _, line := range l.lines {
		ok := true
		for _, p := range parts {
			ok = ok && strings.Contains(line, p)
		}
		if ok {
			return true
		}
	}
	return false
}

func (l *logs) dump(t *testing.T) {
	l.mu.Lock()
	defer l.mu.Unlock()
	for _, line := range l.lines {
		t.Log(line)
	}
}

type logsWith struct {
	l  *logs
	as []slog.Attr
}

func (w *logsWith) Enabled(context.Context, slog.Level) bool { return true }
func (w *logsWith) WithAttrs(as []slog.Attr) slog.Handler {
	return &logsWith{w.l, append(slices.Clone(w.as), as...)}
}
func (w *logsWith) WithGroup(string) slog.Handler                 { return w }
func (w *logsWith) Handle(_ context.Context, r slog.Record) error { return w.l.add(w.as, r) }

type harness struct {
	t      *testing.T
	cli    *clientv3.Client
	prefix string
	logs   *logs
	regs   map[int32]*prometheus.Registry // each node's metrics
}

func newHarness(t *testing.T) *harness {
	h := &harness{t: t, cli: etcdClient(t), prefix: testsvc.UniquePrefix(t), logs: &logs{}, regs: map[int32]*prometheus.Registry{}}
	t.Cleanup(func() {
		if t.Failed() {
			h.logs.dump(t)
		}
	})
	return h
}

func (h *harness) config(id int32) Config {
	if h.regs[id] == nil {
		h.regs[id] = prometheus.NewRegistry()
	}
	return Config{Client: h.cli, Prefix: h.prefix, SessionTTL: ttl, Logger: slog.New(h.logs), Registerer: h.regs[id],
		Self: Node{ID: id, KafkaAddr: fmt.Sprintf("127.0.0.1:%d", 19090+id), AdminAddr: fmt.Sprintf("127.0.0.1:%d", 19640+id)}}
}

func (h *harness) join(id int32) *Member {
	h.t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	m, err := Join(ctx, h.config(id))
	if err != nil {
		h.t.Fatalf("join node %d: %v", id, err)
	}
	h.t.Cleanup(func() { m.Close() })
	return m
}

// eventually waits, on m's view changes, until cond holds.
func eventually(t *testing.T, m *Member, within time.Duration, what string, cond func() bool) time.Duration {
	t.Helper()
	start := time.Now()
	deadline := time.After(within)
	for {
		ch := m.Changed()
		if cond() {
			return time.Since(start)
		}
		select {
		case <-ch:
		case <-time.After(100 * time.Millisecond):
		case <-deadline:
			t.Fatalf("after %v: %s", within, what)
		}
	}
}

// metric is the value of a metric of node id, as /metrics shows it.
func (h *harness) metric(id int32, name string) float64 {
	h.t.Helper()
	mfs, err := h.regs[id].Gather()
	if err != nil {
		h.t.Fatal(err)
	}
	for _, mf := range mfs {
		if mf.GetName() == name && len(mf.Metric) == 1 {
			m := mf.Metric[0]
			if m.Gauge != nil {
				return m.Gauge.GetValue()
			}
			return m.Counter.GetValue()
		}
	}
	h.t.Fatalf("node %d has no metric %s", id, name)
	return 0
}

// waitLog waits for a log line that holds every one of parts.
func waitLog(t *testing.T, l *logs, what string, parts ...string) {
	t.Helper()
	for start := time.Now(); !l.has(parts...); time.Sleep(10 * time.Millisecond) {
		if time.Since(start) > 5*time.Second {
			t.Fatalf("not logged: %s", what)
		}
	}
}

func ids(ns []Node) []int32 {
	var out []int32
	for _, n := range ns {
		out = append(out, n.ID)
	}
	return out
}

// leaders maps each partition of topic to its leader and epoch as m sees them.
func leaders(m *Member, topic string) map[int32][2]int32 {
	out := map[int32][2]int32{}
	t, ok := m.TopicRecords()[topic]
	if !ok {
		return out
	}
	for i := int32(0); i < t.Partitions; i++ {
		if p, ok := m.Placement(topic, i); ok {
			out[i] = [2]int32{p.Leader, p.Epoch}
		}
	}
	return out
}

func placed(m *Member, topic string, n int) func() bool {
	return func() bool {
		l := leaders(m, topic)
		if len(l) != n {
			return false
		}
		for _, le := range l {
			if le[0] < 0 {
				return false
			}
		}
		return true
	}
}

// Nodes see each other with the addresses they registered; the first to
// join is the controller; a second node with a taken id is refused while
// the first lives; a node that closes is gone from the others' view at
// once, and a node that stops renewing its lease is gone once it expires.
func TestMembership(t *testing.T) {
	h := newHarness(t)
	m1 := h.join(1)
	eventually(t, m1, 5*time.Second, "node 1 is not controller", func() bool { return m1.Controller() == 1 })
	m2 := h.join(2)
	m3 := h.join(3)
	for _, m := range []*Member{m1, m2, m3} {
		eventually(t, m, 5*time.Second, "not every node sees 1, 2, 3", func() bool {
			return slices.Equal(ids(m.Nodes()), []int32{1, 2, 3})
		})
		if got := m.Controller(); got != 1 {
			t.Errorf("node %d sees controller %d, want 1", m.Node().ID, got)
		}
		if !m.Live() {
			t.Errorf("node %d is not live", m.Node().ID)
		}
	}
	if n := m3.Nodes()[1]; n.KafkaAddr != "127.0.0.1:19092" || n.AdminAddr != "127.0.0.1:19642" {
		t.Errorf("node 2 as node 3 sees it: %+v", n)
	}

	_, err := Join(context.Background(), h.config(2))
	if !errors.Is(err, ErrNodeIDTaken) || !strings.Contains(err.Error(), "127.0.0.1:19092") {
		t.Fatalf("a second node 2 joined, or its error does not name the first: %v", err)
	}
	if got := ids(m1.Nodes()); !slices.Equal(got, []int32{1, 2, 3}) {
		t.Fatalf("after the refused join, nodes %v", got)
	}

	m3.Close()
	took := eventually(t, m1, ttl, "node 3 closed but is still listed", func() bool {
		return slices.Equal(ids(m1.Nodes()), []int32{1, 2})
	})
	t.Logf("node 3 gone from node 1's view %v after Close", took)

	// A node that stops renewing its lease (a crash) is dead when it expires.
	ctx := context.Background()
	lease, err := h.cli.Grant(ctx, int64(ttl/time.Second))
	if err != nil {
		t.Fatal(err)
	}
	if _, err := h.cli.Put(ctx, keys{h.prefix}.node(9), `{"id":9,"kafka_addr":"127.0.0.1:19099"}`, clientv3.WithLease(lease.ID)); err != nil {
		t.Fatal(err)
	}
	eventually(t, m1, 5*time.Second, "node 9 never listed", func() bool { return slices.Contains(ids(m1.Nodes()), 9) })
	took = eventually(t, m1, 3*ttl, "node 9 stopped renewing but is still listed", func() bool {
		return !slices.Contains(ids(m1.Nodes()), 9)
	})
	if took < ttl/2 {
		t.Errorf("node 9 gone after %v, before its lease (%v) could expire", took, ttl)
	}
	t.Logf("node 9 gone %v after it was listed (session TTL %v)", took, ttl)
}

// A lease revoked behind a node's back (as etcd does when it has not heard
// from the node for the TTL) turns Live false at once; the node registers
// again with a new lease, says so, and is controller again.
func TestLeaseLostAndRegainedAlone(t *testing.T) {
	h := newHarness(t)
	m := h.join(1)
	eventually(t, m, 5*time.Second, "node 1 is not controller", func() bool { return m.Controller() == 1 })
	lease := m.lease()
	seenDown := make(chan struct{})
	go func() {
		defer close(seenDown)
		for m.Live() {
			<-m.Changed()
		}
	}()
	if _, err := h.cli.Revoke(context.Background(), lease); err != nil {
		t.Fatal(err)
	}
	select {
	case <-seenDown:
	case <-time.After(ttl):
		t.Fatalf("lease revoked, Live still true after %v", ttl)
	}
	eventually(t, m, 3*ttl, "node 1 did not register again", func() bool {
		return m.Live() && slices.Equal(ids(m.Nodes()), []int32{1}) && m.Controller() == 1
	})
	if m.lease() == lease {
		t.Errorf("registered again under the revoked lease %x", lease)
	}
	if !h.logs.has("WARN", "lease lost", "node=1") || !h.logs.has("INFO", "registered again", "node=1") {
		t.Errorf("the lease's loss and the new registration are not both logged")
	}
}

// The controller places a topic; its lease is revoked (as a pause past the
// TTL would); the other node becomes controller; the deposed controller's
// late write, with its old term, is refused; placement goes on: the
// deposed node's partitions go leaderless and come back to it when it
// re-registers, epochs growing at each change, and a new topic is placed.
func TestControllerDeposedIsFenced(t *testing.T) {
	h := newHarness(t)
	m1 := h.join(1)
	eventually(t, m1, 5*time.Second, "node 1 is not controller", func() bool { return m1.Controller() == 1 })
	m2 := h.join(2)
	eventually(t, m1, 5*time.Second, "node 1 does not see node 2", func() bool { return len(m1.Nodes()) == 2 })
	ctx := context.Background()
	if err := m2.CreateTopic(ctx, "clicks", 4, 1, nil); err != nil {
		t.Fatal(err)
	}
	eventually(t, m2, 5*time.Second, "clicks not placed", placed(m2, "clicks", 4))
	before := leaders(m2, "clicks")
	led := map[int32]int{}
	for _, le := range before {
		led[le[0]]++
		if le[1] != 0 {
			t.Errorf("a new partition's epoch is %d, want 0", le[1])
		}
	}
	if led[1] != 2 || led[2] != 2 {
		t.Fatalf("clicks' 4 partitions not spread over nodes 1 and 2: %v", before)
	}

	// Record every (leader, epoch) node 2 sees from here on.
	var mu sync.Mutex
	history := map[int32][][2]int32{}
	stop := make(chan struct{})
	recorded := make(chan struct{})
	go func() {
		defer close(recorded)
		for {
			ch := m2.Changed()
			mu.Lock()
			for p, le := range leaders(m2, "clicks") {
				if h := history[p]; len(h) == 0 || h[len(h)-1] != le {
					history[p] = append(h, le)
				}
			}
			mu.Unlock()
			select {
			case <-ch:
			case <-stop:
				return
			}
		}
	}()

	eventually(t, m1, 5*time.Second, "clicks not placed in node 1's view", placed(m1, "clicks", 4))
	old := m1.currentTerm()
	if old.rev == 0 {
		t.Fatal("node 1 is controller in everyone's view but holds no term")
	}
	m1.mu.Lock()
	_, rv := m1.placementStateLocked()
	m1.mu.Unlock()
	if _, err := h.cli.Revoke(ctx, m1.lease()); err != nil {
		t.Fatal(err)
	}
	took := eventually(t, m2, 2*ttl, "node 2 never became controller", func() bool {
		return m2.Controller() == 2 && m2.currentTerm().rev != 0
	})
	t.Logf("node 2 controller %v after node 1's lease was revoked", took)
	if nt := m2.currentTerm(); nt.rev <= old.rev {
		t.Errorf("new term %d not after the old one %d", nt.rev, old.rev)
	}

	// Node 1's late write, planned from its view with its old term: the
	// partitions node 2 leads, given to node 1.
	var late []Write
	for p, le := range before {
		if le[0] == 2 {
			prev, _ := m1.Placement("clicks", p)
			next := prev.clone()
			next.Leader, next.Replicas, next.ISR, next.Epoch = 1, []int32{1}, []int32{1}, prev.Epoch+1
			late = append(late, Write{Partition: next, Prev: &prev, Why: "late"})
		}
	}
	if _, err := m1.writePlacement(ctx, old, late, rv); !errors.Is(err, ErrDeposed) {
		t.Fatalf("the deposed controller's write: %v, want ErrDeposed", err)
	}
	for _, w := range late {
		tp := TopicPartition{w.Partition.Topic, w.Partition.Partition}
		r, err := h.cli.Get(ctx, keys{h.prefix}.partition(tp.Topic, tp.Partition))
		if err != nil || len(r.Kvs) != 1 || r.Kvs[0].ModRevision != rv.partitions[tp] {
			t.Fatalf("%s changed since node 1's plan: the fence, not the compare-and-swap, must refuse it (%v)", tp, err)
		}
	}
	if !h.logs.has("WARN", "term is over", "node=1") {
		t.Errorf("the refused write is not logged")
	}

	// Node 1 comes back; every partition ends with its first leader, and
	// node 2's partitions never moved.
	eventually(t, m1, 3*ttl, "node 1 did not register again", func() bool { return m1.Live() })
	eventually(t, m2, 3*ttl, "node 1's partitions not led by it again", func() bool {
		now := leaders(m2, "clicks")
		for p, le := range before {
			if now[p][0] != le[0] {
				return false
			}
		}
		return true
	})
	close(stop)
	<-recorded
	mu.Lock()
	for p, le := range before {
		hist := history[p]
		for i := 1; i < len(hist); i++ {
			if hist[i][1] <= hist[i-1][1] {
				t.Errorf("clicks-%d: epoch did not grow at a change: %v", p, hist)
			}
		}
		last := hist[len(hist)-1]
		switch le[0] {
		case 2:
			if len(hist) != 1 || last != le {
				t.Errorf("clicks-%d, led by node 2, changed: %v", p, hist)
			}
		case 1:
			// Leaderless while node 1 was away, unless it was back before
			// node 2 planned; either way its epoch says what happened.
			if last[1] != 0 && last[1] != 2 {
				t.Errorf("clicks-%d: epoch %d after going leaderless and back, want 2 (or 0 untouched): %v", p, last[1], hist)
			}
			if last[1] == 2 && !slices.Contains(hist, [2]int32{-1, 1}) && len(hist) > 1 {
				t.Errorf("clicks-%d: went through epoch 1 without being leaderless: %v", p, hist)
			}
		}
	}
	mu.Unlock()
	t.Logf("clicks history as node 2 saw it: %v", history)

	// Placement goes on under the new controller.
	if err := m1.CreateTopic(ctx, "orders", 2, 1, nil); err != nil {
		t.Fatal(err)
	}
	eventually(t, m1, 5*time.Second, "orders not placed", placed(m1, "orders", 2))
	waitLog(t, h.logs, "orders placed by node 2, the controller", "INFO", "topic placed", "topic=orders", "node=2")
	if h.logs.has("INFO", "topic placed", "topic=orders", "node=1") {
		t.Errorf("orders placed by node 1, not the controller")
	}
}

// The controller's Member closes: another node is controller well within
// the session TTL (the lease is revoked, not left to expire), and it marks
// the closed node's partitions leaderless (replication factor 1).
func TestControllerClosedAnotherElected(t *testing.T) {
	h := newHarness(t)
	m1 := h.join(1)
	eventually(t, m1, 5*time.Second, "node 1 is not controller", func() bool { return m1.Controller() == 1 })
	m2 := h.join(2)
	m3 := h.join(3)
	eventually(t, m3, 5*time.Second, "node 3 does not see 3 nodes", func() bool { return len(m3.Nodes()) == 3 })
	if err := m3.CreateTopic(context.Background(), "t", 6, 1, nil); err != nil {
		t.Fatal(err)
	}
	eventually(t, m3, 5*time.Second, "t not placed", placed(m3, "t", 6))
	before := leaders(m3, "t")

	m1.Close()
	took := eventually(t, m3, ttl, "no new controller", func() bool {
		c := m3.Controller()
		return c == 2 || c == 3
	})
	t.Logf("new controller %d after %v", m3.Controller(), took)
	c := m3.Controller()
	other := int32(5) - c
	eventually(t, m3, 5*time.Second, "the new controller's metric", func() bool {
		return h.metric(c, "strata_cluster_controller") == 1
	})
	if h.metric(other, "strata_cluster_controller") != 0 || h.metric(c, "strata_cluster_elections_won_total") != 1 {
		t.Errorf("metrics: node %d strata_cluster_controller %v; node %d elections %v", other,
			h.metric(other, "strata_cluster_controller"), c, h.metric(c, "strata_cluster_elections_won_total"))
	}
	if m2.Controller() != m3.Controller() && m2.Controller() != -1 {
		t.Errorf("nodes 2 and 3 disagree on the controller: %d, %d", m2.Controller(), m3.Controller())
	}
	eventually(t, m3, 5*time.Second, "node 1's partitions not leaderless", func() bool {
		now := leaders(m3, "t")
		for p, le := range before {
			want := le
			if le[0] == 1 {
				want = [2]int32{-1, 1}
			}
			if now[p] != want {
				return false
			}
		}
		return true
	})
}

// Topics: created once, with a valid name and a replication factor the
// live nodes can hold; their records are JSON under the documented keys;
// deleted with their partitions in one step; re-created afresh.
func TestTopics(t *testing.T) {
	h := newHarness(t)
	m1 := h.join(1)
	m2 := h.join(2)
	eventually(t, m1, 5*time.Second, "no controller", func() bool { return m1.Controller() == 1 })
	eventually(t, m2, 5*time.Second, "node 2 does not see node 1", func() bool { return len(m2.Nodes()) == 2 })
	ctx := context.Background()
	for _, c := range []struct {
		name  string
		parts int32
		rf    int16
		want  error
	}{
		{"bad/name", 1, 1, metadata.ErrInvalidTopic},
		{"", 1, 1, metadata.ErrInvalidTopic},
		{"t", 0, 1, metadata.ErrInvalidPartitions},
		{"t", 1, 0, metadata.ErrInvalidReplicationFactor},
		{"t", 1, 3, metadata.ErrInvalidReplicationFactor},
	} {
		if err := m2.CreateTopic(ctx, c.name, c.parts, c.rf, nil); !errors.Is(err, c.want) {
			t.Errorf("CreateTopic(%q, %d, %d): %v, want %v", c.name, c.parts, c.rf, err, c.want)
		}
	}
	if err := m2.CreateTopic(ctx, "t", 3, 2, nil); err != nil {
		t.Fatal(err)
	}
	if err := m1.CreateTopic(ctx, "t", 5, 1, nil); !errors.Is(err, metadata.ErrTopicExists) {
		t.Fatalf("second CreateTopic: %v, want metadata.ErrTopicExists", err)
	}
	eventually(t, m1, 5*time.Second, "t not placed", placed(m1, "t", 3))
	for i := int32(0); i < 3; i++ {
		p, _ := m1.Placement("t", i)
		if len(p.Replicas) != 2 || p.Replicas[0] != p.Leader || p.Replicas[0] == p.Replicas[1] || !slices.Equal(p.ISR, p.Replicas) {
			t.Errorf("t-%d: %+v, want 2 distinct replicas, the leader first, all in sync", i, p)
		}
	}
	eventually(t, m2, 5*time.Second, "node 2 does not see t", func() bool { _, ok := m2.TopicRecords()["t"]; return ok })
	if tp := m2.TopicRecords()["t"]; tp.Partitions != 3 || tp.ReplicationFactor != 2 || tp.Created.IsZero() {
		t.Errorf("topic as node 2 sees it: %+v", tp)
	}

	// The keys, as an operator lists them with etcdctl.
	resp, err := h.cli.Get(ctx, h.prefix+"/", clientv3.WithPrefix(), clientv3.WithKeysOnly())
	if err != nil {
		t.Fatal(err)
	}
	var got []string
	for _, kv := range resp.Kvs {
		k := strings.TrimPrefix(string(kv.Key), h.prefix)
		if strings.HasPrefix(k, "/controller/") {
			k = "/controller/{lease}"
		}
		got = append(got, k)
	}
	want := []string{"/controller/{lease}", "/controller/{lease}", "/nodes/1", "/nodes/2",
		"/partitions/t/0000000000", "/partitions/t/0000000001", "/partitions/t/0000000002", "/topics/t"}
	if !slices.Equal(got, want) {
		t.Errorf("keys:\n%v\nwant\n%v", got, want)
	}
	v, err := h.cli.Get(ctx, h.prefix+"/partitions/t/0000000001")
	if err != nil || len(v.Kvs) != 1 || !strings.Contains(string(v.Kvs[0].Value), `"topic":"t","partition":1,"leader":`) {
		t.Errorf("partition record: %v %s", err, v.Kvs)
	}

	if err := m1.DeleteTopic(ctx, "t"); err != nil {
		t.Fatal(err)
	}
	if err := m1.DeleteTopic(ctx, "t"); !errors.Is(err, metadata.ErrUnknownTopic) {
		t.Fatalf("second DeleteTopic: %v, want metadata.ErrUnknownTopic", err)
	}
	eventually(t, m2, 5*time.Second, "t still in node 2's view", func() bool {
		_, ok := m2.TopicRecords()["t"]
		_, okp := m2.Placement("t", 0)
		return !ok && !okp
	})
	if n, err := h.cli.Get(ctx, h.prefix+"/partitions/", clientv3.WithPrefix(), clientv3.WithCountOnly()); err != nil || n.Count != 0 {
		t.Errorf("partition records left after DeleteTopic: %v %v", n.Count, err)
	}

	// The name is free once the controller has cleared the old topic's
	// leftovers; until then CreateTopic says to try again, as a client does.
	var createErr error
	eventually(t, m2, 5*time.Second, "t not created again", func() bool {
		createErr = m2.CreateTopic(ctx, "t", 2, 1, nil)
		return !errors.Is(createErr, metadata.ErrTopicDeleting)
	})
	if createErr != nil {
		t.Fatal(createErr)
	}
	eventually(t, m1, 5*time.Second, "the new t not placed", placed(m1, "t", 2))
	if _, ok := m1.Placement("t", 2); ok {
		t.Errorf("the new t has a partition 2 left from the old one")
	}
	for p, le := range leaders(m1, "t") {
		if le[1] != 0 {
			t.Errorf("new t-%d has epoch %d, want 0", p, le[1])
		}
	}
}

// The controller loses etcd (its connection held, as in a partition or a
// pause) past the TTL: Live turns false on its own side, the other node
// becomes controller and marks its partitions leaderless; when the
// connection flows again, it registers again and takes its partitions
// back, each change one epoch more.
func TestCutOffFromEtcd(t *testing.T) {
	h := newHarness(t)
	proxy := newPauser(t, testsvc.StartEtcd(t))
	cut, err := clientv3.New(clientv3.Config{Endpoints: []string{proxy.addr()}, DialTimeout: 5 * time.Second, Logger: zap.NewNop()})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { cut.Close() })
	cfg := h.config(1)
	cfg.Client = cut
	m1, err := Join(context.Background(), cfg)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { m1.Close() })
	eventually(t, m1, 5*time.Second, "node 1 is not controller", func() bool { return m1.Controller() == 1 })
	m2 := h.join(2)
	eventually(t, m1, 5*time.Second, "node 1 does not see node 2", func() bool { return len(m1.Nodes()) == 2 })
	if err := m2.CreateTopic(context.Background(), "t", 2, 1, nil); err != nil {
		t.Fatal(err)
	}
	eventually(t, m2, 5*time.Second, "t not placed", placed(m2, "t", 2))
	before := leaders(m2, "t")
	var mine int32 = -1
	for p, le := range before {
		if le[0] == 1 {
			mine = p
		}
	}
	if mine < 0 {
		t.Fatalf("node 1 leads no partition of t: %v", before)
	}

	eventually(t, m1, 5*time.Second, "t not placed in node 1's view", placed(m1, "t", 2))
	if !m1.Leads("t", mine) {
		t.Fatalf("node 1 does not lead t-%d by its own account", mine)
	}
	proxy.pause()
	start := time.Now()
	for m1.Live() {
		if time.Since(start) > 2*ttl {
			t.Fatalf("node 1 cut off from etcd for %v, still Live", time.Since(start))
		}
		time.Sleep(20 * time.Millisecond)
	}
	t.Logf("node 1 not Live %v after it was cut off (TTL %v)", time.Since(start), ttl)
	if m1.Leads("t", mine) {
		t.Errorf("node 1 lost its lease but still leads t-%d by its own account", mine)
	}
	if h.metric(1, "strata_cluster_live") != 0 || h.metric(1, "strata_cluster_sessions_lost_total") != 1 {
		t.Errorf("node 1's metrics do not show the lost lease")
	}
	eventually(t, m2, 3*ttl, "node 2 did not take over as controller and mark node 1's partition leaderless", func() bool {
		p, _ := m2.Placement("t", mine)
		return m2.Controller() == 2 && p.Leader == -1 && p.Epoch == 1 && slices.Equal(ids(m2.Nodes()), []int32{2})
	})
	t.Logf("node 2 controller, t-%d leaderless, %v after the cut", mine, time.Since(start))

	proxy.resume()
	eventually(t, m2, 5*ttl, "node 1 did not come back to lead its partition", func() bool {
		p, _ := m2.Placement("t", mine)
		return p.Leader == 1 && p.Epoch == 2
	})
	eventually(t, m1, 5*ttl, "node 1 not Live, or its view stale", func() bool {
		p, _ := m1.Placement("t", mine)
		return m1.Live() && m1.Controller() == 2 && p.Leader == 1 && p.Epoch == 2
	})
	if !m1.Leads("t", mine) || h.metric(1, "strata_cluster_live") != 1 {
		t.Errorf("node 1 registered again but does not lead t-%d, or its metric says it is not live", mine)
	}
	for p, le := range before {
		if p != mine {
			if now, _ := m2.Placement("t", p); now.Leader != le[0] || now.Epoch != le[1] {
				t.Errorf("t-%d, led by node 2, changed: %+v", p, now)
			}
		}
	}
	if !h.logs.has("WARN", "lease lost", "node=1") || !h.logs.has("INFO", "registered again", "node=1") {
		t.Errorf("node 1's lease loss and return are not both logged")
	}
}

// A node that joins is chosen for the next segment of partitions of a
// busier node; that node hands each over at its roll: appends in flight
// finish first and none follows, the chosen node leads from the old
// leader's log end at the next epoch, and the spans say who holds what.
// A handoff whose chosen node is gone by the time it writes is refused,
// and the partition stays.
func TestHandOffAtARoll(t *testing.T) {
	h := newHarness(t)
	m1 := h.join(1)
	eventually(t, m1, 5*time.Second, "node 1 is not controller", func() bool { return m1.Controller() == 1 })
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	if err := m1.CreateTopic(ctx, "t", 4, 1, nil); err != nil {
		t.Fatal(err)
	}
	eventually(t, m1, 5*time.Second, "t is not placed", placed(m1, "t", 4))
	m2 := h.join(2)
	var chosen []int32
	eventually(t, m1, 5*time.Second, "node 2 is chosen for no partition's next segment", func() bool {
		chosen = nil
		for p := int32(0); p < 4; p++ {
			if rec, _ := m1.Placement("t", p); rec.Next == 2 {
				chosen = append(chosen, p)
			}
		}
		return len(chosen) == 2
	})
	p := chosen[0]

	// An append in flight holds the handoff back until it is done.
	release := m1.cfg.Gates.Append(store.ShardName("t", p))
	if !m1.Leads("t", p) {
		t.Fatal("node 1 does not lead the partition before handing it over")
	}
	sealed := make(chan struct{})
	handed := make(chan error, 1)
	go func() {
		handed <- m1.HandOff(ctx, "t", p, func(context.Context) (int64, error) { close(sealed); return 1000, nil })
	}()
	select {
	case <-sealed:
		t.Fatal("the log was sealed while an append was in flight")
	case <-time.After(200 * time.Millisecond):
	}
	release()
	if err := <-handed; err != nil {
		t.Fatal(err)
	}
	if m1.Leads("t", p) {
		t.Error("node 1 still takes appends after handing the partition over")
	}
	eventually(t, m2, 5*time.Second, "node 2 does not lead the partition", func() bool { return m2.Leads("t", p) })
	rec, _ := m2.Placement("t", p)
	if want := []Span{{0, 1}, {1000, 2}}; rec.Epoch != 1 || rec.Next != 0 || !slices.Equal(rec.Spans, want) || !slices.Equal(rec.ISR, []int32{2}) {
		t.Errorf("after the handoff: %+v, want leader 2 at epoch 1, spans %v", rec, want)
	}
	if node, end := rec.Holder(999); node != 1 || end != 1000 {
		t.Errorf("offset 999 is on node %d up to %d, want node 1 up to 1000", node, end)
	}
	waitLog(t, h.logs, "handoff", "partition handed over at a roll", "t-"+fmt.Sprint(p), "to=2", "from_offset=1000")

	// The chosen node goes while the log is being sealed: refused, and the
	// partition is node 1's again.
	q := chosen[1]
	err := m1.HandOff(ctx, "t", q, func(context.Context) (int64, error) {
		m2.Close()
		return 500, nil
	})
	if err != nil {
		t.Fatal(err)
	}
	if !m1.Leads("t", q) {
		t.Error("a refused handoff left the partition without its leader")
	}
	if rec, _ := m1.Placement("t", q); rec.Leader != 1 || rec.Epoch != 0 {
		t.Errorf("a refused handoff changed the record: %+v", rec)
	}
	waitLog(t, h.logs, "refusal", "handoff refused", "t-"+fmt.Sprint(q))
}

// A node's reported bytes reach the controller's placement state; a small
// change is not written (etcd sees a write per tenth moved, not per
// produce), and the report goes with the node's lease.
func TestReportLoad(t *testing.T) {
	h := newHarness(t)
	m1 := h.join(1)
	m2 := h.join(2)
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	bytesOf := func(id int32) (int64, bool) {
		m1.mu.Lock()
		defer m1.mu.Unlock()
		st, _ := m1.placementStateLocked()
		for _, n := range st.Live {
			if n.ID == id {
				return n.Bytes, true
			}
		}
		return 0, false
	}
	for _, step := range []struct {
		report, want int64
	}{
		{1000, 1000},
		{1050, 1000}, // under a tenth: not written
		{5000, 5000},
		{0, 0},
	} {
		if err := m2.ReportLoad(ctx, step.report); err != nil {
			t.Fatal(err)
		}
		eventually(t, m1, 5*time.Second, fmt.Sprintf("node 2 reported %d; the controller's state should say %d", step.report, step.want), func() bool {
			b, ok := bytesOf(2)
			return ok && b == step.want
		})
		// The reporter compares the next figure with its own view of its
		// report: let that catch up too.
		eventually(t, m2, 5*time.Second, "node 2's view lacks its own last report", func() bool {
			m2.mu.Lock()
			defer m2.mu.Unlock()
			b, ok := m2.view.loads[2]
			return ok && b == step.want
		})
	}
	rev := func() int64 {
		resp, err := h.cli.Get(ctx, h.prefix+"/loads/2")
		if err != nil || len(resp.Kvs) != 1 {
			t.Fatalf("node 2's load key: %v, %v", resp, err)
		}
		return resp.Kvs[0].ModRevision
	}
	before := rev()
	if err := m2.ReportLoad(ctx, 0); err != nil {
		t.Fatal(err)
	}
	if after := rev(); after != before {
		t.Errorf("an unchanged load was written again (revision %d -> %d)", before, after)
	}
	m2.Close()
	eventually(t, m1, 5*time.Second, "node 2's load outlived its lease", func() bool {
		m1.mu.Lock()
		defer m1.mu.Unlock()
		_, ok := m1.view.loads[2]
		return !ok
	})
}

// A deleted topic's name stays taken until the controller has cleared what
// the topic left in the bucket (ClearTopic; a failure is retried), so no
// object of the old topic is read as the new one's; and a node's shard made
// for the old topic claims no segment to tier once the topic is gone.
func TestDeletedTopicIsClearedBeforeItsNameIsFree(t *testing.T) {
	h := newHarness(t)
	cfg := h.config(1)
	var mu sync.Mutex
	var calls []string
	fail, hold := true, make(chan struct{})
	cfg.ClearTopic = func(ctx context.Context, topic string, partitions int32) error {
		mu.Lock()
		calls = append(calls, fmt.Sprintf("%s/%d", topic, partitions))
		f := fail
		fail = false
		mu.Unlock()
		if f {
			return errors.New("the bucket is away")
		}
		select {
		case <-hold:
			return nil
		case <-ctx.Done():
			return ctx.Err()
		}
	}
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()
	m, err := Join(ctx, cfg)
	if err != nil {
		t.Fatal(err)
	}
	defer m.Close()
	if err := m.CreateTopic(ctx, "t", 3, 1, nil); err != nil {
		t.Fatal(err)
	}
	eventually(t, m, 5*time.Second, "t is not placed", placed(m, "t", 3))
	inc := m.TopicRecords()["t"].Incarnation
	if _, err := h.cli.Put(ctx, m.shardKeys().of("t-0"), fmt.Sprint(inc)); err != nil {
		t.Fatal(err)
	}
	if release, ok, err := m.Claim(ctx, "t-0", 0, 99); err != nil || !ok {
		t.Fatalf("claiming a segment of a live topic: %v %v", ok, err)
	} else {
		release()
	}

	if err := m.DeleteTopic(ctx, "t"); err != nil {
		t.Fatal(err)
	}
	if _, ok, err := m.Claim(ctx, "t-0", 100, 199); err != nil || ok {
		t.Errorf("a segment of a deleted topic's shard was claimed for tiering (%v, %v)", ok, err)
	}
	err = m.CreateTopic(ctx, "t", 1, 1, nil)
	if !errors.Is(err, metadata.ErrTopicExists) || !strings.Contains(err.Error(), "marked for deletion") {
		t.Fatalf("creating t while its objects are cleared: %v; want metadata.ErrTopicExists, marked for deletion", err)
	}
	waitLog(t, h.logs, "the failed clearing", "clearing a deleted topic's objects", "the bucket is away")
	close(hold) // the retry, 10s later, succeeds
	deadline := time.Now().Add(20 * time.Second)
	for err = m.CreateTopic(ctx, "t", 1, 1, nil); errors.Is(err, metadata.ErrTopicExists); err = m.CreateTopic(ctx, "t", 1, 1, nil) {
		if time.Now().After(deadline) {
			t.Fatalf("t's name is still taken 20s after its deletion: %v", err)
		}
		time.Sleep(200 * time.Millisecond)
	}
	if err != nil {
		t.Fatal(err)
	}
	mu.Lock()
	defer mu.Unlock()
	if !slices.Equal(calls, []string{"t/3", "t/3"}) {
		t.Errorf("ClearTopic calls %v, want t/3 failing, then t/3 again", calls)
	}
}

// The names Kafka refuses beyond their characters are refused by the
// cluster's create itself, against every topic record and under the
// create's compare: a name that collides once '.' reads as '_' with a topic
// another node created, and Kafka's internal topics'.
func TestCreateTopicRefusesNamesKafkaRefuses(t *testing.T) {
	h := newHarness(t)
	m1, m2 := h.join(1), h.join(2)
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	if err := m1.CreateTopic(ctx, "dot.und", 1, 1, nil); err != nil {
		t.Fatal(err)
	}
	var nerr *metadata.TopicNameError
	for _, name := range []string{"dot_und", "__consumer_offsets"} {
		if err := m2.CreateTopic(ctx, name, 1, 1, nil); !errors.As(err, &nerr) || !errors.Is(err, metadata.ErrInvalidTopic) {
			t.Errorf("create %s on node 2: %v; want a TopicNameError", name, err)
		}
	}
	if err := m2.CreateTopic(ctx, "dot.und", 1, 1, nil); !errors.Is(err, metadata.ErrTopicExists) {
		t.Errorf("create dot.und again: %v; want ErrTopicExists", err)
	}
}
