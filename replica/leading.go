package replica

import (
	"context"
	"errors"
	"fmt"
	"time"

	"strata/engine/record"
	"strata/engine/store"
	appendpath "strata/partition"
)

// The leader's side of replication: taking a partition over, carrying out
// its state machine's outputs, produces that wait for acks, and answering
// followers' fetches.

// lead makes this node p's leader at a's epoch, or brings the leader it
// is up to date with a controller's change of the ISR.
func (n *Node) lead(ctx context.Context, p *partition, a Assignment) {
	n.stopFollowing(p)
	defer n.cfg.Gates.Change(p.shard)() // no append is in flight while the leadership changes
	p.mu.Lock()
	defer p.mu.Unlock()
	if p.leader != nil && p.a.Epoch == a.Epoch {
		if _, rev := p.leader.ISR(); a.Rev > rev {
			outs, err := p.leader.ISRCommitted(n.cfg.Now(), a.ISR, a.Rev)
			if err != nil {
				n.cfg.Log.Warn("replica: the controller's ISR is not one this leader can take", "shard", p.shard, "isr", a.ISR, "err", err)
			}
			n.apply(p, outs)
			p.wakeStarts()
		}
		p.a = a
		return
	}
	if p.leader != nil {
		n.apply(p, p.leader.Deposed())
		p.leader = nil
	}
	l, err := n.newLeader(ctx, p, a)
	if errors.Is(err, store.ErrUnknownShard) {
		return // placed a moment ago: its shard is being made (cluster.KeepShards)
	}
	if err != nil {
		n.cfg.Log.Error("replica: cannot lead", "shard", p.shard, "epoch", a.Epoch, "err", err)
		return
	}
	p.a, p.leader, p.waiters, p.reports, p.starts = a, l, map[ProduceID]chan Result{}, nil, nil
	p.scannedAt = time.Time{} // what the last leader left unsealed is found at the next tick
	p.wakeStarts()
	n.cfg.Log.Info("replica: leading", "shard", p.shard, "epoch", a.Epoch, "replicas", a.Replicas, "isr", a.ISR,
		"log_end", l.LogEnd(), "high_watermark", l.HW())
}

func (n *Node) newLeader(ctx context.Context, p *partition, a Assignment) (*Leader, error) {
	st := n.cfg.Store
	end, err := st.LogEnd(ctx, p.shard)
	if err != nil {
		return nil, err
	}
	_, hw, err := st.Watermarks(ctx, p.shard)
	if err != nil {
		return nil, err
	}
	// From here on the high watermark moves only when the ISR has the
	// records (a no-op when it is managed already).
	if err := st.SetHighWatermark(ctx, p.shard, hw); err != nil {
		return nil, err
	}
	if ep, ok := st.(store.Epochs); ok {
		if err := ep.AssignEpoch(ctx, p.shard, a.Epoch, end); err != nil {
			return nil, fmt.Errorf("recording leader epoch %d at offset %d: %w", a.Epoch, end, err)
		}
	}
	n.cfg.Lead(p.shard)
	return NewLeader(Config{
		Leader: n.cfg.Self, Replicas: a.Replicas, ISR: a.ISR, PartitionEpoch: a.Rev,
		MinISR: max(1, a.MinISR), LagTimeMax: n.cfg.LagTimeMax, Mode: a.Mode,
		EpochStart: int64(end), LogEnd: int64(end), HighWatermark: int64(hw),
	}, n.cfg.Now())
}

// depose ends p's leadership, if this node had it: produces waiting for
// acks are answered NOT_LEADER_OR_FOLLOWER.
func (n *Node) depose(p *partition, a Assignment) {
	defer n.cfg.Gates.Change(p.shard)() // appends in flight finish first: none lands after
	p.mu.Lock()
	defer p.mu.Unlock()
	if p.leader == nil {
		return
	}
	n.apply(p, p.leader.Deposed())
	p.leader = nil
	p.wakeStarts()
	n.cfg.Log.Info("replica: no longer leading", "shard", p.shard, "epoch", p.a.Epoch, "leader_now", a.Leader, "epoch_now", a.Epoch)
}

