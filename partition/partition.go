// Package partition is the leader's append path, in one place (what Kafka
// calls its ReplicaManager): Manager.Append checks that this node leads the
// partition, answers an idempotent producer's retry from the producer state
// (rebuilt from the log), records the leader epoch, appends to the store,
// tells replication and waits for the acks the produce asks for, all under
// the partition's one gate (Gates), which replication and the cluster's
// handoff take to change its leadership. It also keeps the long polls'
// wake-ups. It speaks no protocol: its errors are sentinels the front end
// maps to its codes (docs/seams.md).
package partition

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"time"

	"strata/engine/record"
	"strata/engine/store"
	"strata/metadata"
)

// Errors an append ends with, besides the store's (store.ErrUnknownShard:
// the partition's shard is not there, or not yet) and unexpected ones.
var (
	// ErrNotLeader: this node does not lead the partition, or stopped
	// leading it meanwhile.
	ErrNotLeader = errors.New("not the partition's leader")
	// ErrFenced (an ErrNotLeader): the metadata did not name this node the
	// partition's leader when its gate was taken: handed over, its lease
	// lost, or another node leads it. The metadata says why.
	ErrFenced = fmt.Errorf("%w: the metadata names no leadership of this node", ErrNotLeader)
	// ErrNotEnoughReplicas refuses an acks=all append before it is made:
	// the ISR is below min.insync.replicas.
	ErrNotEnoughReplicas = errors.New("partition: not enough in-sync replicas")
	// ErrNotEnoughReplicasAfterAppend: the append was made, but the ISR fell
	// below min.insync.replicas before it was acknowledged.
	ErrNotEnoughReplicasAfterAppend = errors.New("partition: not enough in-sync replicas after the append")
	// ErrTimedOut: the acks were not in within the produce's timeout.
	ErrTimedOut = errors.New("partition: timed out waiting for acks")
	// ErrDuplicateSequence: an idempotent batch already stored, too long
	// ago to say at which offsets.
	ErrDuplicateSequence = errors.New("partition: duplicate sequence, too old to answer")
	// ErrOutOfOrderSequence: an idempotent batch that does not follow the
	// producer's last one.
	ErrOutOfOrderSequence = errors.New("partition: out-of-order sequence")
	// ErrProducerFenced: an idempotent batch from an older epoch of its
	// producer than one already stored.
	ErrProducerFenced = errors.New("partition: producer epoch fenced")
)

// Meta is what an append asks of the metadata (metadata.Cluster, one
// node's or a cluster member's) while it holds the partition's gate: a
// partition's leader, which a cluster member gives as -1 while this node
// cannot lead it (its lease lost, or handing it over), its leader epoch
// (-1 on a single node, which keeps none) and its replicas.
type Meta interface {
	Self() int32
	Partition(topic string, partition int32) (info metadata.PartitionInfo, ok bool)
}

// leader is a partition as an append sees it.
type leader struct {
	leads    bool  // this node leads it now
	epoch    int32 // its leader epoch, -1: none kept
	replicas int   // with more than one, replication runs it
}

func (m *Manager) leader(topic string, p int32) leader {
	info, ok := m.meta.Partition(topic, p)
	if !ok {
		return leader{epoch: -1}
	}
	return leader{leads: info.Leader == m.meta.Self(), epoch: info.LeaderEpoch, replicas: len(info.Replicas)}
}

