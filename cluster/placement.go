package cluster

import (
	"cmp"
	"fmt"
	"maps"
	"slices"
	"strings"

	"strata/topicconfig"
)

// Placement is a pure function of what the controller knows: no etcd, no
// clock, no goroutines. The controller feeds it the view it watches and
// writes what it returns, each write a compare-and-swap against the record
// it replaces, fenced by the controller's term (controller.go). The
// datadriven scripts in testdata/placement drive it step by step.
//
// The rules:
//   - A topic's missing partitions are placed on live nodes: the leader is
//     the node leading the fewest partitions (then the fewest bytes, then
//     the lowest id), the followers the nodes holding the fewest replicas;
//     replicas are rf distinct nodes, the leader first. A topic whose
//     replication factor exceeds the live nodes is not placed at all, and
//     the decision says why; it is placed once enough nodes are live.
//   - A partition whose leader is dead goes to the first live node of its
//     ISR, whose ISR becomes its live members; with none (replication
//     factor 1: the data is on that node only) it becomes leaderless
//     (Leader -1) and its ISR is kept, so the node that holds its data
//     takes it back when it returns. A topic with
//     unclean.leader.election.enable takes its first live replica instead,
//     with an ISR of itself.
//   - A quorum topic's (strata.acks.all=quorum) dead leader is replaced by
//     the replica with the longest log among a live majority of its
//     replicas, once they have reported their logs (Candidates); until
//     then nothing is written and the decision says what it waits for.
//   - A dead follower of a partition whose leader is live leaves its ISR
//     (the leader is live and in it, so it never empties); the leader, not
//     the controller, adds a returning follower back once it has caught up.
//   - A live node registered with another data folder than the one an
//     ISR knew it by (Partition.Dirs, Node.Dir) lost its log: it is out of
//     sync. It leaves the ISR, and may not lead: a leader that came back so
//     is replaced as a dead one is, and with no other in-sync replica live
//     the partition waits leaderless for one. KIP-966's rule: a replica
//     that lost its log may not lead until it has caught up; it catches up
//     as a follower and its leader adds it back. Only an unclean election
//     (or a partition with one replica, whose only copy that was) takes it.
//   - Every leader change, to leaderless too, bumps the epoch; an ISR
//     change alone does not.
//   - Nothing else moves: a node that joins takes new topics' partitions at
//     once (it leads the fewest), and existing partitions at their next
//     roll (planRolls chooses, the leader hands over: HandOff), never their
//     history.

// TopicPartition names one partition.
type TopicPartition struct {
	Topic     string
	Partition int32
}

func (tp TopicPartition) String() string { return fmt.Sprintf("%s-%d", tp.Topic, tp.Partition) }

// NodeLoad is a live node and the bytes it keeps, when known (0 otherwise).
// The partitions it leads are counted from the partitions' records.
type NodeLoad struct {
	ID    int32
	Bytes int64
	// Dir is the node's data folder as it registered it (Node.Dir).
	Dir string
	// Damaged are the partitions whose local copy it found damaged
	// (Node.Damaged).
	Damaged []TopicPartition
}

// State is what a placement decision starts from.
type State struct {
	Live       []NodeLoad
	Topics     map[string]Topic
	Partitions map[TopicPartition]Partition
	// Defaults are the broker's settings the topics' configs fall back to
	// (unclean.leader.election.enable).
	Defaults topicconfig.Broker
	// Candidates are the log positions followers of quorum topics reported
	// (ReportCandidate), by partition.
	Candidates map[TopicPartition][]Candidate
}

// A Candidate is a follower's log position, reported for a quorum
// election while the partition's record was at LeaderEpoch: the epoch of
// its last record and its log end.
type Candidate struct {
	Node        int32 `json:"-"`
	LeaderEpoch int32 `json:"leader_epoch"`
	Epoch       int32 `json:"epoch"`
	End         int64 `json:"end"`
}

// A Write is one partition record to write. Prev is the record it replaces
// (nil for a new partition): the controller writes it only if the record in
// etcd is still Prev.
type Write struct {
	Partition Partition
	Prev      *Partition
	Why       string
}

