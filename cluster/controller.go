package cluster

import (
	"context"
	"encoding/json"
	"errors"
	"strings"
	"time"

	clientv3 "go.etcd.io/etcd/client/v3"
)

// The controller is whichever Member won the election on
// {prefix}/controller. Its term is its election key's creation revision,
// and every placement write is a transaction that holds only if that key
// still exists with that revision: a controller that was paused past its
// lease, and whose key etcd deleted, has every late write refused
// (ErrDeposed), whatever it believes.

// revs are the revisions a placement was planned from: each write holds
// only if its partition and its topic are still as the plan saw them.
type revs struct {
	topics     map[string]int64         // creation revisions
	partitions map[TopicPartition]int64 // modification revisions
}

// maxWritesPerTxn keeps a transaction's compares and puts under etcd's
// --max-txn-ops (128 by default).
const maxWritesPerTxn = 32

// control places partitions while t is this node's term: it plans from
// the view, writes, and plans again at the view's next change.
func (m *Member) control(ctx context.Context, t term) error {
	// The view may lag what the previous controller wrote: a plan from it
	// costs a refused write (each is a compare-and-swap) and a new plan
	// when the view catches up, never a wrong record.
	if err := m.catchUp(ctx, t); err != nil {
		return err
	}
	var lastProblems string
	termCtx, endTerm := context.WithCancel(ctx)
	defer endTerm()
	go m.clearDeletions(termCtx, t)
	for {
		m.mu.Lock()
		changed := m.changed
		if m.view.revs[rangeController] >= t.rev {
			if _, ok := m.view.controllers[t.key]; !ok {
				m.mu.Unlock()
				return ErrDeposed
			}
		}
		st, rv := m.placementStateLocked()
		m.mu.Unlock()

		d := Place(st)
		if p := strings.Join(d.Problems, "; "); p != lastProblems {
			for _, problem := range d.Problems {
				m.log.Warn("cluster: cannot place", "problem", problem)
			}
			lastProblems = p
		}
		if len(d.Writes) > 0 {
			rev, err := m.writePlacement(ctx, t, d.Writes, rv)
			switch {
			case err == nil:
				m.logWrites(d.Writes)
				_ = m.waitRange(ctx, rangePartitions, rev)
				continue
			case errors.Is(err, ErrDeposed):
				return err
			case errors.Is(err, errConflict):
				m.log.Debug("cluster: placement planned from an old view; planning again", "err", err)
			default:
				if ctx.Err() != nil {
					return ctx.Err()
				}
				m.log.Warn("cluster: placement write failed; retrying", "err", err)
				sleep(ctx, 500*time.Millisecond)
				continue
			}
		}
		select {
		case <-changed:
		case <-ctx.Done():
			return ctx.Err()
		}
	}
}

// catchUp waits until the view knows the nodes etcd knows at the start of
// t. The election's end and a dead node's registration going are one
// revision (the node's lease held both keys), but the view's watch of the
// nodes may not have delivered it when the campaign returns: a plan made
// then counts the dead node live and places new partitions on it, where
// with one replica they stay leaderless until it returns. The nodes are
// read once, and the view has caught up when its nodes range reached
// that revision or names the same nodes. (A progress notification would
// say so without the read, but etcd before 3.4.25 sends one ahead of the
// events it covers.)
func (m *Member) catchUp(ctx context.Context, t term) error {
	var resp *clientv3.TxnResponse
	for {
		var err error
		resp, err = m.cli.Txn(ctx).Then(
			clientv3.OpGet(t.key, clientv3.WithKeysOnly()),
			clientv3.OpGet(m.keys.nodes(), clientv3.WithPrefix(), clientv3.WithKeysOnly())).Commit()
		if err == nil {
			break
		}
		if ctx.Err() != nil {
			return ctx.Err()
		}
		m.log.Warn("cluster: reading the nodes a term starts with failed; retrying", "err", err)
		sleep(ctx, 500*time.Millisecond)
	}
	if len(resp.Responses[0].GetResponseRange().Kvs) == 0 {
		return ErrDeposed
	}
	live := map[int32]bool{}
	for _, kv := range resp.Responses[1].GetResponseRange().Kvs {
		if id, err := m.keys.nodeID(string(kv.Key)); err == nil {
			live[id] = true
		}
	}
	for {
		m.mu.Lock()
		changed, same := m.changed, len(m.view.nodes) == len(live)
		for id := range m.view.nodes {
			same = same && live[id]
		}
		caught := same || m.view.revs[rangeNodes] >= resp.Header.Revision
		m.mu.Unlock()
		if caught {
			return nil
		}
		select {
		case <-changed:
		case <-ctx.Done():
			return ctx.Err()
		}
	}
}