// Replication is the leader side of replication an append goes through
// (replica.Node). The caller holds the partition's gate (Gates.Append)
// around CheckAppend and Appended.
type Replication interface {
	// CheckAppend says whether an append to shard may be made now: only
	// while this node leads it at an epoch it has recorded (else
	// ErrNotLeader), and with acks=all only while the ISR holds
	// min.insync.replicas (else ErrNotEnoughReplicas). epoch is the
	// leader epoch it is made in, for AwaitAck.
	CheckAppend(shard string, acksAll bool) (epoch int32, err error)
	// Appended reports the leader's log end after an append to shard.
	Appended(shard string, logEnd int64)
	// AwaitAck waits until the records at [base, end) of shard are on what
	// acks=all asks for: ErrNotLeader, ErrNotEnoughReplicasAfterAppend or
	// ErrTimedOut if not.
	AwaitAck(ctx context.Context, shard string, epoch int32, base, end int64, timeout time.Duration) error
	// Leads reports whether replication has taken the lead of shard, at an
	// epoch it recorded: CheckAppend would not answer ErrNotLeader.
	Leads(shard string) bool
	// AwaitLogStart waits until every ISR member's log of shard starts at
	// or past start (records deleted below it), until ctx ends; an error
	// that is an ErrNotLeader if this node does not lead it or stops.
	AwaitLogStart(ctx context.Context, shard string, start int64) error
}

// Config configures a Manager.
type Config struct {
	// Meta says who leads each partition; nil is one node alone, which
	// leads every partition, with one replica and no epochs.
	Meta Meta
	// Replication runs the partitions with several replicas; nil: none
	// does, and appends to them are refused (ErrNotLeader).
	Replication Replication
	// Gates are the partitions' gates, shared with replication and the
	// cluster's handoff; nil: the Manager's own.
	Gates *Gates
	Log   *slog.Logger
}

// Manager appends to this node's partitions as their leader.
type Manager struct {
	store store.Store
	meta  Meta
	repl  Replication
	gates *Gates
	log   *slog.Logger
	seqs  *sequences // idempotent producers' recent batches
	hub   *hub       // wakes long polls when a partition gets records
}

// New makes the append path over st.
func New(st store.Store, cfg Config) *Manager {
	m := &Manager{store: st, meta: cfg.Meta, repl: cfg.Replication, gates: cfg.Gates, log: cfg.Log, hub: newHub()}
	if m.meta == nil {
		m.meta = alone{}
	}
	if m.gates == nil {
		m.gates = NewGates()
	}
	if m.log == nil {
		m.log = slog.Default()
	}
	m.seqs = newSequences(m.log)
	return m
}

// alone is the metadata of one node with no cluster.
type alone struct{}

func (alone) Self() int32 { return 0 }

func (alone) Partition(string, int32) (metadata.PartitionInfo, bool) {
	return metadata.PartitionInfo{Leader: 0, LeaderEpoch: -1, Replicas: []int32{0}}, true
}

// ID names a partition.
type ID struct {
	Topic     string
	Partition int32
}

// Batch is what one produce appends to one partition.
type Batch struct {
	Records []record.Record
	// Producer is the idempotent producer that sent them as one batch;
	// nil: none (or several batches, which are not checked).
	Producer *ProducerBatch
}

// ProducerBatch is an idempotent producer's batch: its sequences run from
// FirstSequence over LastOffsetDelta more (wrapping past math.MaxInt32).
type ProducerBatch struct {
	ID              int64
	Epoch           int16
	FirstSequence   int32
	LastOffsetDelta int32
}

// Acks is what an append waits for before it is answered.
type Acks int

const (
	// AckLeader: the leader's log has it (Kafka's acks=0 and acks=1).
	AckLeader Acks = iota
	// AckAll: what replication's acks=all mode asks for has it (Kafka's
	// acks=-1); on a partition with one replica, the leader's log.
	AckAll
)

// Append appends b to partition p as its leader and returns the offset of
// its first record; a retry of an idempotent batch already stored returns
// the offset it got then, and stores nothing. With AckAll on a replicated
// partition it returns once replication has the records, or timeout
// passed.
func (m *Manager) Append(ctx context.Context, p ID, b Batch, acks Acks, timeout time.Duration) (base int64, err error) {
	shard := store.ShardName(p.Topic, p.Partition)
	release := m.gates.Append(shard)
	base, end, epoch, replicated, err := m.appendGated(ctx, p, shard, b, acks)
	release()
	if err != nil || !replicated || acks != AckAll {
		return base, err
	}
	if err := m.repl.AwaitAck(ctx, shard, epoch, base, end, timeout); err != nil {
		return -1, err
	}
	return base, nil
}