// apply carries out a leader's outputs; p.mu is held.
func (n *Node) apply(p *partition, outs []Output) {
	for _, o := range outs {
		switch o := o.(type) {
		case HighWatermark:
			// Below the leader's log end, which the engine has: it cannot
			// refuse it but for a failing disk, and the next move retries.
			if err := n.cfg.Store.SetHighWatermark(context.Background(), p.shard, uint64(o.HW)); err != nil {
				n.cfg.Log.Error("replica: setting the high watermark", "shard", p.shard, "high_watermark", o.HW, "err", err)
				continue
			}
			n.cfg.Wake(p.shard)
		case ProposeISR:
			epoch := p.a.Epoch
			n.goBackground(func(ctx context.Context) { n.proposeISR(ctx, p, epoch, o) })
		case ProduceDone:
			if ch, ok := p.waiters[o.ID]; ok {
				ch <- o.Result
				delete(p.waiters, o.ID)
			}
		}
	}
}

// proposeISR writes a proposed ISR to etcd and tells the leader whether it
// committed.
func (n *Node) proposeISR(ctx context.Context, p *partition, epoch int32, o ProposeISR) {
	ctx, cancel := context.WithTimeout(ctx, 10*time.Second)
	defer cancel()
	rev, err := n.cfg.Meta.ChangeISR(ctx, p.topic, p.p, epoch, o.ISR, o.PartitionEpoch)
	p.mu.Lock()
	defer p.mu.Unlock()
	if p.leader == nil || p.a.Epoch != epoch {
		return
	}
	if err != nil {
		n.m.isrChanges.WithLabelValues("refused").Inc()
		n.cfg.Log.Warn("replica: ISR change refused", "shard", p.shard, "isr", o.ISR, "why", o.Why, "err", err)
		n.apply(p, p.leader.ISRRefused(n.cfg.Now()))
		return
	}
	n.m.isrChanges.WithLabelValues("committed").Inc()
	n.cfg.Log.Info("replica: ISR changed", "shard", p.shard, "isr", o.ISR, "why", o.Why, "partition_epoch", rev)
	if _, cur := p.leader.ISR(); rev <= cur {
		return // the view brought it first
	}
	outs, err := p.leader.ISRCommitted(n.cfg.Now(), o.ISR, rev)
	if err != nil {
		n.cfg.Log.Error("replica: applying a committed ISR", "shard", p.shard, "err", err)
	}
	n.apply(p, outs)
	p.wakeStarts()
}

// ErrNotLeader: this node does not lead the partition (any more).
var ErrNotLeader = fmt.Errorf("replica: %w", appendpath.ErrNotLeader)

func (n *Node) part(shard string) *partition {
	n.mu.Lock()
	defer n.mu.Unlock()
	return n.parts[shard]
}

// Leads reports whether this node leads shard now, at an epoch it has
// recorded: a produce would not be refused as NOT_LEADER_OR_FOLLOWER.
func (n *Node) Leads(shard string) bool {
	p := n.part(shard)
	if p == nil {
		return false
	}
	p.mu.Lock()
	defer p.mu.Unlock()
	return p.leader != nil
}

// The append path reaches replication through its Replication interface.
var _ appendpath.Replication = (*Node)(nil)

// CheckAppend says whether a produce to shard may append now: only while
// this node leads it (its epoch recorded), and with acks=all only while the
// ISR holds min.insync.replicas. The caller holds shard's gate
// (partition.Gates.Append) from here until it has reported the append
// (Appended): until then no change of leadership takes effect, so no record
// lands in this log after this node stopped leading (it would be truncated,
// or worse, tagged with the next epoch). epoch is the leader epoch the
// append is made in, for AwaitAck.
func (n *Node) CheckAppend(shard string, acksAll bool) (epoch int32, err error) {
	p := n.part(shard)
	if p == nil {
		return 0, NotLeaderOrFollower.Err()
	}
	p.mu.Lock()
	defer p.mu.Unlock()
	if p.leader == nil {
		return 0, NotLeaderOrFollower.Err()
	}
	r := p.leader.CheckProduce()
	if r == NotEnoughReplicas && !acksAll {
		r = OK
	}
	if r != OK {
		n.m.acks.WithLabelValues(r.String()).Inc()
		return 0, r.Err()
	}
	return p.a.Epoch, nil
}

