package replica

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"strata/engine/record"
	"strata/engine/store"
	"time"
)

// Transport carries a follower's fetches to its leader. Between nodes it
// is peer.Client (Kafka Fetch requests from a replica, between the nodes'
// own listeners); in a test any value that hands each request to the
// leader's Node.FollowerFetch and returns its answer will do (batches_test.go's
// localTransport). It is the only way a Node reaches another node.
type Transport interface {
	// Fetch asks leader, as this node's follower, for each request's
	// partition's records from its offset on, in one request that waits up
	// to the longest Wait for some; a probe asks only for the leader's log
	// end and epochs. The answers are in the requests' order, each with its
	// own error (ErrNotLeader, ErrDiverged and ErrFenced tell the follower
	// what to do next); the error returned is the request's as a whole.
	Fetch(ctx context.Context, leader int32, reqs []FetchRequest) ([]FetchAnswer, error)
}

// FetchAnswer is the leader's answer for one partition of a fetch.
type FetchAnswer struct {
	ReplicaRead
	Err error
}

// FetchRequest is one follower fetch.
type FetchRequest struct {
	Topic     string
	Partition int32
	Epoch     int32
	Offset    int64
	MaxBytes  int32
	Wait      time.Duration
	Probe     bool
	// Seals are the follower's recently sealed copies, for the leader's
	// seal agreement.
	Seals []Seal
	// LogStart is where the follower's log starts (-1: unknown), for the
	// leader's DeleteRecords (AwaitLogStart).
	LogStart int64
}

// ErrFenced: the leader is at another epoch than the follower asked at;
// the follower waits for the metadata to catch up.
var ErrFenced = errors.New("replica: leader epoch mismatch")

// ErrBelowCommitted: following the leader would cut this replica's log
// below its high watermark (records acknowledged to producers), which only
// an unclean election allows (Assignment.Unclean).
var ErrBelowCommitted = errors.New("replica: the leader's log lacks records this replica committed")

func (n *Node) startFollowing(ctx context.Context, tr Transport, p *partition, a Assignment) {
	p.mu.Lock()
	f := p.follow
	p.a = a
	p.mu.Unlock()
	if f != nil && f.leader == a.Leader && f.epoch == a.Epoch {
		return
	}
	n.stopFollowing(p)
	fctx, cancel := context.WithCancel(ctx)
	f = &following{leader: a.Leader, epoch: a.Epoch, cancel: cancel, done: make(chan struct{})}
	p.mu.Lock()
	p.follow = f
	p.mu.Unlock()
	go func() {
		defer close(f.done)
		n.follow(fctx, tr, p, a)
	}()
}

func (n *Node) stopFollowing(p *partition) {
	p.mu.Lock()
	f := p.follow
	p.follow = nil
	p.mu.Unlock()
	if f != nil {
		f.cancel()
		<-f.done
	}
}

// follow copies a's leader's log until ctx ends: first it cuts its own log
// where it parts from the leader's (the epochs say where), then it fetches
// from its log end, appending the leader's records at the leader's offsets
// and rolling where the leader rolled.
func (n *Node) follow(ctx context.Context, tr Transport, p *partition, a Assignment) {
	log := n.cfg.Log.With("shard", p.shard, "leader", a.Leader, "epoch", a.Epoch)
	log.Info("replica: following")
	backoff := 50 * time.Millisecond
	for ctx.Err() == nil {
		err := n.followOnce(ctx, tr, p, a)
		if ctx.Err() != nil {
			return
		}
		switch {
		case errors.Is(err, ErrNotLeader), errors.Is(err, ErrFenced):
			// The metadata is about to say who leads now.
			log.Debug("replica: leader not ready", "err", err)
		case errors.Is(err, ErrDiverged):
			log.Info("replica: truncating again", "err", err)
		case errors.Is(err, ErrBelowCommitted):
			// Told at the refusal; asked again as the metadata changes.
		default:
			log.Warn("replica: following", "err", err)
		}
		select {
		case <-ctx.Done():
			return
		case <-n.cfg.Clock.After(backoff):
		}
		// Short: a new leader refuses for a moment while it sets up, and
		// its high watermark waits for this follower.
		backoff = min(2*backoff, 250*time.Millisecond)
	}
}

// followOnce truncates against a's leader, then copies it through the
// fetcher that serves all of this node's partitions led by that node, until
// the fetcher reports an error for this partition or ctx ends.
func (n *Node) followOnce(ctx context.Context, tr Transport, p *partition, a Assignment) error {
	end, err := n.truncate(ctx, tr, p, a)
	if err != nil {
		return err
	}
	f := n.fetcherFor(tr, a.Leader)
	errc := f.add(ctx, p, a, end)
	defer f.remove(p.shard)
	select {
	case err := <-errc:
		return err
	case <-ctx.Done():
		return ctx.Err()
	}
}

