package cluster

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"slices"

	clientv3 "go.etcd.io/etcd/client/v3"
)

// A partition's leader changes its ISR itself (replica.Leader proposes,
// the caller writes it here); the controller changes it only at a leader
// change or when a follower's node dies (placement.go). Both write the
// same record with a compare-and-swap on its mod revision, the partition
// epoch, so of two writers racing from one revision exactly one wins.

var (
	// ErrISRConflict: the partition record is no longer at the revision
	// the write was planned from; read the view again.
	ErrISRConflict = errors.New("cluster: the partition record changed since it was read")
	// ErrNotLeader: this node does not lead the partition at the epoch
	// given, or its lease is lost (then the error is an ErrNotLive too).
	ErrNotLeader = errors.New("cluster: this node is not the partition's leader")
	// ErrInvalidISR: an ISR without the leader, with a node outside the
	// replica set, or with a node twice.
	ErrInvalidISR = errors.New("cluster: invalid ISR")
)

// PartitionRev is where partition p of topic is served and the mod
// revision of its record in etcd: the partition epoch that ChangeISR's
// compare-and-swap is guarded by. False while it is not placed.
func (m *Member) PartitionRev(topic string, p int32) (Partition, int64, bool) {
	m.mu.Lock()
	defer m.mu.Unlock()
	rec, ok := m.view.partitions[TopicPartition{topic, p}]
	return rec.Partition.clone(), rec.modRev, ok
}

// ChangeISR writes isr into partition p's record, as its leader at
// leaderEpoch, and returns the record's new revision. The transaction
// holds only if the record is still at rev, this node's key is still
// under this node's current lease (a node paused or cut off past its
// lease is refused even if nobody wrote the record since), and the topic
// is the incarnation the record belongs to. Errors: ErrISRConflict (the
// record changed; the revision returned is its current one, 0 if it is
// gone), ErrNotLeader (not the leader at leaderEpoch, or the lease is
// lost), ErrInvalidISR.
func (m *Member) ChangeISR(ctx context.Context, topic string, p int32, leaderEpoch int32, isr []int32, rev int64) (int64, error) {
	return m.changeISR(ctx, m.lease(), topic, p, leaderEpoch, isr, rev)
}

// changeISR is ChangeISR as a holder of lease: the current one, or, in
// tests, one a paused node still believes it holds.
func (m *Member) changeISR(ctx context.Context, lease clientv3.LeaseID, topic string, p int32, leaderEpoch int32, isr []int32, rev int64) (int64, error) {
	tp := TopicPartition{topic, p}
	self := m.cfg.Self.ID
	if lease == 0 {
		m.metrics.isrWrites.WithLabelValues("not_leader").Inc()
		return 0, fmt.Errorf("%w: %w: changing the ISR of %s", ErrNotLeader, ErrNotLive, tp)
	}
	rec, incarnation, cur, err := m.recordAt(ctx, tp, rev)
	if err != nil {
		return 0, err
	}
	if cur != rev {
		m.metrics.isrWrites.WithLabelValues("conflict").Inc()
		return cur, fmt.Errorf("%w: %s is at revision %d, not %d", ErrISRConflict, tp, cur, rev)
	}
	if rec.Leader != self || rec.Epoch != leaderEpoch {
		m.metrics.isrWrites.WithLabelValues("not_leader").Inc()
		return cur, fmt.Errorf("%w: %s is led by node %d at epoch %d, not by node %d at epoch %d", ErrNotLeader, tp, rec.Leader, rec.Epoch, self, leaderEpoch)
	}
	if err := checkISR(rec, isr); err != nil {
		return cur, fmt.Errorf("%w: %s: %v", ErrInvalidISR, tp, err)
	}
	next := rec.clone()
	next.ISR = slices.Clone(isr)
	// A follower the leader adds is in sync with the folder it registered
	// (placement.go: a replica back with another folder lost its log).
	next.Dirs = joinDirs(rec, isr, m.liveDirs())
	val, _ := json.Marshal(next)
	key := m.keys.partition(topic, p)
	nodeKey := m.keys.node(self)
	resp, err := m.cli.Txn(ctx).If(
		clientv3.Compare(clientv3.ModRevision(key), "=", rev),
		clientv3.Compare(clientv3.LeaseValue(nodeKey), "=", lease),
		clientv3.Compare(clientv3.CreateRevision(m.keys.topic(topic)), "=", incarnation),
	).Then(clientv3.OpPut(key, string(val))).
		Else(clientv3.OpGet(key), clientv3.OpGet(nodeKey)).
		Commit()
	if err != nil {
		return 0, fmt.Errorf("cluster: changing the ISR of %s: %w", tp, err)
	}
	if !resp.Succeeded {
		cur = 0
		if kvs := resp.Responses[0].GetResponseRange().Kvs; len(kvs) == 1 {
			cur = kvs[0].ModRevision
		}
		if kvs := resp.Responses[1].GetResponseRange().Kvs; len(kvs) == 0 || kvs[0].Lease != int64(lease) {
			m.metrics.isrWrites.WithLabelValues("not_leader").Inc()
			m.log.Warn("cluster: ISR change refused: this node's lease is lost", "partition", tp.String(), "isr", isr)
			return cur, fmt.Errorf("%w: %w: changing the ISR of %s", ErrNotLeader, ErrNotLive, tp)
		}
		m.metrics.isrWrites.WithLabelValues("conflict").Inc()
		return cur, fmt.Errorf("%w: %s is at revision %d, not %d", ErrISRConflict, tp, cur, rev)
	}
	m.metrics.isrWrites.WithLabelValues("done").Inc()
	m.log.Info("cluster: ISR changed", "partition", tp.String(), "epoch", leaderEpoch, "isr", isr, "was", rec.ISR, "partition_epoch", resp.Header.Revision)
	// The caller reads the view next: let it hold what was just written.
	_ = m.waitRange(ctx, rangePartitions, resp.Header.Revision)
	return resp.Header.Revision, nil
}