func (w Write) String() string {
	p := w.Partition
	tp := TopicPartition{p.Topic, p.Partition}
	if w.Prev == nil {
		return fmt.Sprintf("%s: new, leader %d, epoch %d, replicas %v, isr %v: %s", tp, p.Leader, p.Epoch, p.Replicas, p.ISR, w.Why)
	}
	if p.Leader == w.Prev.Leader && p.Epoch == w.Prev.Epoch && p.Next == w.Prev.Next {
		return fmt.Sprintf("%s: leader %d, isr %v -> %v: %s", tp, p.Leader, w.Prev.ISR, p.ISR, w.Why)
	}
	if p.Leader == w.Prev.Leader && p.Epoch == w.Prev.Epoch && p.Next == 0 {
		return fmt.Sprintf("%s: leader %d keeps the next segment (node %d was chosen): %s", tp, p.Leader, w.Prev.Next, w.Why)
	}
	if p.Leader == w.Prev.Leader && p.Epoch == w.Prev.Epoch {
		return fmt.Sprintf("%s: leader %d, next segment on node %d: %s", tp, p.Leader, p.Next, w.Why)
	}
	return fmt.Sprintf("%s: leader %d -> %d, epoch %d -> %d, replicas %v, isr %v -> %v: %s",
		tp, w.Prev.Leader, p.Leader, w.Prev.Epoch, p.Epoch, p.Replicas, w.Prev.ISR, p.ISR, w.Why)
}

// Decision is what Place returns: the writes in order, and why any topic
// was left unplaced.
type Decision struct {
	Writes   []Write
	Problems []string
}

// Place decides the partition records to write so that every topic is
// placed, every partition's leader is live or, when none may lead, marked
// leaderless, and no ISR of a live leader names a dead node.
func Place(s State) Decision {
	l := newLoads(s)
	var d Decision
	for _, tp := range sortedPartitions(s.Partitions) {
		t, ok := s.Topics[tp.Topic]
		if !ok {
			continue // its topic is being deleted with it
		}
		p := s.Partitions[tp]
		cfg := topicconfig.Resolve(t.Configs, s.Defaults)
		quorum := len(p.Replicas) > 1 && cfg.AcksAll == "quorum"
		if l.leads(p) {
			if w, ok := voidReports(p, s.Candidates[tp], l); quorum && ok {
				d.Writes = append(d.Writes, w)
			} else if w, ok := shrinkISR(p, l); ok {
				d.Writes = append(d.Writes, w)
			}
			continue
		}
		var w Write
		if _, live := l.live[p.Leader]; live && quorum {
			// Its leader came back without its log. Its followers report
			// theirs only for a leader that is gone: leaderless first.
			next, prev := p.clone(), p
			next.Leader, next.Epoch = -1, p.Epoch+1
			next.ISR = l.synced(p)
			w, ok = Write{Partition: next, Prev: &prev, Why: fmt.Sprintf("%s: a quorum election of the others follows", l.rebornWhy(p))}, true
		} else if quorum {
			var problem string
			if w, ok, problem = quorumElect(p, s.Candidates[tp], l); problem != "" {
				d.Problems = append(d.Problems, problem)
			}
		} else {
			w, ok = failover(p, l, cfg.UncleanLeaderElection)
		}
		if ok {
			d.Writes = append(d.Writes, w)
			l.lead(p.Leader, -1)
			l.lead(w.Partition.Leader, +1)
		}
	}
	for _, t := range sortedTopics(s.Topics) {
		var missing []int32
		for i := int32(0); i < t.Partitions; i++ {
			if _, ok := s.Partitions[TopicPartition{t.Name, i}]; !ok {
				missing = append(missing, i)
			}
		}
		if len(missing) == 0 {
			continue
		}
		if int(t.ReplicationFactor) > len(l.live) {
			d.Problems = append(d.Problems, fmt.Sprintf("topic %s: replication factor %d needs %d live nodes, %d are live: %d partitions not placed",
				t.Name, t.ReplicationFactor, t.ReplicationFactor, len(l.live), len(missing)))
			continue
		}
		for _, i := range missing {
			replicas := l.choose(int(t.ReplicationFactor), -1)
			p := Partition{Topic: t.Name, Partition: i, Leader: replicas[0], Epoch: 0, Replicas: replicas, ISR: slices.Clone(replicas)}
			if t.ReplicationFactor > 1 {
				p.Dirs = l.dirsOf(Partition{}, p.ISR)
			}
			if t.ReplicationFactor == 1 {
				// With one replica the log can move at rolls: the spans
				// say where each part went.
				p.Spans = []Span{{Start: 0, Node: replicas[0]}}
			}
			d.Writes = append(d.Writes, Write{Partition: p, Why: "new topic"})
		}
	}
	planRolls(s, l, &d)
	return d
}