// take applies one fetch answer for p, whose log ended at end: the
// leader's records, rolls, deletions and high watermark. It returns the new
// log end.
func (n *Node) take(ctx context.Context, p *partition, end int64, rd ReplicaRead) (int64, error) {
	st := n.cfg.Store
	stopped := ctx
	ctx = context.WithoutCancel(ctx) // what is asked of the engine completes
	var err error
	rd.Records = n.cutToBatch(rd.Records, rd.LogEnd)
	if len(rd.Records) > 0 {
		if end, err = n.copyRecords(ctx, p, end, rd); err != nil {
			return end, err
		}
		if n.limiter != nil {
			size := 0
			for i := range rd.Records {
				size += record.Size(&rd.Records[i])
			}
			// The pause ends early when the partition stops following. An
			// answer larger than the burst (a whole batch past the fetch's
			// budget) is paid for in full, a burst at a time.
			for size > 0 {
				k := min(size, n.limiter.Burst())
				if err := n.limiter.WaitN(stopped, k); err != nil {
					return end, err
				}
				size -= k
			}
		}
	}
	if err := n.rollAt(ctx, p, end, rd.Rolls); err != nil {
		return end, err
	}
	if hw := min(rd.HighWatermark, end); hw > 0 {
		if err := st.SetHighWatermark(ctx, p.shard, uint64(hw)); err != nil {
			return end, err
		}
		n.cfg.Wake(p.shard)
	}
	// Records the leader deleted (DeleteRecords) go here too, after the
	// high watermark: the engines delete only below it, and the leader
	// deleted only below its own.
	if low, _, err := st.Watermarks(ctx, p.shard); err == nil && rd.LogStart > int64(low) && rd.LogStart <= end {
		if err := st.DeleteBefore(ctx, p.shard, uint64(rd.LogStart)); err != nil {
			return end, err
		}
	}
	return end, nil
}

// truncate cuts this replica's log where it parts from the leader's and
// returns its log end: KIP-101's truncation by leader epoch, so that two
// replicas never hold different records at one offset.
func (n *Node) truncate(ctx context.Context, tr Transport, p *partition, a Assignment) (int64, error) {
	st := n.cfg.Store
	if d, ok := st.(Damaged); ok {
		if from, cause := d.DamagedFrom(p.shard); cause != nil {
			// Its copy no longer holds what it claims (found at start or by
			// a scrub; a damaged active segment refuses writes too): it
			// copies the leader's log again, and is out of sync until it
			// has (the leader adds it back, caught up).
			ans, err := tr.Fetch(ctx, a.Leader, []FetchRequest{{Topic: a.Topic, Partition: a.Partition, Epoch: a.Epoch, Probe: true}})
			if err == nil {
				err = ans[0].Err
			}
			if err != nil {
				return 0, err
			}
			n.m.refills.Inc()
			n.cfg.Log.Warn("replica: this replica's copy is damaged: copying the leader's log again",
				"shard", p.shard, "leader", a.Leader, "damaged_from", from, "err", cause)
			return n.restartAt(ctx, p, ans[0].LogStart)
		}
	}
	if err := n.ensureManaged(ctx, p.shard); err != nil {
		return 0, err
	}
	e, err := st.LogEnd(ctx, p.shard)
	if err != nil {
		return 0, err
	}
	end := int64(e)
	ans, err := tr.Fetch(ctx, a.Leader, []FetchRequest{{Topic: a.Topic, Partition: a.Partition, Epoch: a.Epoch, Offset: end, Probe: true}})
	if err != nil {
		return 0, err
	}
	rd := ans[0].ReplicaRead
	if ans[0].Err != nil {
		return 0, ans[0].Err
	}
	mine, err := n.history(ctx, p.shard)
	if err != nil {
		return 0, err
	}
	var leader EpochHistory
	for _, en := range rd.Epochs {
		if err := leader.Append(en.Epoch, en.Start); err != nil {
			return 0, fmt.Errorf("the leader's epoch history: %w", err)
		}
	}
	to, err := mine.TruncationPoint(end, &leader, rd.LogEnd)
	if errors.Is(err, ErrNoCommonEpoch) {
		// Records with no epoch: only what was committed is known to agree.
		_, hw, werr := st.Watermarks(ctx, p.shard)
		if werr != nil {
			return 0, werr
		}
		to, err = min(int64(hw), end), nil
	}
	if err != nil {
		return 0, err
	}
	_, hw, err := st.Watermarks(ctx, p.shard)
	if err != nil {
		return 0, err
	}
	if committed := min(int64(hw), end); to < committed && !a.Unclean {
		// What this replica committed was acknowledged: a leader whose log
		// lacks it was elected from a stale ISR (it lost its log), and
		// following it would delete acknowledged records on every replica
		// that still holds them. Only an unclean election may choose so.
		n.m.refusedCuts.Inc()
		n.cfg.Log.Error("replica: refusing to truncate below this replica's high watermark to follow a leader that lacks committed records; staying out of the ISR",
			"shard", p.shard, "leader", a.Leader, "epoch", a.Epoch, "high_watermark", committed, "cut_at", to, "leader_log_end", rd.LogEnd)
		return 0, fmt.Errorf("%w: leader %d at epoch %d would cut %s from %d to %d", ErrBelowCommitted, a.Leader, a.Epoch, p.shard, committed, to)
	}
	if rd.LogStart > to {
		// Everything this replica holds is below the leader's log start
		// (deleted there since): it starts over where the leader's log does.
		return n.restartAt(ctx, p, rd.LogStart)
	}
	if to < end {
		n.cfg.Log.Info("replica: truncating to the leader's log", "shard", p.shard, "leader", a.Leader, "epoch", a.Epoch, "from", end, "to", to)
		// Once asked, the cut happens whether or not this follower is
		// stopped meanwhile; wait for it, or a new leader could read its
		// log end before the cut.
		err := st.TruncateTo(context.WithoutCancel(ctx), p.shard, uint64(to))
		if errors.Is(err, store.ErrSealedSegment) || errors.Is(err, store.ErrCommitted) {
			// Its unreplicated tail spans a roll (the old leader rolled by
			// size past what was committed), or an unclean election chose a
			// shorter log: only copying the leader's whole log again makes
			// the two agree.
			n.cfg.Log.Warn("replica: this replica's log parts from the new leader's where it cannot be cut: copying the leader's log again",
				"shard", p.shard, "leader", a.Leader, "cut_at", to, "err", err)
			return n.restartAt(ctx, p, rd.LogStart)
		}
		if err != nil {
			return 0, fmt.Errorf("truncating to %d: %w", to, err)
		}
		n.m.truncated.Add(float64(end - to))
		end = to
	}
	return end, nil
}