// liveDirs is the data folder each live node registered with.
func (m *Member) liveDirs() map[int32]string {
	m.mu.Lock()
	defer m.mu.Unlock()
	out := make(map[int32]string, len(m.view.nodes))
	for id, n := range m.view.nodes {
		out[id] = n.Dir
	}
	return out
}

// recordAt is partition tp's record and its topic's incarnation, from the
// view when it holds the record at rev, else from etcd; cur is the
// record's revision (0: there is none).
func (m *Member) recordAt(ctx context.Context, tp TopicPartition, rev int64) (rec Partition, incarnation, cur int64, err error) {
	m.mu.Lock()
	vr, ok := m.view.partitions[tp]
	vt, tok := m.view.topics[tp.Topic]
	m.mu.Unlock()
	if ok && tok && vr.modRev == rev {
		return vr.Partition.clone(), vt.createRev, rev, nil
	}
	resp, err := m.cli.Txn(ctx).Then(clientv3.OpGet(m.keys.partition(tp.Topic, tp.Partition)), clientv3.OpGet(m.keys.topic(tp.Topic))).Commit()
	if err != nil {
		return Partition{}, 0, 0, fmt.Errorf("cluster: reading %s: %w", tp, err)
	}
	pk, tk := resp.Responses[0].GetResponseRange().Kvs, resp.Responses[1].GetResponseRange().Kvs
	if len(pk) == 0 || len(tk) == 0 {
		return Partition{}, 0, 0, nil
	}
	if err := json.Unmarshal(pk[0].Value, &rec); err != nil {
		return Partition{}, 0, 0, fmt.Errorf("cluster: reading %s: %w", tp, err)
	}
	return rec, tk[0].CreateRevision, pk[0].ModRevision, nil
}

// checkISR says what is wrong with isr for the record p, if anything.
func checkISR(p Partition, isr []int32) error {
	if !slices.Contains(isr, p.Leader) {
		return fmt.Errorf("%v leaves out the leader %d", isr, p.Leader)
	}
	for i, n := range isr {
		if !slices.Contains(p.Replicas, n) {
			return fmt.Errorf("%v names node %d, not in the replica set %v", isr, n, p.Replicas)
		}
		if slices.Contains(isr[:i], n) {
			return fmt.Errorf("%v names node %d twice", isr, n)
		}
	}
	return nil
}

// ErrLeaderLive: a follower reported its log for an election while the
// partition's leader is live.
var ErrLeaderLive = errors.New("cluster: the partition's leader is live")