// appendGated is Append while the gate is held: end is the offset after
// the batch's last record; epoch is replication's leader epoch, when it
// runs the partition (replicated).
func (m *Manager) appendGated(ctx context.Context, p ID, shard string, b Batch, acks Acks) (base, end int64, epoch int32, replicated bool, err error) {
	// Whether a partition is replicated is the metadata's to say, not
	// whether replication has set it up yet: until it has, its appends are
	// refused, never taken unreplicated.
	ld := m.leader(p.Topic, p.Partition)
	if ld.replicas > 1 {
		if m.repl == nil {
			return -1, -1, 0, false, ErrNotLeader
		}
		// Only while this node leads it at an epoch it has recorded, and
		// with acks=all only while the ISR holds min.insync.replicas.
		if epoch, err = m.repl.CheckAppend(shard, acks == AckAll); err != nil {
			return -1, -1, 0, false, err
		}
		replicated = true
	}
	if !ld.leads {
		// Handed over (or its lease lost) since the request was checked.
		return -1, -1, 0, false, ErrFenced
	}
	base, end, err = m.appendBatch(ctx, p, shard, b, replicated)
	if err == nil && replicated {
		m.repl.Appended(shard, end)
	}
	return base, end, epoch, replicated, err
}

// appendBatch appends one partition's batch, or answers a retry of one
// already stored with its offsets.
func (m *Manager) appendBatch(ctx context.Context, p ID, shard string, b Batch, replicated bool) (base, end int64, err error) {
	pb := b.Producer
	if pb == nil || pb.ID < 0 || pb.FirstSequence < 0 {
		base, err = m.appendRecords(ctx, p, shard, b.Records, replicated)
		return base, base + int64(len(b.Records)), err
	}
	key := seqKey{pb.ID, shard}
	unlock, err := m.seqs.lock(ctx, m.store, key)
	if errors.Is(err, store.ErrUnknownShard) {
		// Placed here a moment ago, its shard not made yet: the client
		// retries, as it does an append to a missing shard.
		return -1, -1, err
	}
	if err != nil {
		m.log.Error("partition: reading producer state", "shard", shard, "err", err)
		return -1, -1, fmt.Errorf("partition: reading %s's producer state: %w", shard, err)
	}
	defer unlock()
	recs := b.Records
	first, last := pb.FirstSequence, SeqAdd(pb.FirstSequence, pb.LastOffsetDelta)
	st := m.seqs.get(key)
	switch v, base := check(st, pb.Epoch, first, last); v {
	case duplicateBatch:
		return base, base + int64(len(recs)), nil // a retry of a batch already stored
	case unknownDuplicate:
		return -1, -1, ErrDuplicateSequence
	case outOfOrder:
		return -1, -1, ErrOutOfOrderSequence
	case fencedEpoch:
		return -1, -1, ErrProducerFenced
	case completeBatch:
		// The log was cut inside this batch (a crash mid-append): its
		// first part is stored, so only the rest is, and the client
		// gets the batch's first offset, never a second copy.
		stored := st.lastSeq
		if seqDist(first, stored)+1 >= int64(len(recs)) {
			return -1, -1, ErrOutOfOrderSequence // its sequences do not match its records
		}
		rest := recs[seqDist(first, stored)+1:]
		at, err := m.appendRecords(context.WithoutCancel(ctx), p, shard, rest, replicated)
		if err != nil {
			return -1, -1, err
		}
		m.seqs.complete(key, last, at, maxTimestamp(rest))
		m.log.Info("partition: completed a batch whose first part the log held", "shard", shard, "producer", pb.ID,
			"first_sequence", first, "stored_up_to", stored, "base_offset", base, "rest_at", at)
		return base, at + int64(len(rest)), nil
	}
	// Once queued, an append completes whether or not its client waits: it
	// must be recorded, or the client's retry on a new connection would be
	// appended again.
	base, err = m.appendRecords(context.WithoutCancel(ctx), p, shard, recs, replicated)
	if err != nil {
		return -1, -1, err
	}
	m.seqs.put(key, pb.Epoch, first, last, base, maxTimestamp(recs))
	return base, base + int64(len(recs)), nil
}