// Appended reports the leader's log end after an append to shard, whatever
// its acks.
func (n *Node) Appended(shard string, logEnd int64) {
	p := n.part(shard)
	if p == nil {
		return
	}
	p.mu.Lock()
	defer p.mu.Unlock()
	if p.leader == nil || logEnd <= p.leader.LogEnd() {
		return // concurrent appends finish in any order; the largest counts
	}
	outs, err := p.leader.Appended(n.cfg.Now(), logEnd)
	if err != nil {
		n.cfg.Log.Error("replica: appended", "shard", p.shard, "err", err)
	}
	n.apply(p, outs)
}

// AwaitAck waits until the records at [base, end) of shard are on what
// acks=all asks for: nil once they are, else the error of how the produce
// ends (Result.Err).
func (n *Node) AwaitAck(ctx context.Context, shard string, epoch int32, base, end int64, timeout time.Duration) error {
	r := n.awaitAck(ctx, shard, epoch, base, end, timeout)
	n.m.acks.WithLabelValues(r.String()).Inc()
	return r.Err()
}

func (n *Node) awaitAck(ctx context.Context, shard string, epoch int32, base, end int64, timeout time.Duration) Result {
	p := n.part(shard)
	if p == nil {
		return NotLeaderOrFollower
	}
	ch := make(chan Result, 1)
	id := ProduceID(n.ids.Add(1))
	p.mu.Lock()
	if p.leader == nil || p.a.Epoch != epoch {
		// Led at another epoch since the append: its records may have been
		// cut and the offsets written again by others.
		p.mu.Unlock()
		return NotLeaderOrFollower
	}
	now := n.cfg.Now()
	if end > p.leader.LogEnd() {
		outs, err := p.leader.Appended(now, end)
		if err != nil {
			n.cfg.Log.Error("replica: appended", "shard", shard, "err", err)
		}
		n.apply(p, outs)
	}
	p.waiters[id] = ch
	outs, err := p.leader.AwaitAck(now, id, base, end, now.Add(timeout))
	if err != nil {
		delete(p.waiters, id)
		p.mu.Unlock()
		n.cfg.Log.Error("replica: awaiting acks", "shard", shard, "err", err)
		return NotLeaderOrFollower
	}
	n.apply(p, outs)
	p.mu.Unlock()
	select {
	case r := <-ch:
		return r
	case <-ctx.Done():
		p.mu.Lock()
		delete(p.waiters, id)
		p.mu.Unlock()
		return RequestTimedOut
	}
}

// ReplicaRead is what a leader answers a follower's fetch with.
type ReplicaRead struct {
	Records []record.Record
	// HighWatermark and LogEnd are the leader's; Rolls are the offsets in
	// (offset, last record] where the leader's segments start; Epochs is the
	// leader's whole epoch history.
	HighWatermark, LogEnd, LogStart int64
	Rolls                           []int64
	Epochs                          []EpochEntry
}

// ErrDiverged refuses a follower's fetch past the leader's log end: the
// follower holds records the leader does not and must truncate first.
var ErrDiverged = errors.New("replica: fetch past the leader's log end")

