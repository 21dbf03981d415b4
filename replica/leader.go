// Package replica is strata's replication: what a partition's leader decides
// about its followers, its high watermark and its waiting produces, and the
// leader-epoch history followers truncate by. The deciding parts are pure: fed
// `now` and events, they return outputs for the caller to carry out (write an
// ISR to etcd, answer a produce), with no I/O, clock or goroutines, so the
// scripts in testdata/ drive them step by step. docs/replication.md has the
// protocol.
package replica

import (
	"fmt"
	"slices"
	"time"

	appendpath "strata/partition"
)

// Mode is what acks=all waits for (the topic's strata.acks.all).
type Mode int

const (
	// ModeISR: every member of the ISR holds the write (Kafka's acks=all).
	ModeISR Mode = iota
	// ModeQuorum: a majority of the replica set holds it, so one slow
	// follower never holds writes back (the design's quorum, docs/design.md).
	ModeQuorum
)

func (m Mode) String() string {
	if m == ModeQuorum {
		return "quorum"
	}
	return "isr"
}

// ParseMode reads strata.acks.all's value.
func ParseMode(s string) (Mode, error) {
	switch s {
	case "isr":
		return ModeISR, nil
	case "quorum":
		return ModeQuorum, nil
	}
	return 0, fmt.Errorf("replica: acks.all mode %q: want isr or quorum", s)
}

// Config is a partition's replication state as etcd holds it, and the
// topic's settings, when a node becomes its leader.
type Config struct {
	Leader   int32
	Replicas []int32 // the replica set, the leader among them
	ISR      []int32 // the committed ISR, the leader among them
	// PartitionEpoch is the version of the partition record the ISR was read
	// at: every ISR write is a compare-and-swap against it.
	PartitionEpoch int64
	MinISR         int           // min.insync.replicas, >= 1
	LagTimeMax     time.Duration // replica.lag.time.max.ms
	Mode           Mode
	// EpochStart is the first offset of the leader's epoch: a follower
	// rejoins only once it holds the leader's own epoch's start, so it has
	// truncated against this leader (Kafka's rule).
	EpochStart int64
	// LogEnd and HighWatermark are the leader's log as it took over.
	LogEnd, HighWatermark int64
}

// ProduceID names a produce waiting for acks=all, chosen by the caller.
type ProduceID uint64

// Result is how a produce ends; Err gives the append path's error for it.
type Result int

const (
	OK                           Result = iota
	NotEnoughReplicas                   // refused before appending
	NotEnoughReplicasAfterAppend        // appended, but the ISR shrank below min ISR meanwhile
	RequestTimedOut                     // the produce's timeout passed
	NotLeaderOrFollower                 // this node stopped leading meanwhile
)

var resultNames = [...]string{"OK", "NOT_ENOUGH_REPLICAS", "NOT_ENOUGH_REPLICAS_AFTER_APPEND", "REQUEST_TIMED_OUT", "NOT_LEADER_OR_FOLLOWER"}

func (r Result) String() string { return resultNames[r] }

// Err is the append path's error for r (nil for OK), which the front end
// answers the produce with.
func (r Result) Err() error {
	return [...]error{nil, appendpath.ErrNotEnoughReplicas, appendpath.ErrNotEnoughReplicasAfterAppend, appendpath.ErrTimedOut, appendpath.ErrNotLeader}[r]
}

// Output is something the caller must carry out: HighWatermark, ProposeISR
// or ProduceDone.
type Output interface{ output() }

// HighWatermark: the high watermark moved up to HW; consumers may now read
// below it and the engine's SetHighWatermark should hear of it.
type HighWatermark struct{ HW int64 }

// ProposeISR: write ISR to the partition record in etcd by compare-and-swap
// on PartitionEpoch, then report ISRCommitted or ISRRefused. Nothing changes
// here until the write is known to have committed.
type ProposeISR struct {
	ISR            []int32
	PartitionEpoch int64
	Why            string
}

// ProduceDone: answer the produce ID with Result.
type ProduceDone struct {
	ID     ProduceID
	Result Result
}

func (HighWatermark) output() {}
func (ProposeISR) output()    {}
func (ProduceDone) output()   {}

func (o HighWatermark) String() string { return fmt.Sprintf("hw %d", o.HW) }
func (o ProposeISR) String() string {
	return fmt.Sprintf("propose isr=%v at partition epoch %d (%s)", o.ISR, o.PartitionEpoch, o.Why)
}
func (o ProduceDone) String() string { return fmt.Sprintf("produce %d: %s", o.ID, o.Result) }