// ReportCandidate reports this node's log of partition p of a quorum topic
// for the election of a new leader: lastEpoch is the epoch of its last
// record, logEnd its log end. A follower calls it when it sees its leader
// dead (the leader's nodes/ key gone from the view); the controller elects
// the longest log among a live majority of the replicas once they have
// reported (placement.go, quorumElect).
//
// The report is a vote: once made, the follower must append nothing more
// from the old leader, so the log it reported is the log it has. Then a
// record acknowledged by a quorum is on one of any majority of reporters,
// and no record can be acknowledged after a majority has reported.
//
// The key, candidates/{topic}/{p:010d}/{node}, is put under this node's
// lease (it goes when the node does) only if the partition's record is
// still the one the view holds (same leader and epoch), its leader's key
// is gone and this node's key is under its lease. Errors: ErrISRConflict
// (the record changed: read the view again), ErrLeaderLive, ErrNotLive.
func (m *Member) ReportCandidate(ctx context.Context, topic string, p int32, lastEpoch int32, logEnd int64) error {
	return m.reportCandidate(ctx, m.lease(), topic, p, lastEpoch, logEnd)
}

// reportCandidate is ReportCandidate as a holder of lease (in tests, one
// a paused node still believes it holds).
func (m *Member) reportCandidate(ctx context.Context, lease clientv3.LeaseID, topic string, p int32, lastEpoch int32, logEnd int64) error {
	tp := TopicPartition{topic, p}
	self := m.cfg.Self.ID
	if lease == 0 {
		m.metrics.candidates.WithLabelValues("refused").Inc()
		return fmt.Errorf("%w: reporting its log of %s", ErrNotLive, tp)
	}
	m.mu.Lock()
	rec, ok := m.view.partitions[tp]
	m.mu.Unlock()
	switch {
	case !ok:
		return fmt.Errorf("cluster: reporting its log of %s: the partition is not placed", tp)
	case !slices.Contains(rec.Replicas, self):
		return fmt.Errorf("cluster: reporting its log of %s: node %d is not one of its replicas %v", tp, self, rec.Replicas)
	case rec.Leader == self:
		return fmt.Errorf("%w: reporting its log of %s: this node leads it", ErrLeaderLive, tp)
	}
	val, _ := json.Marshal(Candidate{LeaderEpoch: rec.Epoch, Epoch: lastEpoch, End: logEnd})
	key := m.keys.partition(topic, p)
	cmps := []clientv3.Cmp{
		clientv3.Compare(clientv3.ModRevision(key), "=", rec.modRev),
		clientv3.Compare(clientv3.LeaseValue(m.keys.node(self)), "=", lease),
	}
	leaderKey := m.keys.node(max(rec.Leader, 0))
	if rec.Leader >= 0 {
		cmps = append(cmps, clientv3.Compare(clientv3.CreateRevision(leaderKey), "=", 0))
	}
	resp, err := m.cli.Txn(ctx).If(cmps...).
		Then(clientv3.OpPut(m.keys.candidate(topic, p, self), string(val), clientv3.WithLease(lease))).
		Else(clientv3.OpGet(m.keys.node(self)), clientv3.OpGet(leaderKey), clientv3.OpGet(key)).
		Commit()
	if err != nil {
		return fmt.Errorf("cluster: reporting its log of %s: %w", tp, err)
	}
	if !resp.Succeeded {
		m.metrics.candidates.WithLabelValues("refused").Inc()
		own, leader, cur := resp.Responses[0].GetResponseRange().Kvs, resp.Responses[1].GetResponseRange().Kvs, resp.Responses[2].GetResponseRange().Kvs
		switch {
		case len(own) == 0 || own[0].Lease != int64(lease):
			return fmt.Errorf("%w: reporting its log of %s", ErrNotLive, tp)
		case len(cur) == 0 || cur[0].ModRevision != rec.modRev:
			return fmt.Errorf("%w: %s is no longer at revision %d", ErrISRConflict, tp, rec.modRev)
		case rec.Leader >= 0 && len(leader) > 0:
			return fmt.Errorf("%w: node %d leads %s at epoch %d", ErrLeaderLive, rec.Leader, tp, rec.Epoch)
		}
		return fmt.Errorf("%w: %s changed", ErrISRConflict, tp)
	}
	m.metrics.candidates.WithLabelValues("done").Inc()
	m.log.Info("cluster: log reported for a quorum election", "partition", tp.String(), "leader_epoch", rec.Epoch,
		"last_epoch", lastEpoch, "log_end", logEnd)
	return nil
}