func (m *Member) placementStateLocked() (State, revs) {
	st := State{Topics: make(map[string]Topic, len(m.view.topics)),
		Partitions: make(map[TopicPartition]Partition, len(m.view.partitions)),
		Defaults:   m.cfg.TopicDefaults, Candidates: map[TopicPartition][]Candidate{}}
	for tp, cs := range m.view.candidates {
		for _, c := range cs {
			st.Candidates[tp] = append(st.Candidates[tp], c)
		}
	}
	rv := revs{topics: map[string]int64{}, partitions: map[TopicPartition]int64{}}
	for id, n := range m.view.nodes {
		st.Live = append(st.Live, NodeLoad{ID: id, Bytes: m.view.loads[id], Dir: n.Dir, Damaged: n.Damaged})
	}
	for name, t := range m.view.topics {
		st.Topics[name] = t.Topic
		rv.topics[name] = t.createRev
	}
	for tp, p := range m.view.partitions {
		st.Partitions[tp] = p.Partition.clone()
		rv.partitions[tp] = p.modRev
	}
	return st, rv
}

// writePlacement writes ws in transactions fenced by t, each write only if
// its partition record (none for a new one) and its topic are still those
// rv saw. It returns the revision of the last transaction.
func (m *Member) writePlacement(ctx context.Context, t term, ws []Write, rv revs) (int64, error) {
	var rev int64
	for len(ws) > 0 {
		batch := ws[:min(len(ws), maxWritesPerTxn)]
		ws = ws[len(batch):]
		cmps := []clientv3.Cmp{clientv3.Compare(clientv3.CreateRevision(t.key), "=", t.rev)}
		topics := map[string]bool{}
		var puts []clientv3.Op
		for _, w := range batch {
			p := w.Partition
			if !topics[p.Topic] {
				topics[p.Topic] = true
				cmps = append(cmps, clientv3.Compare(clientv3.CreateRevision(m.keys.topic(p.Topic)), "=", rv.topics[p.Topic]))
			}
			key := m.keys.partition(p.Topic, p.Partition)
			cmps = append(cmps, clientv3.Compare(clientv3.ModRevision(key), "=", rv.partitions[TopicPartition{p.Topic, p.Partition}]))
			val, _ := json.Marshal(p)
			puts = append(puts, clientv3.OpPut(key, string(val)))
			if w.Prev != nil && w.Prev.Epoch != p.Epoch {
				// The reports of a quorum election are for the epoch that
				// ends here: none may count in the next one.
				puts = append(puts, clientv3.OpDelete(m.keys.partitionCandidates(p.Topic, p.Partition), clientv3.WithPrefix()))
			}
		}
		resp, err := m.cli.Txn(ctx).If(cmps...).Then(puts...).Else(clientv3.OpGet(t.key)).Commit()
		if err != nil {
			return rev, err
		}
		if !resp.Succeeded {
			if kvs := resp.Responses[0].GetResponseRange().Kvs; len(kvs) == 0 || kvs[0].CreateRevision != t.rev {
				m.metrics.refused.WithLabelValues("deposed").Inc()
				m.log.Warn("cluster: placement write refused: this node's controller term is over", "term", t.rev)
				return rev, ErrDeposed
			}
			m.metrics.refused.WithLabelValues("conflict").Inc()
			return rev, errConflict
		}
		m.metrics.writes.Add(float64(len(batch)))
		rev = resp.Header.Revision
	}
	return rev, nil
}

// logWrites tells of every leader change; a new topic's partitions are
// told in one line.
func (m *Member) logWrites(ws []Write) {
	placed := map[string]int{}
	for _, w := range ws {
		if w.Prev == nil {
			placed[w.Partition.Topic]++
			continue
		}
		m.log.Info("cluster: leader changed", "partition", TopicPartition{w.Partition.Topic, w.Partition.Partition}.String(),
			"leader", w.Partition.Leader, "epoch", w.Partition.Epoch, "was", w.Prev.Leader, "why", w.Why)
	}
	for topic, n := range placed {
		m.log.Info("cluster: topic placed", "topic", topic, "partitions", n)
	}
}