type follower struct {
	logEnd int64 // -1 until its first fetch under this leader
	// Kafka's lag clock: the last time the follower was known to have held
	// everything the leader had, and the leader's log end at its last fetch.
	lastCaughtUp       time.Time
	lastFetch          time.Time
	lastFetchLeaderEnd int64
	// fetchedSinceOut: it fetched since it last left the ISR. Only a
	// fetching follower rejoins (Kafka decides it on the fetch), or one that
	// stopped at the frozen HW would leave and rejoin every lag window.
	fetchedSinceOut bool
}

type waiter struct {
	end      int64 // the produce is acknowledged once the HW reaches end
	deadline time.Time
}

// Leader is one partition's leader for its active segment: it tracks what
// each follower holds, keeps the high watermark, proposes ISR changes and
// answers produces waiting for acks=all.
type Leader struct {
	cfg     Config
	isr     []int32 // committed
	pepoch  int64
	pending *ProposeISR
	hw      int64
	logEnd  int64
	fol     map[int32]*follower
	waiters map[ProduceID]waiter
	deposed bool
}

// NewLeader starts the state machine for a node that has just become cfg's
// leader at now. Followers' log ends are unknown until they fetch, so the
// high watermark does not move until every ISR member (a majority, in
// quorum mode) has fetched from this leader: it cannot jump past what a
// follower of the old leader never got.
func NewLeader(cfg Config, now time.Time) (*Leader, error) {
	if !slices.Contains(cfg.Replicas, cfg.Leader) {
		return nil, fmt.Errorf("replica: leader %d is not in the replica set %v", cfg.Leader, cfg.Replicas)
	}
	seen := map[int32]bool{}
	for _, r := range cfg.Replicas {
		if seen[r] {
			return nil, fmt.Errorf("replica: replica set %v names node %d twice", cfg.Replicas, r)
		}
		seen[r] = true
	}
	if cfg.MinISR < 1 {
		return nil, fmt.Errorf("replica: min.insync.replicas %d: must be >= 1", cfg.MinISR)
	}
	if cfg.LagTimeMax <= 0 {
		return nil, fmt.Errorf("replica: replica.lag.time.max.ms %v: must be > 0", cfg.LagTimeMax)
	}
	if cfg.HighWatermark < 0 || cfg.HighWatermark > cfg.LogEnd {
		return nil, fmt.Errorf("replica: high watermark %d outside the log [0, %d]", cfg.HighWatermark, cfg.LogEnd)
	}
	l := &Leader{cfg: cfg, pepoch: cfg.PartitionEpoch, hw: cfg.HighWatermark, logEnd: cfg.LogEnd,
		fol: map[int32]*follower{}, waiters: map[ProduceID]waiter{}}
	if err := l.checkISR(cfg.ISR); err != nil {
		return nil, err
	}
	l.isr = l.ordered(cfg.ISR)
	for _, r := range cfg.Replicas {
		if r != cfg.Leader {
			l.fol[r] = &follower{logEnd: -1, lastCaughtUp: now, lastFetch: now, lastFetchLeaderEnd: -1}
		}
	}
	return l, nil
}

func (l *Leader) checkISR(isr []int32) error {
	if !slices.Contains(isr, l.cfg.Leader) {
		return fmt.Errorf("replica: ISR %v leaves out the leader %d", isr, l.cfg.Leader)
	}
	for _, n := range isr {
		if !slices.Contains(l.cfg.Replicas, n) {
			return fmt.Errorf("replica: ISR %v names node %d, not in the replica set %v", isr, n, l.cfg.Replicas)
		}
	}
	return nil
}

// ordered returns the nodes of set in the replica set's order, once each,
// so equal ISRs compare equal and print the same.
func (l *Leader) ordered(set []int32) []int32 {
	out := []int32{}
	for _, r := range l.cfg.Replicas {
		if slices.Contains(set, r) {
			out = append(out, r)
		}
	}
	return out
}

// HW is the high watermark.
func (l *Leader) HW() int64 { return l.hw }

// LogEnd is the leader's log end as last reported.
func (l *Leader) LogEnd() int64 { return l.logEnd }

// ISR is the committed ISR and the partition epoch it was committed at.
func (l *Leader) ISR() ([]int32, int64) { return slices.Clone(l.isr), l.pepoch }

// Pending is the ISR change awaiting its etcd write, if any.
func (l *Leader) Pending() (ProposeISR, bool) {
	if l.pending == nil {
		return ProposeISR{}, false
	}
	return *l.pending, true
}

// FollowerLogEnd is what node is known to hold, -1 before its first fetch.
func (l *Leader) FollowerLogEnd(node int32) int64 {
	if f := l.fol[node]; f != nil {
		return f.logEnd
	}
	return -1
}

// required is how many committed ISR members acks=all needs: min ISR, and in
// quorum mode at least a majority of the replica set, since a write cannot
// reach a majority that is not there.
func (l *Leader) required() int {
	if l.cfg.Mode == ModeQuorum {
		return max(l.cfg.MinISR, len(l.cfg.Replicas)/2+1)
	}
	return l.cfg.MinISR
}

