package replica

import (
	"context"
	"log/slog"
	"slices"
	"sync"
	"sync/atomic"
	"time"

	"strata/engine/record"
	"strata/engine/store"
	appendpath "strata/partition" // named so: this package has a partition type of its own

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

	// bg is the context of the node's own goroutines (goBackground),
	// cancelled when Run ends; wg counts them.
	bg      context.Context
	cancel  context.CancelFunc
	wg      sync.WaitGroup
	bgMu    sync.Mutex // orders wg.Add before Run's wg.Wait
	stopped bool
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
	// Unclean is the topic's unclean.leader.election.enable: a follower
	// may then cut its log below its high watermark to follow a leader
	// that lacks committed records.
	Unclean bool
	// Incarnation is the topic's (its creation revision in etcd): a topic
	// deleted and made again is another partition, though its shard's name
	// and its first leader epoch are the old one's.
	Incarnation int64
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
	// Seals lists the partition's seal records of the segments that start
	// from from through to, by start.
	Seals(ctx context.Context, topic string, partition int32, from, to uint64) ([]SealRecord, error)
	// SealBelow is the record of the partition's segment that starts last
	// below start, if any: the whole of a copy that holds only its tail.
	SealBelow(ctx context.Context, topic string, partition int32, start uint64) (SealRecord, bool, error)
	// PruneSeals deletes the seal records of segments that end below the
	// partition's log start.
	PruneSeals(ctx context.Context, topic string, partition int32, below uint64) (int, error)
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
	// Clock is what the node's ticks, backoffs and state machines run on
	// (nil: the system clock); Now is its Now, set by NewNode.
	Clock Clock
	Now   func() time.Time
	// Gates are the partitions' append gates (partition.Gates), shared
	// with the append path (partition.Manager) and the cluster's handoff:
	// a change of leadership holds a partition's gate, so no append is in
	// flight while it happens. nil: the node's own.
	Gates *appendpath.Gates
	// Wake is told of a shard whose high watermark rose, so consumers
	// waiting on it read again (partition.Manager.Wake).
	Wake func(shard string)
	// Lead is told that this node leads shard from now on, before its first
	// append: state kept from the log (idempotent producers) is rebuilt
	// (partition.Manager.ForgetProducers).
	Lead func(shard string)
	// BatchEnd reports whether a record is the last of the produce batch
	// it was written in (partition.EndsBatch); a follower's fetch ends only
	// after such a record (batches.go). nil: every record ends one.
	BatchEnd func(r *record.Record) bool
}

// partition is one replicated partition on this node, as its leader or a
// follower.
type partition struct {
	topic string
	p     int32
	shard string

	mu      sync.Mutex
	inc     int64      // the topic incarnation it is a partition of
	a       Assignment // as last applied
	leader  *Leader    // while leading
	waiters map[ProduceID]chan Result
	follow  *following // while following
	// reported is the leader epoch whose election this node reported its
	// log for (quorum mode), -1 if none.
	reported int32
	// seals are this replica's sealed segments still to be settled for the
	// cluster, by start (seal.go); added counts those its events added.
	// reports is what each follower reported of its own (leader); sealing:
	// a record is being written; scanning: seals are being derived from the
	// log, last at scannedAt.
	seals     []pendingSeal
	added     uint64
	reports   map[int32]map[uint64]Seal
	sealing   bool
	scanning  bool
	scannedAt time.Time
	// starts is where each follower's log starts, as it last reported
	// (leader); startsMoved is closed when one moves, or the ISR or the
	// leadership changes (AwaitLogStart).
	starts      map[int32]int64
	startsMoved chan struct{}
	// pruned is the log start below which the leader last pruned seal
	// records, and when.
	pruned   uint64
	prunedAt time.Time
}

type following struct {
	leader int32
	epoch  int32
	cancel context.CancelFunc
	done   chan struct{}
}

func (p *partition) voted(epoch int32) bool {
	p.mu.Lock()
	defer p.mu.Unlock()
	return p.reported == epoch
}

// NewNode makes a node's replication; Run starts it.
func NewNode(cfg NodeConfig) *Node {
	if cfg.Log == nil {
		cfg.Log = slog.Default()
	}
	if cfg.Clock == nil {
		cfg.Clock = systemClock{}
	}
	cfg.Now = cfg.Clock.Now
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
	if cfg.Gates == nil {
		cfg.Gates = appendpath.NewGates()
	}
	n := &Node{cfg: cfg, m: newMetrics(cfg.Registerer), parts: map[string]*partition{}}
	n.bg, n.cancel = context.WithCancel(context.Background())
	if cfg.FetchRate > 0 {
		n.limiter = rate.NewLimiter(rate.Limit(cfg.FetchRate), int(max(cfg.FetchRate, int64(cfg.FetchBytes))))
	}
	return n
}

