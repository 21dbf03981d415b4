package replica

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"slices"
	"sync"
	"sync/atomic"
	"time"

	"strata/engine/record"
	"strata/engine/store"

	"github.com/prometheus/client_golang/prometheus"
	"golang.org/x/time/rate"
)

// Node runs replication for the partitions this node holds a replica of:
// for each it is either the leader, driving a Leader state machine with
// what its followers fetch and what its produces append, or a follower,
// pulling from the leader (follower.go). Which it is comes from Meta (the
// cluster's partition records in etcd); what it does comes from the pure
// state machines in this package. docs/replication.md has the protocol.
type Node struct {
	cfg     NodeConfig
	m       *metrics
	limiter *rate.Limiter // nil: copying is not throttled

	mu       sync.Mutex
	parts    map[string]*partition // by shard, every replicated partition this node holds
	fetchers map[int32]*fetcher    // by leader node
	ids      atomic.Uint64
}

// Store is what replication needs of the engine: a log with a high
// watermark apart from its log end (store.Replica).
type Store interface {
	store.Store
	store.Replica
}

// Segmented is an engine whose logs are segment files: a follower rolls
// where its leader did, so every replica's sealed files are the same bytes
// (the segment engine; memory and Pebble have no files to roll).
type Segmented interface {
	// SegmentStarts is the first offset of each local segment, oldest first.
	SegmentStarts(ctx context.Context, shard string) ([]uint64, error)
	// RollAt seals the active segment so that the next one starts at next.
	RollAt(ctx context.Context, shard string, next uint64) error
}

// Assignment is a replicated partition as the cluster's metadata has it.
type Assignment struct {
	Topic     string
	Partition int32
	Leader    int32 // -1: none now
	Epoch     int32 // the leader epoch
	Replicas  []int32
	ISR       []int32
	// Rev is the partition epoch: the version of the record, which every
	// ISR write compares.
	Rev    int64
	MinISR int
	Mode   Mode
	// LeaderLive: the leader's node holds its lease.
	LeaderLive bool
}

// Meta is the cluster's metadata as replication reads and writes it.
type Meta interface {
	// Live reports whether this node holds its lease: without it, it leads
	// nothing, whatever the records say.
	Live() bool
	// Assignments lists the partitions with more than one replica that
	// name this node among their replicas.
	Assignments() []Assignment
	// Changed is closed at the next change of the metadata.
	Changed() <-chan struct{}
	// ChangeISR writes a new ISR to the partition record by compare-and-
	// swap on rev, as its leader at leaderEpoch, and returns the new rev.
	ChangeISR(ctx context.Context, topic string, partition int32, leaderEpoch int32, isr []int32, rev int64) (int64, error)
	// ReportCandidate offers this node's log, which ends at logEnd in
	// lastEpoch, for the election of a quorum partition's next leader.
	ReportCandidate(ctx context.Context, topic string, partition int32, lastEpoch int32, logEnd int64) error
	// RecordSeal records a segment sealed for the cluster, as the
	// partition's leader at leaderEpoch: its checksum and the replicas
	// whose copies agree.
	RecordSeal(ctx context.Context, topic string, partition int32, leaderEpoch int32, s SealRecord) error
}

// NodeConfig configures a Node.
type NodeConfig struct {
	Self  int32
	Store Store
	Meta  Meta
	// LagTimeMax is replica.lag.time.max.ms: a follower not caught up for
	// this long leaves the ISR.
	LagTimeMax time.Duration
	// FetchWait is how long a follower's fetch waits at the leader for
	// records (the long poll); FetchBytes bounds one fetch's records.
	FetchWait  time.Duration
	FetchBytes int32
	// FetchRate bounds the bytes per second this node copies as a
	// follower, all partitions together (Kafka's
	// follower.replication.throttled.rate); 0: no bound. A far-behind
	// follower then catches up at that pace, FetchBytes at a time.
	FetchRate  int64
	Log        *slog.Logger
	Registerer prometheus.Registerer // nil: no metrics
	Now        func() time.Time
	// Wake is told of a shard whose high watermark rose, so consumers
	// waiting on it read again.
	Wake func(shard string)
	// Lead is told that this node leads shard from now on, before its first
	// append: state kept from the log (idempotent producers) is rebuilt.
	Lead func(shard string)
}

// partition is one replicated partition on this node, as its leader or a
// follower.
type partition struct {
	topic string
	p     int32
	shard string

	mu      sync.Mutex
	a       Assignment // as last applied
	leader  *Leader    // while leading
	waiters map[ProduceID]chan Result
	follow  *following // while following
	// reported is the leader epoch whose election this node reported its
	// log for (quorum mode), -1 if none.
	reported int32
	// seals are this replica's recently sealed segments; reports what each
	// follower reported of its own (leader); sealing: a record is being
	// written.
	seals   []pendingSeal
	reports map[int32]map[uint64]Seal
	sealing bool
}

type following struct {
	leader int32
	epoch  int32
	cancel context.CancelFunc
	done   chan struct{}
}

