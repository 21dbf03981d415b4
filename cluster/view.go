package cluster

import (
	"context"
	"encoding/json"
	"fmt"
	"strconv"
	"strings"
	"time"

	"go.etcd.io/etcd/api/v3/mvccpb"
	clientv3 "go.etcd.io/etcd/client/v3"
)

// The view is the Member's copy of the cluster's keys: listed at one
// revision, then kept by watches that start at the next one, so no change
// falls between. A watch that is compacted away or breaks makes the Member
// list again. The four ranges are watched apart so the catalog's and other
// keys under the prefix never reach this loop.

type rangeID int

const (
	rangeNodes rangeID = iota
	rangeController
	rangeTopics
	rangePartitions
	rangeLoads
	rangeDeletions
	rangeCandidates
	numRanges
)

type topicRec struct {
	Topic
	createRev int64
}

type partitionRec struct {
	Partition
	modRev int64
}

type controllerRec struct {
	id        int32
	createRev int64
}

type view struct {
	nodes       map[int32]Node
	nodeLeases  map[int32]int64          // the lease each node is registered under
	controllers map[string]controllerRec // election keys; the oldest is the controller
	topics      map[string]topicRec
	partitions  map[TopicPartition]partitionRec
	loads       map[int32]int64 // bytes each node keeps, as it last reported
	deletions   map[string]deletionRec
	candidates  map[TopicPartition]map[int32]Candidate
	// revs holds, per range, the revision up to which it is known.
	revs [numRanges]int64
}

func newView() view {
	return view{nodes: map[int32]Node{}, nodeLeases: map[int32]int64{}, controllers: map[string]controllerRec{},
		topics: map[string]topicRec{}, partitions: map[TopicPartition]partitionRec{}, loads: map[int32]int64{}, deletions: map[string]deletionRec{},
		candidates: map[TopicPartition]map[int32]Candidate{}}
}

func (v *view) controller() int32 {
	best := controllerRec{id: -1}
	for _, c := range v.controllers {
		if best.createRev == 0 || c.createRev < best.createRev {
			best = c
		}
	}
	return best.id
}

func (k keys) ranges() [numRanges]string {
	return [numRanges]string{k.nodes(), k.controller() + "/", k.topics(), k.partitions(), k.loads(), k.deletions(), k.candidates()}
}

// apply folds one key's new value (nil: deleted) into the view.
func (v *view) apply(k keys, r rangeID, kv *mvccpb.KeyValue, deleted bool) error {
	key := string(kv.Key)
	switch r {
	case rangeNodes:
		id, err := k.nodeID(key)
		if err != nil {
			return fmt.Errorf("node key %q: %v", key, err)
		}
		if deleted {
			delete(v.nodes, id)
			delete(v.nodeLeases, id)
			return nil
		}
		var n Node
		if err := json.Unmarshal(kv.Value, &n); err != nil {
			return fmt.Errorf("node key %q: %v", key, err)
		}
		v.nodes[id] = n
		v.nodeLeases[id] = kv.Lease
	case rangeController:
		if deleted {
			delete(v.controllers, key)
			return nil
		}
		id, err := strconv.ParseInt(string(kv.Value), 10, 32)
		if err != nil {
			return fmt.Errorf("controller key %q: %v", key, err)
		}
		v.controllers[key] = controllerRec{id: int32(id), createRev: kv.CreateRevision}
	case rangeTopics:
		name := strings.TrimPrefix(key, k.topics())
		if deleted {
			delete(v.topics, name)
			return nil
		}
		var t Topic
		if err := json.Unmarshal(kv.Value, &t); err != nil {
			return fmt.Errorf("topic key %q: %v", key, err)
		}
		v.topics[name] = topicRec{Topic: t, createRev: kv.CreateRevision}
	case rangePartitions:
		topic, num, ok := strings.Cut(strings.TrimPrefix(key, k.partitions()), "/")
		p, err := strconv.ParseInt(num, 10, 32)
		if !ok || err != nil {
			return fmt.Errorf("partition key %q: not {topic}/{partition}", key)
		}
		tp := TopicPartition{topic, int32(p)}
		if deleted {
			delete(v.partitions, tp)
			return nil
		}
		var rec Partition
		if err := json.Unmarshal(kv.Value, &rec); err != nil {
			return fmt.Errorf("partition key %q: %v", key, err)
		}
		v.partitions[tp] = partitionRec{Partition: rec, modRev: kv.ModRevision}
	case rangeLoads:
		id, err := strconv.ParseInt(strings.TrimPrefix(key, k.loads()), 10, 32)
		if err != nil {
			return fmt.Errorf("load key %q: %v", key, err)
		}
		if deleted {
			delete(v.loads, int32(id))
			return nil
		}
		var l load
		if err := json.Unmarshal(kv.Value, &l); err != nil {
			return fmt.Errorf("load key %q: %v", key, err)
		}
		v.loads[int32(id)] = l.Bytes
	case rangeDeletions:
		name := strings.TrimPrefix(key, k.deletions())
		if deleted {
			delete(v.deletions, name)
			return nil
		}
		var d deletion
		if err := json.Unmarshal(kv.Value, &d); err != nil {
			return fmt.Errorf("deletion key %q: %v", key, err)
		}
		v.deletions[name] = deletionRec{deletion: d, modRev: kv.ModRevision}
	case rangeCandidates:
		parts := strings.Split(strings.TrimPrefix(key, k.candidates()), "/")
		if len(parts) != 3 {
			return fmt.Errorf("candidate key %q: not {topic}/{partition}/{node}", key)
		}
		p, perr := strconv.ParseInt(parts[1], 10, 32)
		node, nerr := strconv.ParseInt(parts[2], 10, 32)
		if perr != nil || nerr != nil {
			return fmt.Errorf("candidate key %q: not {topic}/{partition}/{node}", key)
		}
		tp := TopicPartition{parts[0], int32(p)}
		if deleted {
			delete(v.candidates[tp], int32(node))
			if len(v.candidates[tp]) == 0 {
				delete(v.candidates, tp)
			}
			return nil
		}
		var c Candidate
		if err := json.Unmarshal(kv.Value, &c); err != nil {
			return fmt.Errorf("candidate key %q: %v", key, err)
		}
		c.Node = int32(node)
		if v.candidates[tp] == nil {
			v.candidates[tp] = map[int32]Candidate{}
		}
		v.candidates[tp][c.Node] = c
	}
	return nil
}

