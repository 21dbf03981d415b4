package cluster

import (
	"context"
	"log/slog"
	"slices"
	"sync"

	"strata/replica"
	"strata/topicconfig"
)

// ReplicaMeta is the cluster's metadata as replication reads and writes it
// (replica.Meta): the partitions with several replicas that name this node,
// with their topics' settings resolved over the broker's.
func (m *Member) ReplicaMeta() replica.Meta { return replicaMeta{m: m, warned: &sync.Map{}} }

type replicaMeta struct {
	m      *Member
	warned *sync.Map // topics whose configs were warned about
}

func (r replicaMeta) Live() bool               { return r.m.Live() }
func (r replicaMeta) Changed() <-chan struct{} { return r.m.Changed() }

// Assignments are replica assignments: a leader whose node lost its log
// (a new data folder) leads nothing until the controller names one that
// kept it.
func (r replicaMeta) Assignments() []replica.Assignment {
	var out []replica.Assignment
	self := r.m.Self()
	live := map[int32]bool{}
	for _, n := range r.m.Nodes() {
		live[n.ID] = true
	}
	for name, t := range r.m.TopicRecords() {
		if t.ReplicationFactor <= 1 {
			continue
		}
		cfg := topicconfig.Resolve(t.Configs, r.m.cfg.TopicDefaults)
		mode, err := replica.ParseMode(cfg.AcksAll)
		if err != nil {
			// CreateTopics checked it: only a hand-edited etcd gets here.
			if _, seen := r.warned.LoadOrStore(name, true); !seen {
				slog.Warn("replica: the topic's strata.acks.all is neither isr nor quorum: taken as isr", "topic", name, "err", err)
			}
			mode = replica.ModeISR
		}
		for p := int32(0); p < t.Partitions; p++ {
			part, rev, ok := r.m.PartitionRev(name, p)
			if !ok || !slices.Contains(part.Replicas, self) {
				continue
			}
			if !r.m.ShardMadeFor(name, p, t.Incarnation) {
				continue // its shard is still being made, or is a deleted topic's of the same name
			}
			if part.Leader == self && r.m.LostLog(part) {
				part.Leader = -1 // until the controller names a leader that kept its log
			}
			out = append(out, replica.Assignment{Topic: name, Partition: p, Leader: part.Leader, Epoch: part.Epoch,
				Replicas: part.Replicas, ISR: part.ISR, Rev: rev, MinISR: int(cfg.MinInsyncReplicas), Mode: mode, LeaderLive: live[part.Leader],
				Unclean: cfg.UncleanLeaderElection, Incarnation: t.Incarnation})
		}
	}
	return out
}

func (r replicaMeta) ChangeISR(ctx context.Context, topic string, p int32, leaderEpoch int32, isr []int32, rev int64) (int64, error) {
	return r.m.ChangeISR(ctx, topic, p, leaderEpoch, isr, rev)
}

func (r replicaMeta) ReportCandidate(ctx context.Context, topic string, p int32, lastEpoch int32, logEnd int64) error {
	return r.m.ReportCandidate(ctx, topic, p, lastEpoch, logEnd)
}

func (r replicaMeta) RecordSeal(ctx context.Context, topic string, p int32, leaderEpoch int32, s replica.SealRecord) error {
	return r.m.RecordSeal(ctx, topic, p, leaderEpoch, SealRecord{Start: s.Start, Last: s.Last, CRC: s.CRC, Replicas: s.Replicas})
}

func (r replicaMeta) Seals(ctx context.Context, topic string, p int32, from, to uint64) ([]replica.SealRecord, error) {
	recs, err := r.m.Seals(ctx, topic, p, from, to)
	out := make([]replica.SealRecord, len(recs))
	for i, s := range recs {
		out[i] = replica.SealRecord{Seal: replica.Seal{Start: s.Start, Last: s.Last, CRC: s.CRC}, Replicas: s.Replicas}
	}
	return out, err
}

func (r replicaMeta) SealBelow(ctx context.Context, topic string, p int32, start uint64) (replica.SealRecord, bool, error) {
	s, ok, err := r.m.SealBelow(ctx, topic, p, start)
	return replica.SealRecord{Seal: replica.Seal{Start: s.Start, Last: s.Last, CRC: s.CRC}, Replicas: s.Replicas}, ok, err
}

func (r replicaMeta) PruneSeals(ctx context.Context, topic string, p int32, below uint64) (int, error) {
	return r.m.PruneSeals(ctx, topic, p, below)
}
