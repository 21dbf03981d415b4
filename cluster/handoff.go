package cluster

import (
	"context"
	"encoding/json"
	"fmt"

	clientv3 "go.etcd.io/etcd/client/v3"

	"strata/engine/store"
)

// A partition moves to another node only at a roll, and only its next
// segment moves: the controller chooses the node (Partition.Next, written
// by planRolls), and the leader, when its engine rolls the partition,
// stops appending, seals what it has and writes the record that makes the
// chosen node leader from its log end on (HandOff). The leader writes it
// because only it knows that end; the decision is the controller's, and
// the write holds only if the record is still the one that carried it.

// The fence is the partition's append gate (Config.Gates): an append holds
// it shared from its leadership check (Leads) to its end; a handoff holds it
// to mark the partition fenced, so no append is in flight and none that
// follows finds this node its leader.

// HandOff hands partition p of topic to the node the controller chose for
// its next segment, if it chose one and this node leads it: it fences the
// partition (no append from here on), seals the local log with seal (which
// returns the log end: the first offset the next leader writes), and
// writes the record that makes that node leader from there, at the next
// epoch. It does nothing when no handoff is planned. If the record changed
// meanwhile (the controller chose again, or the chosen node died) or this
// node's lease is gone, the write is refused and the partition is this
// node's again; the sealed segment stays sealed, which costs nothing.
func (m *Member) HandOff(ctx context.Context, topic string, p int32, seal func(context.Context) (end int64, err error)) error {
	tp := TopicPartition{topic, p}
	m.mu.Lock()
	rec, ok := m.view.partitions[tp]
	self, live := m.cfg.Self.ID, m.live
	m.mu.Unlock()
	if !ok || !live || rec.Leader != self || rec.Next == 0 {
		return nil
	}
	release := m.cfg.Gates.Change(store.ShardName(topic, p))
	m.mu.Lock()
	m.fenced[tp] = true
	m.mu.Unlock()
	release()
	done := false
	defer func() {
		if !done {
			m.unfence(tp)
		}
	}()

	end, err := seal(ctx)
	if err != nil {
		return fmt.Errorf("cluster: handing %s over: sealing its log: %w", tp, err)
	}
	next, ok := HandOff(rec.Partition, end)
	if !ok {
		return nil
	}
	val, _ := json.Marshal(next)
	key := m.keys.partition(topic, p)
	lease := m.lease()
	resp, err := m.cli.Txn(ctx).If(
		clientv3.Compare(clientv3.ModRevision(key), "=", rec.modRev),
		clientv3.Compare(clientv3.LeaseValue(m.keys.node(self)), "=", lease),
		clientv3.Compare(clientv3.CreateRevision(m.keys.node(next.Leader)), ">", 0),
	).Then(clientv3.OpPut(key, string(val))).Commit()
	if err != nil {
		// The write may have happened: stay fenced until the record says
		// which (a fenced partition only refuses appends, and the view
		// tells once etcd answers).
		done = true
		go m.settleHandOff(m.bg, tp, next)
		return fmt.Errorf("cluster: handing %s over to node %d: %w", tp, next.Leader, err)
	}
	if !resp.Succeeded {
		m.metrics.handoffs.WithLabelValues("refused").Inc()
		m.log.Info("cluster: handoff refused: the partition's record changed, or this node's lease or the chosen node's ended; it stays here",
			"partition", tp.String(), "to", next.Leader)
		return nil
	}
	done = true
	m.metrics.handoffs.WithLabelValues("done").Inc()
	m.log.Info("cluster: partition handed over at a roll", "partition", tp.String(), "to", next.Leader, "from_offset", end, "epoch", next.Epoch)
	_ = m.waitRange(ctx, rangePartitions, resp.Header.Revision)
	m.unfence(tp)
	return nil
}

// settleHandOff lifts the fence of a handoff whose write's outcome is
// unknown once the record shows it did not happen.
func (m *Member) settleHandOff(ctx context.Context, tp TopicPartition, next Partition) {
	for {
		changed := m.Changed()
		m.mu.Lock()
		rec, ok := m.view.partitions[tp]
		m.mu.Unlock()
		if !ok || rec.Leader != m.cfg.Self.ID || rec.Epoch != next.Epoch-1 || rec.Next != next.Leader {
			// Handed over, or changed by the controller: either way the
			// record, not the fence, says who leads.
			m.unfence(tp)
			return
		}
		// Still the record the handoff read: try it again on etcd's answer.
		gctx, cancel := context.WithTimeout(ctx, m.cfg.SessionTTL)
		resp, err := m.cli.Get(gctx, m.keys.partition(tp.Topic, tp.Partition))
		cancel()
		if err == nil && len(resp.Kvs) == 1 && resp.Kvs[0].ModRevision == rec.modRev {
			m.unfence(tp) // the write never happened
			return
		}
		select {
		case <-changed:
		case <-ctx.Done():
			return
		}
	}
}

func (m *Member) unfence(tp TopicPartition) {
	m.mu.Lock()
	delete(m.fenced, tp)
	m.notifyLocked()
	m.mu.Unlock()
}