// list reads the ranges at one revision and makes them the view.
func (m *Member) list(ctx context.Context) (int64, error) {
	ranges := m.keys.ranges()
	ops := make([]clientv3.Op, numRanges)
	for i, r := range ranges {
		ops[i] = clientv3.OpGet(r, clientv3.WithPrefix())
	}
	resp, err := m.cli.Txn(ctx).Then(ops...).Commit()
	if err != nil {
		return 0, err
	}
	v := newView()
	for i, r := range resp.Responses {
		for _, kv := range r.GetResponseRange().Kvs {
			if err := v.apply(m.keys, rangeID(i), kv, false); err != nil {
				m.log.Warn("cluster: skipping a key the view cannot read", "err", err)
			}
		}
		v.revs[i] = resp.Header.Revision
	}
	m.mu.Lock()
	m.view = v
	m.notifyLocked()
	m.mu.Unlock()
	return resp.Header.Revision, nil
}

// keepView lists and watches until ctx ends.
func (m *Member) keepView(ctx context.Context) {
	defer m.wg.Done()
	wait := 100 * time.Millisecond
	for ctx.Err() == nil {
		rev, err := m.list(ctx)
		if err == nil {
			wait = 100 * time.Millisecond
			err = m.watch(ctx, rev+1)
		}
		if ctx.Err() != nil {
			return
		}
		m.log.Warn("cluster: view lost its watch; listing again", "err", err, "in", wait)
		sleep(ctx, wait)
		wait = min(2*wait, 5*time.Second)
	}
}

type rangeResp struct {
	r    rangeID
	resp clientv3.WatchResponse
	ok   bool
}

// watch applies the ranges' changes from rev on, until a watch ends.
func (m *Member) watch(ctx context.Context, rev int64) error {
	wctx, cancel := context.WithCancel(clientv3.WithRequireLeader(ctx))
	defer cancel()
	merged := make(chan rangeResp)
	for i, r := range m.keys.ranges() {
		ch := m.cli.Watch(wctx, r, clientv3.WithPrefix(), clientv3.WithRev(rev))
		go func() {
			for {
				resp, ok := <-ch
				select {
				case merged <- rangeResp{rangeID(i), resp, ok}:
				case <-wctx.Done():
					return
				}
				if !ok {
					return
				}
			}
		}()
	}
	for {
		var rr rangeResp
		select {
		case rr = <-merged:
		case <-ctx.Done():
			return ctx.Err()
		}
		switch {
		case !rr.ok:
			return fmt.Errorf("watch of %s closed", m.keys.ranges()[rr.r])
		case rr.resp.CompactRevision != 0:
			return fmt.Errorf("watch of %s compacted at revision %d", m.keys.ranges()[rr.r], rr.resp.CompactRevision)
		case rr.resp.Err() != nil:
			return rr.resp.Err()
		}
		m.mu.Lock()
		for _, ev := range rr.resp.Events {
			if err := m.view.apply(m.keys, rr.r, ev.Kv, ev.Type == clientv3.EventTypeDelete); err != nil {
				m.log.Warn("cluster: skipping a key the view cannot read", "err", err)
			}
		}
		m.view.revs[rr.r] = max(m.view.revs[rr.r], rr.resp.Header.Revision)
		m.notifyLocked()
		m.mu.Unlock()
	}
}

// notifyLocked wakes whoever waits on Changed.
func (m *Member) notifyLocked() {
	close(m.changed)
	m.changed = make(chan struct{})
}

// waitRange returns once the view of range r is known up to rev.
func (m *Member) waitRange(ctx context.Context, r rangeID, rev int64) error {
	for {
		m.mu.Lock()
		ch, ok := m.changed, m.view.revs[r] >= rev
		m.mu.Unlock()
		if ok {
			return nil
		}
		select {
		case <-ch:
		case <-ctx.Done():
			return ctx.Err()
		}
	}
}
