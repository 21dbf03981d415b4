package replicatest

import (
	"context"
	"errors"
	"fmt"
	"maps"
	"slices"
	"sort"
	"sync"

	"strata/engine/store"
	"strata/metadata"
	"strata/replica"
)

// Meta is a fake of the cluster's partition records in etcd, as
// replication reads and writes them (replica.Meta): each partition's
// leader, epoch, replicas and ISR under a revision that every ISR write
// compares and swaps, the nodes' leases, and the seal records. The
// controller's part (electing a leader when one dies) is the script's:
// Elect.
type Meta struct {
	mu      sync.Mutex
	parts   map[string]*Partition // by shard
	live    map[int32]bool
	seals   map[string]map[uint64]replica.SealRecord
	version uint64
	changed chan struct{}
	// Writes is every write a node made, in order, for the trace.
	writes []string
	// reads is, by node, the version its last Assignments saw.
	reads map[int32]uint64
}

// Partition is one partition's record.
type Partition struct {
	Topic     string
	Partition int32
	Leader    int32
	Epoch     int32
	Replicas  []int32
	ISR       []int32
	Rev       int64
	MinISR    int
	Mode      replica.Mode
	Unclean   bool
}

// NewMeta is an empty metadata store.
func NewMeta() *Meta {
	return &Meta{parts: map[string]*Partition{}, live: map[int32]bool{}, seals: map[string]map[uint64]replica.SealRecord{},
		changed: make(chan struct{}), reads: map[int32]uint64{}}
}

// changeLocked closes the channel the nodes wait on: they reconcile.
func (m *Meta) changeLocked() {
	m.version++
	close(m.changed)
	m.changed = make(chan struct{})
}

// Create records a new partition led by leader at epoch 0, its ISR every
// replica.
func (m *Meta) Create(p Partition) {
	m.mu.Lock()
	defer m.mu.Unlock()
	if p.ISR == nil {
		p.ISR = slices.Clone(p.Replicas)
	}
	p.Rev = 1
	m.parts[store.ShardName(p.Topic, p.Partition)] = &p
	m.changeLocked()
}

// SetLive gives node its lease or takes it away.
func (m *Meta) SetLive(node int32, live bool) {
	m.mu.Lock()
	defer m.mu.Unlock()
	m.live[node] = live
	m.changeLocked()
}

// Elect makes leader the partition's leader at the next epoch, with isr
// as its ISR (nil: as it is), as the controller does when a leader dies.
func (m *Meta) Elect(shard string, leader int32, isr []int32) error {
	m.mu.Lock()
	defer m.mu.Unlock()
	p := m.parts[shard]
	if p == nil {
		return fmt.Errorf("no partition %s", shard)
	}
	if isr != nil {
		p.ISR = slices.Clone(isr)
	}
	p.Leader, p.Epoch, p.Rev = leader, p.Epoch+1, p.Rev+1
	m.changeLocked()
	return nil
}

// Get is a copy of shard's record.
func (m *Meta) Get(shard string) (Partition, bool) {
	m.mu.Lock()
	defer m.mu.Unlock()
	p, ok := m.parts[shard]
	if !ok {
		return Partition{}, false
	}
	c := *p
	c.Replicas, c.ISR = slices.Clone(p.Replicas), slices.Clone(p.ISR)
	return c, true
}

// shardsOf lists the shards of the partitions that name node among their
// replicas.
func (m *Meta) shardsOf(node int32) []string {
	m.mu.Lock()
	defer m.mu.Unlock()
	var out []string
	for s, p := range m.parts {
		if slices.Contains(p.Replicas, node) {
			out = append(out, s)
		}
	}
	slices.Sort(out)
	return out
}

// SealsOf is shard's seal records, by start.
func (m *Meta) SealsOf(shard string) []replica.SealRecord {
	m.mu.Lock()
	defer m.mu.Unlock()
	var out []replica.SealRecord
	for _, s := range m.seals[shard] {
		s.Replicas = sorted(s.Replicas)
		out = append(out, s)
	}
	sort.Slice(out, func(i, j int) bool { return out[i].Start < out[j].Start })
	return out
}