// FollowerFetch answers a follower's fetch of shard at offset, as leader at
// epoch: it first counts as the follower's proof that it holds everything
// below offset (probe: it has not truncated against this leader yet, so it
// proves nothing and gets only the leader's log end and epochs). At most
// maxBytes of records are read, but never part of a batch (batches.go);
// with maxBytes < 0, none this time. logStart is where the follower's log
// starts (-1: not said), for DeleteRecords (AwaitLogStart).
func (n *Node) FollowerFetch(ctx context.Context, shard string, follower int32, epoch int32, offset int64, maxBytes int32, probe bool, seals []Seal, logStart int64) (ReplicaRead, error) {
	p := n.part(shard)
	if p == nil {
		return ReplicaRead{}, ErrNotLeader
	}
	p.mu.Lock()
	switch {
	case p.leader == nil:
		p.mu.Unlock()
		return ReplicaRead{}, fmt.Errorf("%w of %s", ErrNotLeader, shard)
	case p.a.Epoch != epoch:
		p.mu.Unlock()
		return ReplicaRead{}, fmt.Errorf("%w: %s is led at epoch %d, not %d", ErrFenced, shard, p.a.Epoch, epoch)
	}
	if !probe && offset > p.leader.LogEnd() {
		// Records appended but not yet reported (Appended) may be what the
		// follower has copied: the store's log end is the truth.
		if end, err := n.cfg.Store.LogEnd(ctx, shard); err == nil && int64(end) > p.leader.LogEnd() {
			outs, err := p.leader.Appended(n.cfg.Now(), int64(end))
			if err != nil {
				n.cfg.Log.Error("replica: appended", "shard", shard, "err", err)
			}
			n.apply(p, outs)
		}
	}
	if !probe && offset > p.leader.LogEnd() {
		end := p.leader.LogEnd()
		p.mu.Unlock()
		return ReplicaRead{LogEnd: end}, fmt.Errorf("%w: node %d at %d, the log ends at %d", ErrDiverged, follower, offset, end)
	}
	p.takeReports(follower, seals)
	if !probe {
		n.fetchedPast(p, follower, offset)
	}
	n.settleSeals(p) // a report may complete a seal: no need to wait for the tick
	if !probe {
		p.noteLogStart(follower, logStart)
		outs, err := p.leader.FollowerFetched(n.cfg.Now(), follower, offset)
		if err != nil {
			p.mu.Unlock()
			return ReplicaRead{}, err
		}
		n.apply(p, outs)
	}
	p.mu.Unlock()
	st := n.cfg.Store
	var rd ReplicaRead
	if ep, ok := st.(store.Epochs); ok {
		es, err := ep.LeaderEpochs(ctx, shard)
		if err != nil {
			return rd, err
		}
		for _, e := range es {
			rd.Epochs = append(rd.Epochs, EpochEntry{Epoch: e.Epoch, Start: int64(e.Start)})
		}
	}
	low, hw, err := st.Watermarks(ctx, shard)
	if err != nil {
		return rd, err
	}
	end, err := st.LogEnd(ctx, shard)
	if err != nil {
		return rd, err
	}
	rd.HighWatermark, rd.LogEnd, rd.LogStart = int64(hw), int64(end), int64(low)
	if probe {
		return rd, nil
	}
	last := uint64(offset) // the offset after the last record sent
	if offset < int64(end) && maxBytes >= 0 {
		recs, err := st.ReadToLogEnd(ctx, shard, uint64(offset), store.Budget{MaxBytes: int(maxBytes)})
		if err != nil {
			return rd, err
		}
		if recs, err = n.wholeBatches(ctx, st, shard, recs); err != nil {
			return rd, err
		}
		rd.Records = recs
		if len(recs) > 0 {
			last = recs[len(recs)-1].Offset + 1
			// Appends since the log end was read: the follower takes a
			// batch that ends at the log end as the leader's last.
			rd.LogEnd = max(rd.LogEnd, int64(last))
		}
	}
	// Where the leader's segments start among what the follower will hold
	// after this fetch, the end included: a segment sealed by time, with
	// nothing after it yet, is sealed on the follower too.
	if sg, ok := st.(Segmented); ok {
		starts, err := sg.SegmentStarts(ctx, shard)
		if err != nil {
			return rd, err
		}
		if tl, ok := st.(store.TieredLister); ok && len(starts) > 0 && uint64(offset) < starts[0] {
			// A follower copying the history whose files were tiered (one
			// rebuilt from an empty folder) rolls where those segments
			// started too, and where the first local one does: its copies
			// are then the segments sealed for the cluster, and tier.
			cold, err := tl.TieredStarts(ctx, shard)
			if err != nil {
				return rd, err
			}
			starts = append(cold, starts...)
		}
		for _, s := range starts {
			if s >= uint64(offset) && s <= last {
				rd.Rolls = append(rd.Rolls, int64(s))
			}
		}
	}
	return rd, nil
}