// Run keeps the node's roles in step with the metadata until ctx ends:
// leading, following or neither, partition by partition. Followers fetch
// through tr.
func (n *Node) Run(ctx context.Context, tr Transport) {
	every := min(n.cfg.LagTimeMax/4, 100*time.Millisecond)
	tick := n.cfg.Clock.After(every)
	// The roles change with the metadata; what could not be done (a shard
	// not made yet, an etcd write that failed) is tried again meanwhile.
	const retryEvery = 250 * time.Millisecond
	retry := n.cfg.Clock.After(retryEvery)
	for {
		changed := n.cfg.Meta.Changed()
		n.reconcile(ctx, tr)
		for again := false; !again; {
			select {
			case <-ctx.Done():
				n.stopAll()
				// What the node started ends with it: nothing it does
				// outlives Run (a fetch in flight, an etcd write).
				n.bgMu.Lock()
				n.stopped = true
				n.bgMu.Unlock()
				n.cancel()
				n.wg.Wait()
				return
			case <-changed:
				again = true
			case <-retry:
				retry = n.cfg.Clock.After(retryEvery)
				again = true
			case <-tick:
				tick = n.cfg.Clock.After(every)
				n.tick()
			}
		}
	}
}

// goBackground runs f on its own goroutine, which Run waits for when it
// ends; ctx ends with Run.
func (n *Node) goBackground(f func(ctx context.Context)) {
	n.bgMu.Lock()
	if n.stopped {
		n.bgMu.Unlock()
		return // Run has ended: so has what the node does
	}
	n.wg.Add(1)
	n.bgMu.Unlock()
	go func() {
		defer n.wg.Done()
		f(n.bg)
	}()
}

func (n *Node) reconcile(ctx context.Context, tr Transport) {
	live := n.cfg.Meta.Live()
	seen := map[string]bool{}
	for _, a := range n.cfg.Meta.Assignments() {
		shard := store.ShardName(a.Topic, a.Partition)
		seen[shard] = true
		n.mu.Lock()
		p := n.parts[shard]
		var old *partition
		if p != nil && p.inc != a.Incarnation {
			// Nothing of the old topic's leadership may carry over: its
			// log end, high watermark and followers' positions are another
			// log's (the same epoch would keep its leader as it was).
			old, p = p, nil
		}
		if p == nil {
			p = &partition{topic: a.Topic, p: a.Partition, shard: shard, inc: a.Incarnation, reported: -1}
			n.parts[shard] = p
		}
		n.mu.Unlock()
		if old != nil {
			n.depose(old, Assignment{Leader: -1})
			n.stopFollowing(old)
		}
		switch {
		case a.Leader == n.cfg.Self && live:
			n.lead(ctx, p, a)
		case a.Leader >= 0 && a.Leader != n.cfg.Self && a.Mode == ModeQuorum && !a.LeaderLive:
			n.depose(p, a)
			n.stopFollowing(p)
			n.reportCandidate(ctx, p, a)
		case a.Leader >= 0 && a.Leader != n.cfg.Self && a.Mode == ModeQuorum && p.voted(a.Epoch):
			// It reported its log for this epoch's election: that report is
			// a vote, and the log must not grow past it until the election.
			n.depose(p, a)
			n.stopFollowing(p)
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
	var leading, following, under, belowMin, unsealed float64
	var oldest time.Time
	for _, p := range n.parts {
		p.mu.Lock()
		for _, s := range p.seals {
			if s.unrecorded() {
				unsealed++
				if oldest.IsZero() || s.at.Before(oldest) {
					oldest = s.at
				}
			}
		}
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
	n.m.unsealed.Set(unsealed)
	if oldest.IsZero() {
		n.m.unsealedOldest.Set(0)
	} else {
		n.m.unsealedOldest.Set(n.cfg.Now().Sub(oldest).Seconds())
	}
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
		n.scanSeals(p, now)
		if p.leader != nil {
			n.apply(p, p.leader.Tick(now))
			n.settleSeals(p)
			n.pruneSeals(p, now)
		}
		p.mu.Unlock()
	}
}

func sorted(s []int32) []int32 {
	s = slices.Clone(s)
	slices.Sort(s)
	return s
}
