package e2e

import (
	"context"
	"encoding/binary"
	"fmt"
	"net"
	"slices"
	"strconv"
	"testing"
	"time"

	"github.com/twmb/franz-go/pkg/kerr"
	"github.com/twmb/franz-go/pkg/kgo"
	"github.com/twmb/franz-go/pkg/kmsg"

	"strata/internal/testsvc"
	"strata/peer"
)

// newProxiedCluster starts n nodes whose peers reach each one's Kafka
// listener through a proxy of its own (node.advertised_kafka_addr), and
// each of which reaches etcd through a proxy of its own, so a test can cut
// a node off from its peers or from etcd, either way or both. The test's
// own clients dial the nodes directly (the dialer maps each advertised
// address to the node behind it): a cut leaves them in touch with every
// node, as clients on the leader's side of a partition would be.
func newProxiedCluster(t *testing.T, n int, sets ...string) *cluster {
	etcd := testsvc.StartEtcd(t)
	c := &cluster{t: t, etcd: etcd, pfx: "/" + testsvc.UniquePrefix(t), nodes: map[int32]*testsvc.Process{}, sets: sets,
		kproxy: map[int32]*netProxy{}, eproxy: map[int32]*netProxy{}}
	for id := int32(1); id <= int32(n); id++ {
		c.kproxy[id], c.eproxy[id] = newNetProxy(t), newNetProxy(t)
		c.eproxy[id].setTarget(etcd)
	}
	c.opts = append(c.opts, kgo.Dialer(func(ctx context.Context, network, host string) (net.Conn, error) {
		for id, p := range c.kproxy {
			if p.addr() == host {
				host = c.nodes[id].Kafka
				break
			}
		}
		var d net.Dialer
		return d.DialContext(ctx, network, host)
	}))
	for id := int32(1); id <= int32(n); id++ {
		sets := append([]string{"cluster.etcd_endpoints=" + c.eproxy[id].addr(), "cluster.etcd_prefix=" + c.pfx,
			"cluster.session_ttl=" + sessionTTL.String(), "node.id=" + strconv.Itoa(int(id)), "tiering.enabled=false",
			"kafka.auto_create_topics=false", "node.advertised_kafka_addr=" + c.kproxy[id].addr()}, c.sets...)
		c.nodes[id] = testsvc.StartProcess(t, strataBin, t.TempDir(), sets...)
		c.kproxy[id].setTarget(c.nodes[id].Kafka)
	}
	return c
}

// restart starts node id again on its data folder (behind its proxy, if
// it has one: it listens on a new port).
func (c *cluster) restart(id int32) {
	c.t.Helper()
	c.nodes[id].Restart()
	if p := c.kproxy[id]; p != nil {
		p.setTarget(c.nodes[id].Kafka)
	}
}

// replicas asks node `from` for each partition of topic's replica set.
func (c *cluster) replicas(from int32, topic string) map[int32][]int32 {
	c.t.Helper()
	md, err := c.metadata(c.client(from), topic)
	if err != nil || len(md.Topics) != 1 {
		c.t.Fatalf("metadata of %s from node %d: %v", topic, from, err)
	}
	out := map[int32][]int32{}
	for _, p := range md.Topics[0].Partitions {
		out[p.Partition] = sorted32(p.Replicas)
	}
	return out
}

func sorted32(s []int32) []int32 {
	s = slices.Clone(s)
	slices.Sort(s)
	return s
}

// newLeader waits until node `from` names a live leader of topic's
// partition p other than old, and returns it.
func (c *cluster) newLeader(from int32, topic string, p, old int32) int32 {
	c.t.Helper()
	deadline := time.Now().Add(30 * time.Second)
	for {
		leaders, _ := c.isrs(from, topic)
		if l := leaders[p]; l >= 0 && l != old {
			return l
		}
		if time.Now().After(deadline) {
			c.t.Fatalf("%s-%d: still led by %v 30s on; want a leader other than %d", topic, p, leaders, old)
		}
		time.Sleep(100 * time.Millisecond)
	}
}

