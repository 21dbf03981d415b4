package e2e

import (
	"context"
	"encoding/json"
	"fmt"
	"slices"
	"strconv"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/twmb/franz-go/pkg/kerr"
	"github.com/twmb/franz-go/pkg/kgo"
	"github.com/twmb/franz-go/pkg/kmsg"
	clientv3 "go.etcd.io/etcd/client/v3"
	"go.uber.org/zap"
)

var sixParts = []int32{0, 1, 2, 3, 4, 5}

// etcd stops (SIGKILL) under load and comes back after a few seconds on
// its data folder. While it is down, each node keeps serving the
// partitions it leads until its lease would have expired (it cannot tell
// etcd is gone sooner), then leads nothing: produces are refused with a
// retriable error, which the producers retry. When etcd is back the nodes
// register again, the controller gives them their partitions back, and
// the producers' buffered records go through: every acknowledged record is
// read back once, at the offset it was acknowledged at.
func TestEtcdRestartedUnderLoad(t *testing.T) {
	for _, tc := range []struct {
		name string
		sig  syscall.Signal
		down time.Duration
	}{
		{"SIGTERM, 5s down", syscall.SIGTERM, 5 * time.Second},
		// Long enough for gRPC's reconnect backoff, left at its defaults,
		// to wait seconds past etcd's return (it grows to two minutes).
		{"SIGKILL, 20s down", syscall.SIGKILL, 20 * time.Second},
	} {
		t.Run(tc.name, func(t *testing.T) { etcdRestartedUnderLoad(t, tc.sig, tc.down) })
	}
}

func etcdRestartedUnderLoad(t *testing.T, sig syscall.Signal, downFor time.Duration) {
	e := startEtcd(t)
	c := newClusterOn(t, e.client, 3)
	createTopic(t, c.client(1), "load", 6)
	c.waitHealthy("load")
	h := newHistory()
	stop := c.startLoad(h, "load", sixParts, 200, 1, 2)
	defer stop()

	time.Sleep(2 * time.Second)
	down := time.Now()
	e.stop(sig)
	// Past a lease's TTL (and the client's half-second deadline check) no
	// node may still call itself live.
	fenced := down.Add(sessionTTL + time.Second)
	time.Sleep(time.Until(fenced.Add(500 * time.Millisecond)))
	for id := range c.nodes {
		if a, err := c.adminView(id); err != nil || a.Live {
			t.Errorf("node %d, %s after etcd stopped: /v1/cluster says live=%v (%v); it cannot know its lease holds", id, time.Since(down).Round(100*time.Millisecond), a.Live, err)
		}
	}
	time.Sleep(time.Until(down.Add(downFor)))
	up := time.Now()
	e.restart()
	c.waitHealthy("load")
	healthy := time.Now()
	t.Logf("etcd down %s; all nodes live with every partition led %s after it came back", up.Sub(down).Round(100*time.Millisecond), healthy.Sub(up).Round(100*time.Millisecond))
	// A node reconnects within a second of etcd's return and revokes its
	// lost lease at once, rather than waiting out the full TTL a restarted
	// etcd gives every lease again.
	if took := healthy.Sub(up); took > sessionTTL+3*time.Second {
		t.Errorf("the cluster took %s after etcd's return to be live with every partition led; want within the session TTL (%s) and 3s", took.Round(100*time.Millisecond), sessionTTL)
	}

	time.Sleep(2 * time.Second)
	stop()
	before, grace, outage, after := h.acks(time.Time{}, down), h.acks(down, fenced), h.acks(fenced, up), h.acks(up, time.Now())
	t.Logf("acknowledgements: %d before etcd stopped, %d in the lease's TTL after, %d while the nodes were fenced, %d after it came back; produce errors: %s",
		before, grace, outage, after, h.failures())
	if before == 0 || after == 0 {
		t.Errorf("the load did not run: %d acknowledged before etcd stopped, %d after it came back", before, after)
	}
	if outage != 0 {
		t.Errorf("%d records acknowledged between the lease's TTL after etcd stopped and its return: a node led partitions with no lease", outage)
	}
	for id := range c.nodes {
		if lost := c.metric(id, "strata_cluster_sessions_lost_total"); lost < 1 {
			t.Errorf("node %d reports %v sessions lost; etcd's outage outlasted its lease", id, lost)
		}
	}
	c.readAll(h, 3, "load")
	t.Logf("%d records acknowledged, all read back once", h.check(t))
}