// planRolls chooses, for partitions whose leaders lead two or more
// partitions more than the least loaded live node, that node for the next
// active segment (Next): the leader hands the partition over at its next
// roll (HandOff), and its sealed segments stay where they are, so nothing
// historical is copied. A chosen node that died is forgotten. Only nodes
// that hold no part of the partition are chosen: a node's log of a
// partition is one run of offsets. Partitions with several replicas wait
// for replication (issue #13), which moves a replica set, not one node.
func planRolls(s State, l *loads, d *Decision) {
	written := map[TopicPartition]bool{}
	for _, w := range d.Writes {
		written[TopicPartition{w.Partition.Topic, w.Partition.Partition}] = true
	}
	for _, tp := range sortedPartitions(s.Partitions) {
		p := s.Partitions[tp]
		t, known := s.Topics[tp.Topic]
		if !known || written[tp] || t.ReplicationFactor != 1 || p.Leader < 0 {
			continue
		}
		if _, live := l.live[p.Leader]; !live {
			continue
		}
		if p.Next != 0 {
			if _, live := l.live[p.Next]; live && !p.held(p.Next) {
				continue
			}
			next := p.clone()
			next.Next = 0
			d.Writes = append(d.Writes, Write{Partition: next, Prev: &p, Why: fmt.Sprintf("node %d, chosen for the next segment, is gone", p.Next)})
			l.lead(p.Next, -1)
			l.lead(p.Leader, +1)
			continue
		}
		to := l.least(func(id int32) bool { return !p.held(id) })
		if to == nil {
			continue
		}
		from := l.live[p.Leader]
		if from.leaders-to.leaders < 2 {
			continue
		}
		next := p.clone()
		next.Next = to.id
		d.Writes = append(d.Writes, Write{Partition: next, Prev: &p,
			Why: fmt.Sprintf("node %d leads %d partitions, node %d leads %d", p.Leader, from.leaders, to.id, to.leaders)})
		from.leaders--
		to.leaders++
	}
}

// HandOff is the record a partition's leader writes at a roll, when the
// controller chose Next: Next leads from end (the old leader's log end) on,
// at the next epoch, and the old leader keeps the offsets before end. ok is
// false when p has no handoff planned.
func HandOff(p Partition, end int64) (Partition, bool) {
	if p.Next == 0 || p.Leader < 0 || p.Next == p.Leader {
		return Partition{}, false
	}
	next := p.clone()
	if len(next.Spans) == 0 {
		next.Spans = []Span{{Start: 0, Node: p.Leader}}
	}
	next.Spans = append(next.Spans, Span{Start: end, Node: p.Next})
	next.Leader, next.Epoch, next.Next = p.Next, p.Epoch+1, 0
	next.Replicas, next.ISR = []int32{p.Next}, []int32{p.Next}
	return next, true
}

