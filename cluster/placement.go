package cluster

import (
	"cmp"
	"fmt"
	"slices"
	"strings"
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
//     ISR; with none (replication factor 1: the data is on that node only)
//     it becomes leaderless (Leader -1) and its ISR is kept, so the node
//     that holds its data takes it back when it returns.
//   - Every leader change, to leaderless too, bumps the epoch.
//   - Nothing else moves: a node that joins takes new topics' partitions at
//     once (it leads the fewest), and existing partitions only at a roll
//     (PlaceRoll), never their history.

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
}

// State is what a placement decision starts from.
type State struct {
	Live       []NodeLoad
	Topics     map[string]Topic
	Partitions map[TopicPartition]Partition
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
// placed and every partition's leader is live or, when no in-sync replica
// is, marked leaderless.
func Place(s State) Decision {
	l := newLoads(s)
	var d Decision
	for _, tp := range sortedPartitions(s.Partitions) {
		if _, ok := s.Topics[tp.Topic]; !ok {
			continue // its topic is being deleted with it
		}
		p := s.Partitions[tp]
		if w, ok := failover(p, l); ok {
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
			d.Writes = append(d.Writes, Write{
				Partition: Partition{Topic: t.Name, Partition: i, Leader: replicas[0], Epoch: 0,
					Replicas: replicas, ISR: slices.Clone(replicas)},
				Why: "new topic",
			})
		}
	}
	return d
}

// PlaceRoll is the hook for a roll: the partition's active segment is
// sealed and the next one may start on another node. It returns the write
// that moves the partition's leadership (and replicas) to the least loaded
// live nodes, or false when the partition is best left where it is: it
// moves only when that leaves the leaders more evenly spread (the current
// leader leads at least two more partitions than the new one). Sealed
// segments stay on the nodes that wrote them (the catalog lists where), so
// nothing historical is copied.
//
// Nothing calls it yet: the lead wires it when a roll reaches the
// controller (the leader's engine reports SegmentSealed) and once Fetch can
// read a sealed segment from the node that holds it.
func PlaceRoll(s State, tp TopicPartition) (Write, bool) {
	p, ok := s.Partitions[tp]
	t, known := s.Topics[tp.Topic]
	if !ok || !known || p.Leader < 0 {
		return Write{}, false
	}
	l := newLoads(s)
	cur, live := l.live[p.Leader]
	if !live || int(t.ReplicationFactor) > len(l.live) {
		return Write{}, false
	}
	l.lead(p.Leader, -1)
	for _, r := range p.Replicas {
		if n, ok := l.live[r]; ok {
			n.replicas--
		}
	}
	replicas := l.choose(int(t.ReplicationFactor), p.Leader)
	// Counts as they were: choose counted this partition on its leader.
	from, to := cur.leaders+1, l.live[replicas[0]].leaders-1
	if replicas[0] == p.Leader || from-to < 2 {
		return Write{}, false
	}
	next := Partition{Topic: p.Topic, Partition: p.Partition, Leader: replicas[0], Epoch: p.Epoch + 1,
		Replicas: replicas, ISR: slices.Clone(replicas)}
	return Write{Partition: next, Prev: &p, Why: fmt.Sprintf("roll: node %d leads %d partitions, node %d leads %d",
		p.Leader, from, replicas[0], to)}, true
}

// failover returns the write that gives p a live leader, or makes it
// leaderless, when its leader is not live.
func failover(p Partition, l *loads) (Write, bool) {
	if _, ok := l.live[p.Leader]; ok {
		return Write{}, false
	}
	var liveISR []int32
	for _, r := range p.ISR {
		if _, ok := l.live[r]; ok {
			liveISR = append(liveISR, r)
		}
	}
	next := p
	next.Replicas = slices.Clone(p.Replicas)
	next.Epoch = p.Epoch + 1
	prev := p
	switch {
	case len(liveISR) > 0:
		next.Leader, next.ISR = liveISR[0], liveISR
		why := fmt.Sprintf("node %d is back and holds its data", next.Leader)
		if p.Leader >= 0 {
			why = fmt.Sprintf("leader %d is dead; %d is in sync", p.Leader, next.Leader)
		}
		return Write{Partition: next, Prev: &prev, Why: why}, true
	case p.Leader >= 0:
		// The ISR is kept: its nodes hold every acknowledged record, and the
		// first to return leads again.
		next.Leader, next.ISR = -1, slices.Clone(p.ISR)
		return Write{Partition: next, Prev: &prev, Why: fmt.Sprintf("leader %d is dead and no in-sync replica is live", p.Leader)}, true
	}
	return Write{}, false // leaderless, and still no in-sync replica is live
}

type nodeLoad struct {
	id       int32
	bytes    int64
	leaders  int
	replicas int
}

type loads struct{ live map[int32]*nodeLoad }

func newLoads(s State) *loads {
	l := &loads{live: map[int32]*nodeLoad{}}
	for _, n := range s.Live {
		l.live[n.ID] = &nodeLoad{id: n.ID, bytes: n.Bytes}
	}
	for _, p := range s.Partitions {
		l.lead(p.Leader, +1)
		for _, r := range p.Replicas {
			if n, ok := l.live[r]; ok {
				n.replicas++
			}
		}
	}
	return l
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