// copyOf reads node id's own copy of topic's partition p, up to that
// node's high watermark: a Fetch from a replica (another node's id, with
// that node's peer proof) is answered from the receiving node's log,
// whoever leads.
func (c *cluster) copyOf(id, as int32, topic string, p int32) (recs []readRec, hw int64, err error) {
	secret := c.peerSecret()
	cl := c.client(id)
	defer cl.Close()
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
	defer cancel()
	for from := int64(0); ; {
		req := kmsg.NewPtrFetchRequest()
		req.ReplicaID, req.ReplicaState.ID = as, as
		req.MaxBytes, req.MaxWaitMillis = 8<<20, 0
		rt := kmsg.NewFetchRequestTopic()
		rt.Topic = topic
		rp := kmsg.NewFetchRequestTopicPartition()
		rp.Partition, rp.FetchOffset, rp.PartitionMaxBytes, rp.CurrentLeaderEpoch = p, from, 8<<20, -1
		rt.Partitions = append(rt.Partitions, rp)
		req.Topics = append(req.Topics, rt)
		peer.Prove(req, secret, as, id, time.Now())
		resp, err := req.RequestWith(ctx, cl.Broker(int(id)))
		if err != nil {
			return nil, 0, err
		}
		if len(resp.Topics) != 1 || len(resp.Topics[0].Partitions) != 1 {
			return nil, 0, fmt.Errorf("node %d answered a fetch of %s-%d with %d topics", id, topic, p, len(resp.Topics))
		}
		part := resp.Topics[0].Partitions[0]
		if err := kerr.ErrorForCode(part.ErrorCode); err != nil {
			return nil, 0, fmt.Errorf("node %d's copy of %s-%d at %d: %w", id, topic, p, from, err)
		}
		hw = part.HighWatermark
		got, err := decodeBatches(part.RecordBatches, p)
		if err != nil {
			return nil, 0, fmt.Errorf("node %d's copy of %s-%d: %w", id, topic, p, err)
		}
		for _, r := range got {
			if r.offset >= from && r.offset < hw {
				recs = append(recs, r)
			}
		}
		if len(got) == 0 || from >= hw {
			return recs, hw, nil
		}
		from = got[len(got)-1].offset + 1
		if from >= hw {
			return recs, hw, nil
		}
	}
}

// decodeBatches reads the records of uncompressed v2 record batches (what
// strata serves).
func decodeBatches(raw []byte, p int32) ([]readRec, error) {
	var out []readRec
	for len(raw) >= 12 {
		n := 12 + int(int32(binary.BigEndian.Uint32(raw[8:])))
		if n > len(raw) {
			break // a partial batch at the end of max_bytes
		}
		var b kmsg.RecordBatch
		if err := b.ReadFrom(raw[:n]); err != nil {
			return nil, err
		}
		raw = raw[n:]
		if b.Attributes&7 != 0 {
			return nil, fmt.Errorf("a batch compressed with codec %d", b.Attributes&7)
		}
		rs := b.Records
		for i := 0; i < int(b.NumRecords); i++ {
			l, k := binary.Varint(rs)
			if k <= 0 || int(l)+k > len(rs) {
				return nil, fmt.Errorf("record %d of the batch at %d is cut", i, b.FirstOffset)
			}
			var r kmsg.Record
			if err := r.ReadFrom(rs[:k+int(l)]); err != nil {
				return nil, err
			}
			rs = rs[k+int(l):]
			out = append(out, readRec{at{p, b.FirstOffset + int64(r.OffsetDelta)}, string(r.Value)})
		}
	}
	return out, nil
}