// ensureManaged makes a follower's high watermark move only with its
// leader's from now on.
func (n *Node) ensureManaged(ctx context.Context, shard string) error {
	_, hw, err := n.cfg.Store.Watermarks(ctx, shard)
	if err != nil {
		return err
	}
	return n.cfg.Store.SetHighWatermark(ctx, shard, hw)
}

func (n *Node) history(ctx context.Context, shard string) (*EpochHistory, error) {
	ep, ok := n.cfg.Store.(store.Epochs)
	if !ok {
		return &EpochHistory{}, nil
	}
	es, err := ep.LeaderEpochs(ctx, shard)
	if err != nil {
		return nil, err
	}
	return HistoryOf(es), nil
}

// copyRecords appends the leader's records at their offsets, rolling where
// the leader's segments start and recording the epochs they were written
// in; it returns the new log end.
func (n *Node) copyRecords(ctx context.Context, p *partition, end int64, rd ReplicaRead) (int64, error) {
	st := n.cfg.Store
	recs := rd.Records
	if recs[0].Offset != uint64(end) {
		return end, fmt.Errorf("the leader answered a fetch at %d from offset %d", end, recs[0].Offset)
	}
	for i := 1; i < len(recs); i++ {
		if recs[i].Offset != recs[i-1].Offset+1 {
			return end, fmt.Errorf("the leader's records skip from offset %d to %d", recs[i-1].Offset, recs[i].Offset)
		}
	}
	ep, keepsEpochs := st.(store.Epochs)
	for len(recs) > 0 {
		first := int64(recs[0].Offset)
		if err := n.rollAt(ctx, p, first, rd.Rolls); err != nil {
			return end, err
		}
		// The epoch the leader wrote these records in, recorded as the log
		// reaches its start (the engines refuse an epoch past the log end).
		k := len(recs)
		for i, e := range rd.Epochs {
			if e.Start > first {
				k = min(k, int(e.Start-first))
				break
			}
			if i+1 < len(rd.Epochs) && rd.Epochs[i+1].Start <= first {
				continue
			}
			if keepsEpochs {
				if err := ep.AssignEpoch(ctx, p.shard, e.Epoch, uint64(first)); err != nil {
					return end, fmt.Errorf("recording leader epoch %d: %w", e.Epoch, err)
				}
			}
		}
		for _, r := range rd.Rolls {
			if r > first && r-first < int64(k) {
				k = int(r - first)
			}
		}
		if err := st.AppendAt(ctx, p.shard, recs[:k]); err != nil {
			return end, err
		}
		end += int64(k)
		recs = recs[k:]
		n.m.copied.Add(float64(k))
	}
	return end, nil
}