// NewNode makes a node's replication; Run starts it.
func NewNode(cfg NodeConfig) *Node {
	if cfg.Log == nil {
		cfg.Log = slog.Default()
	}
	if cfg.Now == nil {
		cfg.Now = time.Now
	}
	if cfg.LagTimeMax <= 0 {
		cfg.LagTimeMax = 30 * time.Second
	}
	if cfg.FetchWait <= 0 {
		cfg.FetchWait = 500 * time.Millisecond
	}
	if cfg.FetchBytes <= 0 {
		cfg.FetchBytes = 1 << 20
	}
	if cfg.Wake == nil {
		cfg.Wake = func(string) {}
	}
	if cfg.Lead == nil {
		cfg.Lead = func(string) {}
	}
	n := &Node{cfg: cfg, m: newMetrics(cfg.Registerer), parts: map[string]*partition{}}
	if cfg.FetchRate > 0 {
		n.limiter = rate.NewLimiter(rate.Limit(cfg.FetchRate), int(max(cfg.FetchRate, int64(cfg.FetchBytes))))
	}
	return n
}

// Run keeps the node's roles in step with the metadata until ctx ends:
// leading, following or neither, partition by partition. Followers fetch
// through tr.
func (n *Node) Run(ctx context.Context, tr Transport) {
	tick := time.NewTicker(min(n.cfg.LagTimeMax/4, 100*time.Millisecond))
	defer tick.Stop()
	for {
		changed := n.cfg.Meta.Changed()
		n.reconcile(ctx, tr)
		select {
		case <-ctx.Done():
			n.stopAll()
			return
		case <-changed:
		case <-tick.C:
			n.tick()
		}
	}
}

func (n *Node) reconcile(ctx context.Context, tr Transport) {
	live := n.cfg.Meta.Live()
	seen := map[string]bool{}
	for _, a := range n.cfg.Meta.Assignments() {
		shard := store.ShardName(a.Topic, a.Partition)
		seen[shard] = true
		n.mu.Lock()
		p := n.parts[shard]
		if p == nil {
			p = &partition{topic: a.Topic, p: a.Partition, shard: shard, reported: -1}
			n.parts[shard] = p
		}
		n.mu.Unlock()
		switch {
		case a.Leader == n.cfg.Self && live:
			n.lead(ctx, p, a)
		case a.Leader >= 0 && a.Leader != n.cfg.Self && a.Mode == ModeQuorum && !a.LeaderLive:
			n.depose(p, a)
			n.stopFollowing(p)
			n.reportCandidate(ctx, p, a)
		case a.Leader >= 0 && a.Leader != n.cfg.Self && slices.Contains(a.Replicas, n.cfg.Self):
			n.depose(p, a)
			n.startFollowing(ctx, tr, p, a)
		default:
			n.depose(p, a)
			n.stopFollowing(p)
		}
	}
	n.mu.Lock()
	var gone []*partition
	for shard, p := range n.parts {
		if !seen[shard] {
			gone = append(gone, p)
			delete(n.parts, shard)
		}
	}
	n.mu.Unlock()
	for _, p := range gone {
		n.depose(p, Assignment{Leader: -1})
		n.stopFollowing(p)
	}
	n.gauge()
}

// gauge sets the gauges from the partitions' states.
func (n *Node) gauge() {
	n.mu.Lock()
	defer n.mu.Unlock()
	var leading, following, under, belowMin float64
	for _, p := range n.parts {
		p.mu.Lock()
		switch {
		case p.leader != nil:
			leading++
			isr, _ := p.leader.ISR()
			if len(isr) < len(p.a.Replicas) {
				under++
			}
			if p.leader.CheckProduce() == NotEnoughReplicas {
				belowMin++
			}
		case p.follow != nil:
			following++
		}
		p.mu.Unlock()
	}
	n.m.partitions.WithLabelValues("leader").Set(leading)
	n.m.partitions.WithLabelValues("follower").Set(following)
	n.m.underReplicated.Set(under)
	n.m.underMinISR.Set(belowMin)
}