// failover returns the write that gives p a live leader, or makes it
// leaderless, when its leader is not live. unclean lets a live replica
// outside the ISR lead when no ISR member is live.
func failover(p Partition, l *loads, unclean bool) (Write, bool) {
	if l.leads(p) {
		return Write{}, false
	}
	synced := l.synced(p)
	liveISR := l.liveOf(synced)
	next := p.clone()
	next.Epoch = p.Epoch + 1
	prev := p
	was := fmt.Sprintf("leader %d is dead", p.Leader)
	if nl, live := l.live[p.Leader]; live {
		was = fmt.Sprintf("leader %d is back with a new data folder", p.Leader)
		if slices.Contains(nl.damaged, TopicPartition{p.Topic, p.Partition}) {
			was = fmt.Sprintf("leader %d's copy is damaged", p.Leader)
		}
	}
	switch {
	case len(liveISR) > 0:
		next.Leader, next.ISR = liveISR[0], liveISR
		next.Dirs = l.dirsOf(p, next.ISR)
		why := fmt.Sprintf("node %d is back and holds its data", next.Leader)
		if p.Leader >= 0 {
			why = fmt.Sprintf("%s; %d is in sync", was, next.Leader)
		}
		return Write{Partition: next, Prev: &prev, Why: why}, true
	case unclean && len(l.liveOf(p.Replicas)) > 0:
		// A replica with its own log, however short, before one that lost
		// it.
		cands := l.liveOf(p.Replicas)
		slices.SortStableFunc(cands, func(a, b int32) int { return cmp.Compare(b2i(l.reborn(p, a)), b2i(l.reborn(p, b))) })
		next.Leader = cands[0]
		next.ISR = []int32{next.Leader}
		next.Dirs = l.dirsOf(p, next.ISR)
		if p.Leader < 0 {
			was = "leaderless"
		}
		return Write{Partition: next, Prev: &prev, Why: fmt.Sprintf("unclean election: %s, no in-sync replica of %v is live; %d was not in sync and may lack acknowledged records",
			was, p.ISR, next.Leader)}, true
	case p.Leader >= 0:
		// The ISR is kept, less any member that lost its log: its nodes
		// hold every acknowledged record, and the first to return leads
		// again.
		next.Leader, next.ISR = -1, synced
		next.Dirs = l.dirsOf(p, next.ISR)
		return Write{Partition: next, Prev: &prev, Why: fmt.Sprintf("%s and no in-sync replica is live", was)}, true
	case len(synced) < len(p.ISR):
		// Leaderless, and a member came back without its log: it leaves
		// the ISR, so the record no longer names it as holding the data.
		next.Epoch = p.Epoch
		next.ISR = synced
		next.Dirs = l.dirsOf(p, next.ISR)
		return Write{Partition: next, Prev: &prev, Why: fmt.Sprintf("%s: out of the ISR", l.rebornWhy(p))}, true
	}
	return Write{}, false // leaderless, and still no in-sync replica is live
}

// shrinkISR returns the write that takes p's dead followers out of its
// ISR, when its leader is live. A follower that comes back stays out until
// its leader adds it, caught up (ChangeISR).
func shrinkISR(p Partition, l *loads) (Write, bool) {
	live := l.liveOf(l.synced(p))
	if len(live) == len(p.ISR) || !slices.Contains(live, p.Leader) {
		return Write{}, false
	}
	var dead []int32
	for _, r := range p.ISR {
		if _, ok := l.live[r]; !ok {
			dead = append(dead, r)
		}
	}
	next, prev := p.clone(), p
	next.ISR = live
	next.Dirs = l.dirsOf(p, next.ISR)
	var what []string
	switch {
	case len(dead) == 1:
		what = append(what, fmt.Sprintf("node %d is dead", dead[0]))
	case len(dead) > 1:
		what = append(what, fmt.Sprintf("nodes %v are dead", dead))
	}
	if why := l.rebornWhy(p); why != "" {
		what = append(what, why)
	}
	return Write{Partition: next, Prev: &prev, Why: strings.Join(what, "; ") + ": out of the ISR"}, true
}

// leads reports whether p's leader may go on leading: it is live, with the
// data folder the ISR knew it by.
func (l *loads) leads(p Partition) bool {
	_, live := l.live[p.Leader]
	return live && !l.reborn(p, p.Leader)
}

// reborn reports whether replica n of p is live with another data folder
// than the one p last knew it in sync with: it lost the log that made it a
// member of the ISR (or a voter of a quorum election). A partition with one
// replica has no other copy to prefer.
func (l *loads) reborn(p Partition, n int32) bool {
	if len(p.Replicas) < 2 {
		return false
	}
	nl, live := l.live[n]
	if live && slices.Contains(nl.damaged, TopicPartition{p.Topic, p.Partition}) {
		return true
	}
	want, known := p.Dirs[n]
	// A member without a recorded folder (a record from before folders had
	// an identity) is taken at its word.
	return live && known && want != "" && nl.dir != want
}

// synced is p's ISR without the members that lost their logs.
func (l *loads) synced(p Partition) []int32 {
	out := []int32{}
	for _, n := range p.ISR {
		if !l.reborn(p, n) {
			out = append(out, n)
		}
	}
	return out
}

// rebornWhy says which of p's ISR members lost their logs, "" if none.
func (l *loads) rebornWhy(p Partition) string {
	var ns []string
	for _, n := range p.ISR {
		switch {
		case !l.reborn(p, n):
		case slices.Contains(l.live[n].damaged, TopicPartition{p.Topic, p.Partition}):
			ns = append(ns, fmt.Sprintf("node %d's copy is damaged", n))
		default:
			ns = append(ns, fmt.Sprintf("node %d is back with a new data folder (%s, in sync as %s)", n, l.live[n].dir, p.Dirs[n]))
		}
	}
	return strings.Join(ns, "; ")
}