// partitionWatch follows every write of the cluster's partition records in
// etcd, the way an operator's `etcdctl watch --prefix` would, and notes
// any that moves a partition's epoch backwards or keeps it: every write is
// a leader change, which bumps it.
type partitionWatch struct {
	mu     sync.Mutex
	epochs map[string][2]int32 // key: last leader and epoch
	writes map[string]int
	bad    []string
	cancel context.CancelFunc
	done   chan struct{}
}

func watchPartitions(t *testing.T, endpoint, prefix string) *partitionWatch {
	t.Helper()
	cli, err := clientv3.New(clientv3.Config{Endpoints: []string{endpoint}, DialTimeout: 5 * time.Second, Logger: zap.NewNop()})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { cli.Close() })
	ctx, cancel := context.WithCancel(context.Background())
	w := &partitionWatch{epochs: map[string][2]int32{}, writes: map[string]int{}, cancel: cancel, done: make(chan struct{})}
	resp, err := cli.Get(ctx, prefix, clientv3.WithPrefix())
	if err != nil {
		t.Fatal(err)
	}
	for _, kv := range resp.Kvs {
		w.put(string(kv.Key), kv.Value)
	}
	ch := cli.Watch(ctx, prefix, clientv3.WithPrefix(), clientv3.WithRev(resp.Header.Revision+1))
	go func() {
		defer close(w.done)
		for wr := range ch {
			for _, ev := range wr.Events {
				if ev.Type == clientv3.EventTypePut {
					w.put(string(ev.Kv.Key), ev.Kv.Value)
				}
			}
		}
	}()
	return w
}

func (w *partitionWatch) put(key string, val []byte) {
	var p struct {
		Leader, Epoch int32
	}
	w.mu.Lock()
	defer w.mu.Unlock()
	if err := json.Unmarshal(val, &p); err != nil {
		w.bad = append(w.bad, key+": "+err.Error())
		return
	}
	// A write that keeps the epoch may only change the plan for the next
	// segment, never the leader.
	if last, ok := w.epochs[key]; ok && (p.Epoch < last[1] || p.Epoch == last[1] && p.Leader != last[0]) {
		w.bad = append(w.bad, key+": leader "+itoa(last[0])+" epoch "+itoa(last[1])+" then leader "+itoa(p.Leader)+" epoch "+itoa(p.Epoch))
	}
	w.epochs[key] = [2]int32{p.Leader, p.Epoch}
	w.writes[key]++
}

func (w *partitionWatch) stop() ([]string, map[string]int) {
	w.cancel()
	<-w.done
	w.mu.Lock()
	defer w.mu.Unlock()
	return w.bad, w.writes
}

func itoa(i int32) string { return strconv.Itoa(int(i)) }

func pad(p int32) string { return fmt.Sprintf("%010d", p) }