// appendRecords appends to shard; a partition that replication does not
// run records its leader epoch first (one that it runs has it already).
func (m *Manager) appendRecords(ctx context.Context, p ID, shard string, recs []record.Record, replicated bool) (int64, error) {
	if !replicated {
		if err := m.assignEpoch(ctx, p, shard); err != nil {
			return -1, err
		}
	}
	base, err := m.store.Append(ctx, shard, recs)
	if err != nil {
		m.log.Error("partition: append", "shard", shard, "err", err)
		return -1, err
	}
	m.hub.wake(shard)
	return int64(base), nil
}

// assignEpoch records the partition's current leader epoch in its shard's
// history from the log end on, before an append: the same epoch again is a
// no-op in the engine, so this costs a comparison once the epoch is there.
// A history already past the cluster's epoch means this node's view of the
// partition is behind: the client is sent to re-read the metadata.
func (m *Manager) assignEpoch(ctx context.Context, p ID, shard string) error {
	ld := m.leader(p.Topic, p.Partition)
	if ld.epoch < 0 {
		return nil // a single node: no history
	}
	if !ld.leads {
		// The view moved on since the append was let in: this node's log
		// must not get the next leader's epoch.
		return ErrNotLeader
	}
	ep, ok1 := m.store.(store.Epochs)
	rep, ok2 := m.store.(store.Replica)
	if !ok1 || !ok2 {
		return nil
	}
	end, err := rep.LogEnd(ctx, shard)
	if err == nil {
		err = ep.AssignEpoch(ctx, shard, ld.epoch, end)
	}
	switch {
	case err == nil, errors.Is(err, store.ErrUnknownShard):
		return err
	case errors.Is(err, store.ErrEpochOrder):
		m.log.Warn("partition: the shard's leader-epoch history is past the partition's epoch: refusing the append until the metadata catches up",
			"shard", shard, "epoch", ld.epoch, "err", err)
		return fmt.Errorf("%w: %w", ErrNotLeader, err)
	default:
		m.log.Error("partition: recording the leader epoch", "shard", shard, "epoch", ld.epoch, "err", err)
		return fmt.Errorf("partition: recording leader epoch %d of %s: %w", ld.epoch, shard, err)
	}
}

// LeadTaken reports whether replication, if this node runs any, has taken
// the lead of shard, so appends to it are not refused for want of it.
func (m *Manager) LeadTaken(shard string) bool { return m.repl == nil || m.repl.Leads(shard) }

// AwaitLogStart waits, for a replicated partition, until its ISR has
// deleted below start too (Kafka's low watermark, which DeleteRecords waits
// for), so no successor serves the deleted records again. The followers'
// long polls are woken first: their next fetch deletes and reports the new
// start. Without replication there is nothing to wait for.
func (m *Manager) AwaitLogStart(ctx context.Context, shard string, start int64) error {
	if m.repl == nil {
		return nil
	}
	m.hub.wake(shard)
	return m.repl.AwaitLogStart(ctx, shard, start)
}

// Producers lists the idempotent producers known on shard, by id, reading
// its state from the log first if nothing has since the start.
func (m *Manager) Producers(ctx context.Context, shard string) ([]Producer, error) {
	return m.seqs.producers(ctx, m.store, shard)
}

// ForgetProducers drops what is known of shard's idempotent producers: the
// shard was deleted, or this node has just become its leader (replication
// tells it, replica.NodeConfig.Lead), and the state is rebuilt from its log
// (which holds every batch the old leader committed) at the next produce.
func (m *Manager) ForgetProducers(shard string) { m.seqs.forget(shard) }

func maxTimestamp(recs []record.Record) int64 {
	ts := int64(-1)
	for _, r := range recs {
		ts = max(ts, r.Timestamp)
	}
	return ts
}