// dirsOf is p's replicas' data folders once isr is its ISR: a member that
// joins it (or has none recorded yet) is in sync with the folder it is
// live with now; the others keep theirs. Nil when none is known.
func (l *loads) dirsOf(p Partition, isr []int32) map[int32]string {
	live := map[int32]string{}
	for n, nl := range l.live {
		live[n] = nl.dir
	}
	return joinDirs(p, isr, live)
}

// joinDirs is dirsOf with the live nodes' folders in live.
func joinDirs(p Partition, isr []int32, live map[int32]string) map[int32]string {
	out := maps.Clone(p.Dirs)
	for _, n := range isr {
		if _, had := p.Dirs[n]; had && slices.Contains(p.ISR, n) {
			continue
		}
		if d := live[n]; d != "" {
			if out == nil {
				out = map[int32]string{}
			}
			out[n] = d
		}
	}
	return out
}

// quorumElect returns the write that makes the replica with the longest
// log among a live majority of p's replicas its leader, once that majority
// has reported (cands). A record a quorum topic acknowledged is on a
// majority of the replicas, so on one of any majority; the largest (last
// epoch, log end) of a majority holds it. Until a majority reported, it
// says what it waits for.
func quorumElect(p Partition, cands []Candidate, l *loads) (Write, bool, string) {
	tp := TopicPartition{p.Topic, p.Partition}
	need := len(p.Replicas)/2 + 1
	var got []Candidate
	for _, c := range cands {
		// A replica that lost its log (reborn) is no voter: what a quorum
		// acknowledged may have been on it only, of the majority.
		if _, live := l.live[c.Node]; live && c.LeaderEpoch == p.Epoch && slices.Contains(p.Replicas, c.Node) && !l.reborn(p, c.Node) {
			got = append(got, c)
		}
	}
	// Ties go to the ISR's order, then the replicas'.
	rank := func(n int32) int {
		if i := slices.Index(p.ISR, n); i >= 0 {
			return i
		}
		return len(p.ISR) + slices.Index(p.Replicas, n)
	}
	slices.SortFunc(got, func(a, b Candidate) int {
		return cmp.Or(cmp.Compare(b.Epoch, a.Epoch), cmp.Compare(b.End, a.End), cmp.Compare(rank(a.Node), rank(b.Node)))
	})
	was := fmt.Sprintf("leader %d is dead", p.Leader)
	if p.Leader < 0 {
		was = "leaderless"
	}
	if len(got) < need {
		var from []int32
		for _, c := range got {
			from = append(from, c.Node)
		}
		slices.Sort(from)
		return Write{}, false, fmt.Sprintf("%s: %s; a quorum election waits for %d of replicas %v to report their logs, %d did %v",
			tp, was, need, p.Replicas, len(got), from)
	}
	win := got[0]
	next, prev := p.clone(), p
	next.Leader, next.Epoch = win.Node, p.Epoch+1
	next.ISR = nil
	for _, c := range got {
		if c.Epoch == win.Epoch && c.End == win.End {
			next.ISR = append(next.ISR, c.Node)
		}
	}
	next.Dirs = l.dirsOf(p, next.ISR)
	return Write{Partition: next, Prev: &prev, Why: fmt.Sprintf("quorum election: %s; %d has the longest log (epoch %d, end %d) of %d reports from %d replicas",
		was, win.Node, win.Epoch, win.End, len(got), len(p.Replicas))}, true, ""
}

// voidReports returns the write that gives p's live leader a new epoch
// when followers reported their logs for an election at its current one:
// it came back (re-registered) before a majority reported. A follower that
// reported appends nothing more at that epoch, and its report, left to
// count in a later election, would say less than its log holds; the new
// epoch deletes the reports and lets the followers fetch again.
func voidReports(p Partition, cands []Candidate, l *loads) (Write, bool) {
	var from []int32
	for _, c := range cands {
		if c.LeaderEpoch == p.Epoch {
			from = append(from, c.Node)
		}
	}
	if len(from) == 0 {
		return Write{}, false
	}
	slices.Sort(from)
	next, prev := p.clone(), p
	next.Epoch = p.Epoch + 1
	if live := l.liveOf(l.synced(p)); slices.Contains(live, p.Leader) {
		next.ISR = live
		next.Dirs = l.dirsOf(p, next.ISR)
	}
	return Write{Partition: next, Prev: &prev, Why: fmt.Sprintf("leader %d is back before its quorum election: a new epoch voids the reports of %v", p.Leader, from)}, true
}