func (l *Leader) underMinISR() bool { return len(l.isr) < l.required() }

// CheckProduce answers, before a produce with acks=all is appended, whether
// it must be refused: NotEnoughReplicas while the ISR is below min ISR,
// NotLeaderOrFollower once deposed, else OK. acks=0 and acks=1 never ask.
func (l *Leader) CheckProduce() Result {
	switch {
	case l.deposed:
		return NotLeaderOrFollower
	case l.underMinISR():
		return NotEnoughReplicas
	}
	return OK
}

// Appended reports the leader's log end after an append (durable: strata
// fsyncs before it counts).
func (l *Leader) Appended(now time.Time, logEnd int64) ([]Output, error) {
	if logEnd < l.logEnd {
		return nil, fmt.Errorf("replica: leader log end %d is before %d: a leader's log never shrinks", logEnd, l.logEnd)
	}
	l.logEnd = logEnd
	return l.step(now), nil
}

// AwaitAck registers produce id, appended at [base, end), to be answered
// once the high watermark reaches end, or by deadline. It may be answered
// at once.
func (l *Leader) AwaitAck(now time.Time, id ProduceID, base, end int64, deadline time.Time) ([]Output, error) {
	if base >= end || end > l.logEnd {
		return nil, fmt.Errorf("replica: produce %d at [%d, %d): want base < end <= the log end %d", id, base, end, l.logEnd)
	}
	if _, dup := l.waiters[id]; dup {
		return nil, fmt.Errorf("replica: produce %d is already waiting", id)
	}
	switch {
	case l.deposed:
		return []Output{ProduceDone{id, NotLeaderOrFollower}}, nil
	case l.underMinISR():
		// The ISR shrank between CheckProduce and the append.
		return []Output{ProduceDone{id, NotEnoughReplicasAfterAppend}}, nil
	}
	l.waiters[id] = waiter{end: end, deadline: deadline}
	return l.step(now), nil
}

// FollowerFetched reports that node fetched at fetchOffset, which proves it
// holds every record below it (it truncated against this leader's epoch
// history before its first fetch).
func (l *Leader) FollowerFetched(now time.Time, node int32, fetchOffset int64) ([]Output, error) {
	f := l.fol[node]
	if f == nil {
		return nil, fmt.Errorf("replica: fetch from node %d, not a follower in the replica set %v", node, l.cfg.Replicas)
	}
	if fetchOffset < 0 || fetchOffset > l.logEnd {
		return nil, fmt.Errorf("replica: node %d fetched at %d, outside the leader's log [0, %d]", node, fetchOffset, l.logEnd)
	}
	// Kafka's lag clock: caught up now if it asked for the log end; caught
	// up as of its previous fetch if it now holds what the leader had then.
	if fetchOffset >= l.logEnd {
		f.lastCaughtUp = now
	} else if fetchOffset >= f.lastFetchLeaderEnd && f.lastFetch.After(f.lastCaughtUp) {
		f.lastCaughtUp = f.lastFetch
	}
	f.logEnd, f.fetchedSinceOut = fetchOffset, true
	f.lastFetch, f.lastFetchLeaderEnd = now, l.logEnd
	return l.step(now), nil
}

// Tick is the passing of time: lagging followers are proposed out of the
// ISR and produces past their deadline time out.
func (l *Leader) Tick(now time.Time) []Output { return l.step(now) }

// ISRCommitted reports that etcd holds isr at partitionEpoch: the write of a
// proposal, or a change the controller made. Produces waiting when the ISR
// falls below min ISR are answered NotEnoughReplicasAfterAppend.
func (l *Leader) ISRCommitted(now time.Time, isr []int32, partitionEpoch int64) ([]Output, error) {
	if partitionEpoch <= l.pepoch {
		return nil, fmt.Errorf("replica: ISR %v at partition epoch %d: not newer than the current %d", isr, partitionEpoch, l.pepoch)
	}
	if err := l.checkISR(isr); err != nil {
		return nil, err
	}
	next := l.ordered(isr)
	for _, n := range next {
		// A member that just joined starts a fresh lag window, or a follower
		// that reached the HW but not yet the log end would be proposed out
		// again at the next tick.
		if f := l.fol[n]; f != nil && !slices.Contains(l.isr, n) {
			f.lastCaughtUp = now
		}
	}
	for _, n := range l.isr {
		if f := l.fol[n]; f != nil && !slices.Contains(next, n) {
			f.fetchedSinceOut = false
		}
	}
	l.isr, l.pepoch, l.pending = next, partitionEpoch, nil
	var out []Output
	if l.underMinISR() {
		for _, id := range l.waiting() {
			out = append(out, ProduceDone{id, NotEnoughReplicasAfterAppend})
			delete(l.waiters, id)
		}
	}
	return append(out, l.step(now)...), nil
}