// sameCopies waits until each live replica of each of topic's partitions
// holds the partition up to the leader's high watermark, then checks that
// they hold the same records at the same offsets (and adds what each holds
// to h, whose check then finds any record that is at two offsets or any
// two records at one offset).
func (c *cluster) sameCopies(h *history, topic string, live []int32) {
	c.t.Helper()
	reps := c.replicas(live[0], topic)
	deadline := time.Now().Add(30 * time.Second)
	for p, nodes := range reps {
		var holders []int32
		for _, id := range nodes {
			if slices.Contains(live, id) {
				holders = append(holders, id)
			}
		}
		if len(holders) < 2 {
			c.t.Fatalf("%s-%d: live replicas %v of %v: nothing to compare", topic, p, holders, nodes)
		}
		for {
			copies := map[int32][]readRec{}
			hws := map[int32]int64{}
			var errs []error
			for _, id := range holders {
				as := holders[0]
				if as == id {
					as = holders[1]
				}
				recs, hw, err := c.copyOf(id, as, topic, p)
				if err != nil {
					errs = append(errs, err)
					continue
				}
				copies[id], hws[id] = recs, hw
			}
			same := len(errs) == 0
			for _, id := range holders[1:] {
				same = same && hws[id] == hws[holders[0]] && slices.Equal(copies[id], copies[holders[0]])
			}
			if same {
				for _, id := range holders {
					for _, r := range copies[id] {
						h.readBack(r.value, r.partition, r.offset)
					}
				}
				c.t.Logf("%s-%d: nodes %v hold the same %d records", topic, p, holders, len(copies[holders[0]]))
				break
			}
			if time.Now().After(deadline) {
				for _, id := range holders { // the checker then names what differs
					for _, r := range copies[id] {
						h.readBack(r.value, r.partition, r.offset)
					}
				}
				var lens []string
				for _, id := range holders {
					lens = append(lens, fmt.Sprintf("node %d: %d records to high watermark %d", id, len(copies[id]), hws[id]))
				}
				c.t.Errorf("%s-%d: the replicas differ 30s after the load stopped: %v; errors %v", topic, p, lens, errs)
				break
			}
			time.Sleep(300 * time.Millisecond)
		}
	}
}

// rolledCopies starts three nodes whose segments roll every 4 KiB and
// whose followers leave the ISR after a second (and sets), makes topic with
// one partition on all three, and produces 800 acks=all records through
// node 1 in eight batches apart, so rolls fall between them and each
// replica holds sealed segments. The history holds the acknowledged ones.
func rolledCopies(t *testing.T, topic string, sets ...string) (*cluster, *history) {
	t.Helper()
	c := newClusterWith(t, 3, append([]string{"cluster.replica_lag_time_max=1s", "segment.max_bytes=4KiB", "segment.roll_check_interval=5"}, sets...)...)
	replicatedTopic(t, c, topic, 1)
	h := newHistory()
	for round := range 8 {
		for _, v := range c.produce(1, topic, []int32{0}, 100, "acked"+strconv.Itoa(round))[0] {
			h.ack(v, -1, -1)
		}
	}
	return c, h
}

// waitAlone waits, after every node was killed and node id restarted
// alone, until id sees itself the only live node and leads none of topic's
// partitions nor is in their ISRs: what a node that lost or damaged its
// log must do until a node that kept its log is back. Past 30 s it fails
// the test and returns, so the test goes on to show what follows.
func (c *cluster) waitAlone(id int32, topic, why string) {
	c.t.Helper()
	deadline := time.Now().Add(30 * time.Second)
	for {
		md, err := c.metadata(c.client(id), topic)
		if err == nil && len(md.Brokers) == 1 && len(md.Topics) == 1 {
			ls, isr := c.isrs(id, topic)
			settled := true
			for p, l := range ls {
				settled = settled && l == -1 && !slices.Contains(isr[p], id)
			}
			if settled {
				c.t.Logf("node %d alone: leaders %v, ISRs %v", id, ls, isr)
				return
			}
		}
		if time.Now().After(deadline) {
			ls, isr := c.isrs(id, topic)
			c.t.Errorf("node %d alone %s: leaders %v, ISRs %v: want every partition leaderless, without it in the ISR", id, why, ls, isr)
			return
		}
		time.Sleep(100 * time.Millisecond)
	}
}