// The controller is paused (SIGSTOP) past its lease: another node becomes
// controller and makes the paused node's partitions leaderless (replication
// factor 1: nobody else has their data), and places a topic created
// meanwhile. Resumed (SIGCONT), the old controller finds its term over: no
// record it could still have planned reaches etcd (every partition's epoch
// only grows, write after write), it registers again, and leads its
// partitions again at a higher epoch with nothing acknowledged lost.
func TestPausedControllerIsFenced(t *testing.T) {
	c := newCluster(t, 3)
	createTopic(t, c.client(1), "paused", 6)
	c.waitHealthy("paused")
	w := watchPartitions(t, c.etcd, c.pfx+"/partitions/")
	old := c.controller(1, func(id int32) bool { return id > 0 })
	other := int32(1)
	if old == 1 {
		other = 2
	}
	leaders, epochs := c.epochs(other, "paused")
	var theirs []int32
	for p, l := range leaders {
		if l == old {
			theirs = append(theirs, p)
		}
	}
	if len(theirs) == 0 {
		t.Fatalf("the controller, node %d, leads none of %v: the test would prove nothing", old, leaders)
	}
	h := newHistory()
	stop := c.startLoad(h, "paused", sixParts, 200, other)
	defer stop()
	time.Sleep(time.Second)

	c.nodes[old].Signal(syscall.SIGSTOP)
	defer c.nodes[old].Signal(syscall.SIGCONT) // before the load's last flush, if the test fails early
	paused := time.Now()
	// A topic created now is the paused controller's to place when it
	// wakes up, if its view tells it before its term's end does. Asked of
	// node `other` directly: a Kafka client sends CreateTopics to the
	// controller, and the paused one answers nothing until its client's
	// request times out.
	createTopicAt(t, c.client(other), other, "while-paused", 3)
	next := c.controller(other, func(id int32) bool { return id > 0 && id != old })
	c.leaders(other, "paused", func(brokers int, l []int32) bool {
		for _, p := range theirs {
			if l[p] != -1 {
				return false
			}
		}
		return brokers == 2
	})
	if l := c.leaders(other, "while-paused", allLed); slices.Contains(l, old) {
		t.Errorf("a topic created while node %d was paused is led by it: %v", old, l)
	}
	t.Logf("controller %d paused; %d elected and node %d's partitions %v leaderless, as the test saw them %s after the pause (session TTL %s)",
		old, next, old, theirs, time.Since(paused).Round(100*time.Millisecond), sessionTTL)
	time.Sleep(time.Second)
	c.nodes[old].Signal(syscall.SIGCONT)

	c.waitHealthy("paused")
	nowLeaders, nowEpochs := c.epochs(old, "paused")
	for _, p := range theirs {
		if nowLeaders[p] != old || nowEpochs[p] < epochs[p]+2 {
			t.Errorf("partition %d: led by %d at epoch %d after the pause, was %d at %d; want node %d again at epoch >= %d (leaderless, then back)",
				p, nowLeaders[p], nowEpochs[p], leaders[p], epochs[p], old, epochs[p]+2)
		}
	}
	for p, l := range leaders {
		if !slices.Contains(theirs, p) && (nowLeaders[p] != l || nowEpochs[p] != epochs[p]) {
			t.Errorf("partition %d of a live node moved: leader %d epoch %d, was %d epoch %d", p, nowLeaders[p], nowEpochs[p], l, epochs[p])
		}
	}
	if ctl := c.controller(old, func(id int32) bool { return id > 0 }); ctl == old {
		t.Errorf("the resumed node %d is controller again: its old term should have ended and node %d's go on", old, next)
	}
	time.Sleep(time.Second)
	stop()
	c.readAll(h, old, "paused")
	n := h.check(t)

	bad, writes := w.stop()
	for _, b := range bad {
		t.Errorf("a partition record went backwards: %s", b)
	}
	for _, p := range theirs {
		if k := c.pfx + "/partitions/paused/" + pad(p); writes[k] < 3 {
			t.Errorf("%s written %d times; want placed, leaderless, back", k, writes[k])
		}
	}
	t.Logf("%d records acknowledged, all read back once; the resumed node counts %v sessions lost and %v placement writes refused as deposed, %v as conflicts",
		n, c.metric(old, "strata_cluster_sessions_lost_total"),
		c.metric(old, `strata_cluster_placement_refused_total{reason="deposed"}`),
		c.metric(old, `strata_cluster_placement_refused_total{reason="conflict"}`))
	if lost := c.metric(old, "strata_cluster_sessions_lost_total"); lost < 1 {
		t.Errorf("the resumed node reports %v sessions lost; its lease expired while it was paused", lost)
	}
}

// createTopicAt sends CreateTopics to node id itself, whoever the
// controller is: a strata node creates topics from any node.
func createTopicAt(t *testing.T, cl *kgo.Client, id int32, topic string, partitions int32) {
	t.Helper()
	req := kmsg.NewPtrCreateTopicsRequest()
	rt := kmsg.NewCreateTopicsRequestTopic()
	rt.Topic, rt.NumPartitions, rt.ReplicationFactor = topic, partitions, 1
	req.Topics = append(req.Topics, rt)
	req.TimeoutMillis = 10000
	ctx, cancel := context.WithTimeout(context.Background(), 15*time.Second)
	defer cancel()
	resp, err := req.RequestWith(ctx, cl.Broker(int(id)))
	if err == nil && len(resp.Topics) == 1 {
		err = kerr.ErrorForCode(resp.Topics[0].ErrorCode)
	}
	if err != nil {
		t.Fatalf("create topic %s at node %d: %v", topic, id, err)
	}
}