// ISRRefused reports that the pending proposal's compare-and-swap failed:
// nothing changes, and the next event may propose again.
func (l *Leader) ISRRefused(now time.Time) []Output {
	l.pending = nil
	return nil
}

// Deposed reports that this node no longer leads (a newer leader epoch in
// etcd, or its lease lost): every waiting produce is answered
// NotLeaderOrFollower, since only the new leader can tell whether it
// committed, and nothing is proposed any more.
func (l *Leader) Deposed() []Output {
	l.deposed, l.pending = true, nil
	var out []Output
	for _, id := range l.waiting() {
		out = append(out, ProduceDone{id, NotLeaderOrFollower})
		delete(l.waiters, id)
	}
	return out
}

func (l *Leader) waiting() []ProduceID {
	ids := make([]ProduceID, 0, len(l.waiters))
	for id := range l.waiters {
		ids = append(ids, id)
	}
	slices.Sort(ids)
	return ids
}

// step brings everything up to date after an event: the HW, the
// acknowledgements it allows, an ISR proposal, timeouts.
func (l *Leader) step(now time.Time) []Output {
	if l.deposed {
		return nil
	}
	var out []Output
	if hw := l.candidateHW(); hw > l.hw {
		l.hw = hw
		out = append(out, HighWatermark{hw})
	}
	for _, id := range l.waiting() {
		w := l.waiters[id]
		switch {
		case w.end <= l.hw:
			out = append(out, ProduceDone{id, OK})
		case !now.Before(w.deadline):
			out = append(out, ProduceDone{id, RequestTimedOut})
		default:
			continue
		}
		delete(l.waiters, id)
	}
	if p := l.proposal(now); p != nil {
		l.pending = p
		out = append(out, *p)
	}
	return out
}

func (l *Leader) end(node int32) int64 {
	if node == l.cfg.Leader {
		return l.logEnd
	}
	return l.fol[node].logEnd
}

// candidateHW is the offset acks=all lets consumers read to, or -1 while
// the ISR is below min ISR. In ISR mode it is the smallest log end over the
// maximal ISR: the committed one plus members a pending proposal adds (KIP-
// 497), since the new member may count once etcd has it. In quorum mode it
// is what a majority of the whole replica set holds.
func (l *Leader) candidateHW() int64 {
	if l.underMinISR() {
		return -1
	}
	if l.cfg.Mode == ModeQuorum {
		ends := make([]int64, 0, len(l.cfg.Replicas))
		for _, r := range l.cfg.Replicas {
			ends = append(ends, l.end(r))
		}
		slices.Sort(ends)
		slices.Reverse(ends)
		// Only a record of this leader's own epoch on a majority commits
		// what comes before it (Raft's rule): an older epoch's record on a
		// majority may still be replaced by a longer log of a later epoch
		// that the next election prefers.
		if hw := ends[len(l.cfg.Replicas)/2]; hw > l.cfg.EpochStart {
			return hw
		}
		return -1
	}
	members := l.isr
	if l.pending != nil {
		members = l.ordered(append(slices.Clone(l.isr), l.pending.ISR...))
	}
	hw := l.logEnd
	for _, n := range members {
		hw = min(hw, l.end(n))
	}
	return hw
}

// proposal is the ISR change to write, if one is due and none is pending: a
// member that has not been caught up for LagTimeMax leaves (unless it holds
// the whole log), a replica that has fetched since it left and holds the HW
// and the leader epoch's start joins.
func (l *Leader) proposal(now time.Time) *ProposeISR {
	if l.pending != nil {
		return nil
	}
	var next []int32
	var left, joined []int32
	for _, r := range l.cfg.Replicas {
		in := slices.Contains(l.isr, r)
		if r == l.cfg.Leader {
			next = append(next, r)
			continue
		}
		f := l.fol[r]
		switch {
		case in && f.logEnd < l.logEnd && now.Sub(f.lastCaughtUp) > l.cfg.LagTimeMax:
			left = append(left, r)
		case in:
			next = append(next, r)
		case f.fetchedSinceOut && f.logEnd >= l.hw && f.logEnd >= l.cfg.EpochStart:
			joined = append(joined, r)
			next = append(next, r)
		}
	}
	if len(left)+len(joined) == 0 {
		return nil
	}
	why := ""
	if len(left) > 0 {
		why = fmt.Sprintf("%v not caught up for %v", left, l.cfg.LagTimeMax)
	}
	if len(joined) > 0 {
		if why != "" {
			why += "; "
		}
		why += fmt.Sprintf("%v reached the high watermark %d", joined, l.hw)
	}
	return &ProposeISR{ISR: next, PartitionEpoch: l.pepoch, Why: why}
}