// liveOf is the live nodes of ns, in their order.
func (l *loads) liveOf(ns []int32) []int32 {
	var out []int32
	for _, n := range ns {
		if _, ok := l.live[n]; ok {
			out = append(out, n)
		}
	}
	return out
}

type nodeLoad struct {
	id       int32
	dir      string
	damaged  []TopicPartition
	bytes    int64
	leaders  int
	replicas int
}

type loads struct{ live map[int32]*nodeLoad }

func newLoads(s State) *loads {
	l := &loads{live: map[int32]*nodeLoad{}}
	for _, n := range s.Live {
		l.live[n.ID] = &nodeLoad{id: n.ID, bytes: n.Bytes, dir: n.Dir, damaged: n.Damaged}
	}
	for _, p := range s.Partitions {
		// A partition counts on the node chosen for its next segment: the
		// load it is planned to have.
		if _, ok := l.live[p.Next]; ok && p.Next != 0 {
			l.lead(p.Next, +1)
		} else {
			l.lead(p.Leader, +1)
		}
		for _, r := range p.Replicas {
			if n, ok := l.live[r]; ok {
				n.replicas++
			}
		}
	}
	return l
}

// least is the live node leading the fewest partitions among those ok
// accepts (then the fewest bytes, then the lowest id); nil if none.
func (l *loads) least(ok func(id int32) bool) *nodeLoad {
	var best *nodeLoad
	for _, n := range l.live {
		if !ok(n.id) {
			continue
		}
		if best == nil || cmp.Or(cmp.Compare(n.leaders, best.leaders), cmp.Compare(n.bytes, best.bytes), cmp.Compare(n.id, best.id)) < 0 {
			best = n
		}
	}
	return best
}

func (l *loads) lead(id int32, delta int) {
	if n, ok := l.live[id]; ok {
		n.leaders += delta
	}
}

// choose picks n distinct live nodes, the leader first, and counts them:
// the leader is the node leading the fewest partitions, the followers the
// nodes holding the fewest replicas; ties go to fewer bytes, then the lower
// id, or to prefer when it is among the tied.
func (l *loads) choose(n int, prefer int32) []int32 {
	nodes := make([]*nodeLoad, 0, len(l.live))
	for _, nl := range l.live {
		nodes = append(nodes, nl)
	}
	tie := func(a, b *nodeLoad) int {
		if c := cmp.Compare(a.bytes, b.bytes); c != 0 {
			return c
		}
		if (a.id == prefer) != (b.id == prefer) {
			if a.id == prefer {
				return -1
			}
			return 1
		}
		return cmp.Compare(a.id, b.id)
	}
	slices.SortFunc(nodes, func(a, b *nodeLoad) int {
		return cmp.Or(cmp.Compare(a.leaders, b.leaders), tie(a, b))
	})
	leader := nodes[0]
	rest := nodes[1:]
	slices.SortFunc(rest, func(a, b *nodeLoad) int {
		return cmp.Or(cmp.Compare(a.replicas, b.replicas), tie(a, b))
	})
	out := []int32{leader.id}
	leader.leaders++
	leader.replicas++
	for _, f := range rest[:n-1] {
		out = append(out, f.id)
		f.replicas++
	}
	return out
}

func b2i(b bool) int {
	if b {
		return 1
	}
	return 0
}

func sortedPartitions(m map[TopicPartition]Partition) []TopicPartition {
	out := make([]TopicPartition, 0, len(m))
	for tp := range m {
		out = append(out, tp)
	}
	slices.SortFunc(out, func(a, b TopicPartition) int {
		return cmp.Or(strings.Compare(a.Topic, b.Topic), cmp.Compare(a.Partition, b.Partition))
	})
	return out
}

// sortedTopics orders topics by creation, so earlier topics are placed
// first when several wait, and by name among equals.
func sortedTopics(m map[string]Topic) []Topic {
	out := make([]Topic, 0, len(m))
	for _, t := range m {
		out = append(out, t)
	}
	slices.SortFunc(out, func(a, b Topic) int {
		return cmp.Or(a.Created.Compare(b.Created), strings.Compare(a.Name, b.Name))
	})
	return out
}