// rollAt seals the follower's active segment at end, the log end, if the
// leader's next segment starts there and the follower has not rolled yet.
func (n *Node) rollAt(ctx context.Context, p *partition, end int64, rolls []int64) error {
	sg, ok := n.cfg.Store.(Segmented)
	if !ok || !slices.Contains(rolls, end) {
		return nil
	}
	starts, err := sg.SegmentStarts(ctx, p.shard)
	if err != nil {
		return err
	}
	if len(starts) == 0 || starts[len(starts)-1] >= uint64(end) {
		return nil
	}
	return sg.RollAt(ctx, p.shard, uint64(end))
}

// Damaged is an engine that knows where its local copy of a shard is
// damaged (the segment engine: a sealed file cut short found at start,
// synced bytes lost from the active segment, or a scrub's finding).
type Damaged interface {
	// DamagedFrom is the first offset of shard's damage; cause is nil when
	// the copy is sound as far as is known.
	DamagedFrom(shard string) (from uint64, cause error)
}

// Refill has this node's follower of shard copy its leader's log again,
// its own found damaged (Damaged). It reports false when this node does
// not follow shard now: a leader has no copy to refill from, so it keeps
// serving what it can and the damage waits for an operator, or for its
// next start as a follower.
func (n *Node) Refill(shard string) bool {
	n.mu.Lock()
	p := n.parts[shard]
	n.mu.Unlock()
	if p == nil {
		return false
	}
	p.mu.Lock()
	following := p.follow != nil
	p.mu.Unlock()
	if !following {
		return false
	}
	// The next reconcile (within its retry tick) follows again, and a
	// follower's first step, truncate, finds the damage.
	n.stopFollowing(p)
	return true
}

// restartAt empties this replica's log of p and starts it at start, the
// leader's log start: the follower then copies the leader's whole log.
func (n *Node) restartAt(ctx context.Context, p *partition, start int64) (int64, error) {
	ctx = context.WithoutCancel(ctx) // not half done: a shard deleted and not made again
	st, ok := n.cfg.Store.(store.Starter)
	if !ok {
		return 0, fmt.Errorf("the leader's log starts at %d, past this replica's, and this engine cannot start a shard there", start)
	}
	n.cfg.Log.Warn("replica: starting this replica's log over at the leader's log start", "shard", p.shard, "start", start)
	if err := n.cfg.Store.DeleteShard(ctx, p.shard); err != nil {
		return 0, err
	}
	if err := st.CreateShardAt(ctx, p.shard, uint64(start)); err != nil {
		return 0, err
	}
	return start, n.ensureManaged(ctx, p.shard)
}

// reportCandidate offers this follower's log for the election of a quorum
// partition whose leader is dead. A record acknowledged in quorum mode is on
// a majority, not on every ISR member, so the controller elects the longest
// log among a majority of reports (docs/cluster.md). The follower has
// stopped copying the dead leader first: the report is a vote, and the log
// it describes must not grow after it.
func (n *Node) reportCandidate(ctx context.Context, p *partition, a Assignment) {
	p.mu.Lock()
	done := p.reported == a.Epoch
	p.mu.Unlock()
	if done {
		return
	}
	end, err := n.cfg.Store.LogEnd(ctx, p.shard)
	if err != nil {
		n.cfg.Log.Warn("replica: reading the log end for a quorum election", "shard", p.shard, "err", err)
		return
	}
	h, err := n.history(ctx, p.shard)
	if err != nil {
		n.cfg.Log.Warn("replica: reading the epochs for a quorum election", "shard", p.shard, "err", err)
		return
	}
	last := int32(-1)
	if e, ok := h.Latest(); ok {
		last = e.Epoch
	}
	rctx, cancel := context.WithTimeout(ctx, 10*time.Second)
	defer cancel()
	if err := n.cfg.Meta.ReportCandidate(rctx, p.topic, p.p, last, int64(end)); err != nil {
		n.cfg.Log.Info("replica: quorum election report not taken (retried while the leader stays dead)", "shard", p.shard, "err", err)
		return
	}
	p.mu.Lock()
	p.reported = a.Epoch
	p.mu.Unlock()
	n.cfg.Log.Info("replica: reported this log for a quorum election", "shard", p.shard, "dead_leader", a.Leader, "epoch", a.Epoch,
		"last_epoch", last, "log_end", end)
}