// Writes returns the writes made since the last call, sorted: a
// leader's ISR change and its seal records go out on goroutines of their
// own, in either order.
func (m *Meta) Writes() []string {
	m.mu.Lock()
	defer m.mu.Unlock()
	w := m.writes
	m.writes = nil
	slices.Sort(w)
	return w
}

// state is what changes when the metadata does, for Cluster.settle.
func (m *Meta) state() (version uint64, reads map[int32]uint64) {
	m.mu.Lock()
	defer m.mu.Unlock()
	return m.version, maps.Clone(m.reads)
}

func sorted(s []int32) []int32 {
	s = slices.Clone(s)
	slices.Sort(s)
	return s
}

// appendView is the metadata as node's append path asks it
// (partition.Meta): as a cluster member, it names no leader of a
// partition this node leads while its lease is lost.
func (m *Meta) appendView(node int32) appendView { return appendView{m, node} }

type appendView struct {
	m    *Meta
	self int32
}

func (v appendView) Self() int32 { return v.self }

func (v appendView) Partition(topic string, partition int32) (metadata.PartitionInfo, bool) {
	v.m.mu.Lock()
	defer v.m.mu.Unlock()
	p := v.m.parts[store.ShardName(topic, partition)]
	if p == nil {
		return metadata.PartitionInfo{}, false
	}
	leader := p.Leader
	if leader == v.self && !v.m.live[v.self] {
		leader = -1
	}
	return metadata.PartitionInfo{Leader: leader, LeaderEpoch: p.Epoch, Replicas: slices.Clone(p.Replicas), ISR: slices.Clone(p.ISR)}, true
}

// For is the metadata as node sees it.
func (m *Meta) For(node int32) replica.Meta { return view{m, node} }

type view struct {
	m    *Meta
	self int32
}

// errNotLeader is what a write by a node that does not lead at the epoch
// it names gets (cluster.ErrNotLeader).
var errNotLeader = errors.New("replicatest: not the partition's leader at that epoch")

func (v view) Live() bool {
	v.m.mu.Lock()
	defer v.m.mu.Unlock()
	return v.m.live[v.self]
}

func (v view) Changed() <-chan struct{} {
	v.m.mu.Lock()
	defer v.m.mu.Unlock()
	return v.m.changed
}

func (v view) Assignments() []replica.Assignment {
	v.m.mu.Lock()
	defer v.m.mu.Unlock()
	v.m.reads[v.self] = v.m.version
	var out []replica.Assignment
	shards := make([]string, 0, len(v.m.parts))
	for s := range v.m.parts {
		shards = append(shards, s)
	}
	slices.Sort(shards)
	for _, s := range shards {
		p := v.m.parts[s]
		if len(p.Replicas) <= 1 || !slices.Contains(p.Replicas, v.self) {
			continue
		}
		out = append(out, replica.Assignment{Topic: p.Topic, Partition: p.Partition, Leader: p.Leader, Epoch: p.Epoch,
			Replicas: slices.Clone(p.Replicas), ISR: slices.Clone(p.ISR), Rev: p.Rev, MinISR: p.MinISR, Mode: p.Mode,
			LeaderLive: v.m.live[p.Leader], Unclean: p.Unclean})
	}
	return out
}

// leads finds the partition that self leads at epoch, holding its lease;
// m.mu is held.
func (v view) leads(topic string, partition int32, epoch int32) (*Partition, error) {
	p := v.m.parts[store.ShardName(topic, partition)]
	if p == nil || !v.m.live[v.self] || p.Leader != v.self || p.Epoch != epoch {
		return nil, fmt.Errorf("%w: node %d, %s-%d at epoch %d", errNotLeader, v.self, topic, partition, epoch)
	}
	return p, nil
}