// lead makes this node p's leader at a's epoch, or brings the leader it
// is up to date with a controller's change of the ISR.
func (n *Node) lead(ctx context.Context, p *partition, a Assignment) {
	n.stopFollowing(p)
	p.mu.Lock()
	defer p.mu.Unlock()
	if p.leader != nil && p.a.Epoch == a.Epoch {
		if isr, rev := p.leader.ISR(); a.Rev > rev && !slices.Equal(sorted(a.ISR), sorted(isr)) {
			outs, err := p.leader.ISRCommitted(n.cfg.Now(), a.ISR, a.Rev)
			if err != nil {
				n.cfg.Log.Warn("replica: the controller's ISR is not one this leader can take", "shard", p.shard, "isr", a.ISR, "err", err)
			}
			n.apply(p, outs)
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
	p.a, p.leader, p.waiters = a, l, map[ProduceID]chan Result{}
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
	if err := n.cfg.Meta.ReportCandidate(ctx, p.topic, p.p, last, int64(end)); err != nil {
		n.cfg.Log.Info("replica: quorum election report not taken (retried while the leader stays dead)", "shard", p.shard, "err", err)
		return
	}
	p.mu.Lock()
	p.reported = a.Epoch
	p.mu.Unlock()
	n.cfg.Log.Info("replica: reported this log for a quorum election", "shard", p.shard, "dead_leader", a.Leader, "epoch", a.Epoch,
		"last_epoch", last, "log_end", end)
}

// depose ends p's leadership, if this node had it: produces waiting for
// acks are answered NOT_LEADER_OR_FOLLOWER.
func (n *Node) depose(p *partition, a Assignment) {
	p.mu.Lock()
	defer p.mu.Unlock()
	if p.leader == nil {
		return
	}
	n.apply(p, p.leader.Deposed())
	p.leader = nil
	n.cfg.Log.Info("replica: no longer leading", "shard", p.shard, "epoch", p.a.Epoch, "leader_now", a.Leader, "epoch_now", a.Epoch)
}

func (n *Node) stopAll() {
	n.mu.Lock()
	parts := make([]*partition, 0, len(n.parts))
	for _, p := range n.parts {
		parts = append(parts, p)
	}
	n.mu.Unlock()
	for _, p := range parts {
		n.depose(p, Assignment{Leader: -1})
		n.stopFollowing(p)
	}
}

func (n *Node) tick() {
	now := n.cfg.Now()
	n.mu.Lock()
	parts := make([]*partition, 0, len(n.parts))
	for _, p := range n.parts {
		parts = append(parts, p)
	}
	n.mu.Unlock()
	for _, p := range parts {
		p.mu.Lock()
		if p.leader != nil {
			n.apply(p, p.leader.Tick(now))
			n.settleSeals(p)
		}
		p.mu.Unlock()
	}
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
			go n.proposeISR(p, p.a.Epoch, o)
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
func (n *Node) proposeISR(p *partition, epoch int32, o ProposeISR) {
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
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
}

// ErrNotLeader: this node does not lead the partition (any more).
var ErrNotLeader = errors.New("replica: not the leader")

// Replicated reports whether shard is a replicated partition on this node.
func (n *Node) Replicated(shard string) bool {
	n.mu.Lock()
	defer n.mu.Unlock()
	_, ok := n.parts[shard]
	return ok
}

func (n *Node) part(shard string) *partition {
	n.mu.Lock()
	defer n.mu.Unlock()
	return n.parts[shard]
}

// CheckProduce says whether a produce to shard may append now: only once
// this node has set up as its leader, and with acks=all only while the ISR
// holds min.insync.replicas.
func (n *Node) CheckProduce(shard string, acksAll bool) Result {
	p := n.part(shard)
	if p == nil {
		return NotLeaderOrFollower
	}
	p.mu.Lock()
	defer p.mu.Unlock()
	if p.leader == nil {
		return NotLeaderOrFollower
	}
	r := p.leader.CheckProduce()
	if r == NotEnoughReplicas && !acksAll {
		return OK
	}
	if r == NotEnoughReplicas {
		n.m.acks.WithLabelValues(r.String()).Inc()
	}
	return r
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
// acks=all asks for, and answers how the produce ends.
func (n *Node) AwaitAck(ctx context.Context, shard string, base, end int64, timeout time.Duration) Result {
	r := n.awaitAck(ctx, shard, base, end, timeout)
	n.m.acks.WithLabelValues(r.String()).Inc()
	return r
}

func (n *Node) awaitAck(ctx context.Context, shard string, base, end int64, timeout time.Duration) Result {
	p := n.part(shard)
	if p == nil {
		return NotLeaderOrFollower
	}
	ch := make(chan Result, 1)
	id := ProduceID(n.ids.Add(1))
	p.mu.Lock()
	if p.leader == nil {
		p.mu.Unlock()
		return NotLeaderOrFollower
	}
	now := n.cfg.Now()
	if end > p.leader.LogEnd() {
		n.apply(p, mustOutputs(p.leader.Appended(now, end)))
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

func mustOutputs(outs []Output, err error) []Output { return outs }

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
// proves nothing and gets only the leader's log end and epochs).
func (n *Node) FollowerFetch(ctx context.Context, shard string, follower int32, epoch int32, offset int64, maxBytes int32, probe bool, seals []Seal) (ReplicaRead, error) {
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
		end := p.leader.LogEnd()
		p.mu.Unlock()
		return ReplicaRead{LogEnd: end}, fmt.Errorf("%w: node %d at %d, the log ends at %d", ErrDiverged, follower, offset, end)
	}
	p.takeReports(follower, seals)
	if !probe {
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
	if offset < int64(end) {
		recs, err := st.ReadToLogEnd(ctx, shard, uint64(offset), store.Budget{MaxBytes: int(maxBytes)})
		if err != nil {
			return rd, err
		}
		rd.Records = recs
		if len(recs) > 0 {
			last = recs[len(recs)-1].Offset + 1
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
		for _, s := range starts[min(1, len(starts)):] {
			if s >= uint64(offset) && s <= last {
				rd.Rolls = append(rd.Rolls, int64(s))
			}
		}
	}
	return rd, nil
}

func sorted(s []int32) []int32 {
	s = slices.Clone(s)
	slices.Sort(s)
	return s
}