func (v view) ChangeISR(ctx context.Context, topic string, partition int32, leaderEpoch int32, isr []int32, rev int64) (int64, error) {
	v.m.mu.Lock()
	defer v.m.mu.Unlock()
	p, err := v.leads(topic, partition, leaderEpoch)
	if err != nil {
		return 0, err
	}
	if p.Rev != rev {
		return 0, fmt.Errorf("replicatest: ISR change of %s-%d at rev %d, the record is at %d", topic, partition, rev, p.Rev)
	}
	p.ISR, p.Rev = slices.Clone(isr), p.Rev+1
	v.m.writes = append(v.m.writes, fmt.Sprintf("node %d: isr %s-%d %v rev %d", v.self, topic, partition, isr, p.Rev))
	v.m.changeLocked()
	return p.Rev, nil
}

func (v view) ReportCandidate(ctx context.Context, topic string, partition int32, lastEpoch int32, logEnd int64) error {
	v.m.mu.Lock()
	defer v.m.mu.Unlock()
	v.m.writes = append(v.m.writes, fmt.Sprintf("node %d: candidate %s-%d last epoch %d log end %d", v.self, topic, partition, lastEpoch, logEnd))
	return nil
}

// RecordSeal adds to a record, never rewrites it with other bytes, as
// cluster.Member.RecordSeal does.
func (v view) RecordSeal(ctx context.Context, topic string, partition int32, leaderEpoch int32, s replica.SealRecord) error {
	v.m.mu.Lock()
	defer v.m.mu.Unlock()
	if _, err := v.leads(topic, partition, leaderEpoch); err != nil {
		return err
	}
	shard := store.ShardName(topic, partition)
	if v.m.seals[shard] == nil {
		v.m.seals[shard] = map[uint64]replica.SealRecord{}
	}
	next := replica.SealRecord{Seal: s.Seal, Replicas: slices.Clone(s.Replicas)}
	if prev, ok := v.m.seals[shard][s.Start]; ok {
		if prev.Seal != s.Seal {
			return fmt.Errorf("replicatest: seal %s of %s, recorded as %s", s.Seal, shard, prev.Seal)
		}
		next = prev
		for _, r := range s.Replicas {
			if !slices.Contains(next.Replicas, r) {
				next.Replicas = append(next.Replicas, r)
			}
		}
	}
	v.m.seals[shard][s.Start] = next
	v.m.writes = append(v.m.writes, fmt.Sprintf("node %d: seal %s %s replicas %v", v.self, shard, s.Seal, sorted(next.Replicas)))
	return nil
}

func (v view) Seals(ctx context.Context, topic string, partition int32, from, to uint64) ([]replica.SealRecord, error) {
	v.m.mu.Lock()
	defer v.m.mu.Unlock()
	var out []replica.SealRecord
	for start, s := range v.m.seals[store.ShardName(topic, partition)] {
		if start >= from && start <= to {
			s.Replicas = slices.Clone(s.Replicas)
			out = append(out, s)
		}
	}
	sort.Slice(out, func(i, j int) bool { return out[i].Start < out[j].Start })
	return out, nil
}

func (v view) SealBelow(ctx context.Context, topic string, partition int32, start uint64) (replica.SealRecord, bool, error) {
	v.m.mu.Lock()
	defer v.m.mu.Unlock()
	var best replica.SealRecord
	found := false
	for s, r := range v.m.seals[store.ShardName(topic, partition)] {
		if s < start && (!found || s > best.Start) {
			best, found = r, true
		}
	}
	best.Replicas = slices.Clone(best.Replicas)
	return best, found, nil
}

func (v view) PruneSeals(ctx context.Context, topic string, partition int32, below uint64) (int, error) {
	v.m.mu.Lock()
	defer v.m.mu.Unlock()
	shard := store.ShardName(topic, partition)
	k := 0
	for start, s := range v.m.seals[shard] {
		if s.Last < below {
			delete(v.m.seals[shard], start)
			k++
		}
	}
	if k > 0 {
		v.m.writes = append(v.m.writes, fmt.Sprintf("node %d: pruned %d seals of %s below %d", v.self, k, shard, below))
	}
	return k, nil
}
