package main

import (
	"context"
	"errors"
	"fmt"
	"hash/fnv"
	"log/slog"
	"net"
	"slices"
	"strconv"
	"sync"

	"strata/api/kafka"
	"strata/cluster"
	"strata/replica"
	"strata/topicconfig"
)

// clusterView answers the Kafka front end from the cluster's metadata in
// etcd (docs/cluster.md): the live brokers, the topics, each partition's
// leader and epoch; topic creation and deletion go to etcd, where the
// controller places them.
type clusterView struct {
	m    *cluster.Member
	self int32
}

var _ kafka.Cluster = clusterView{}

func (c clusterView) Self() int32 { return c.self }

func (c clusterView) Brokers() []kafka.Broker {
	var out []kafka.Broker
	for _, n := range c.m.Nodes() {
		if b, ok := broker(n); ok {
			out = append(out, b)
		}
	}
	return out
}

func broker(n cluster.Node) (kafka.Broker, bool) {
	host, port, err := net.SplitHostPort(n.KafkaAddr)
	if err != nil {
		return kafka.Broker{}, false
	}
	p, err := strconv.ParseInt(port, 10, 32)
	if err != nil {
		return kafka.Broker{}, false
	}
	return kafka.Broker{NodeID: n.ID, Host: host, Port: int32(p)}, true
}

func (c clusterView) Controller() int32 { return c.m.Controller() }

// Changed wakes CreateTopics' wait for the new partitions' leaders.
func (c clusterView) Changed() <-chan struct{} { return c.m.Changed() }

func (c clusterView) Topics(context.Context) (map[string]int32, error) {
	out := map[string]int32{}
	for name, t := range c.m.Topics() {
		out[name] = t.Partitions
	}
	return out, nil
}

// Partition is the controller's placement, except that a node whose lease
// is lost leads nothing until it registers again: another may lead by then.
func (c clusterView) Partition(topic string, p int32) (kafka.PartitionInfo, bool) {
	part, ok := c.m.Partition(topic, p)
	if !ok {
		return kafka.PartitionInfo{}, false
	}
	info := kafka.PartitionInfo{Leader: part.Leader, LeaderEpoch: part.Epoch, Replicas: part.Replicas, ISR: part.ISR}
	if info.Leader == c.self && !c.m.Leads(topic, p) {
		info.Leader = -1 // the lease is lost: another may lead by now
	}
	return info, true
}

func (c clusterView) CreateTopic(ctx context.Context, topic string, partitions int32, rf int16, configs map[string]string) error {
	err := c.m.CreateTopicWithConfigs(ctx, topic, partitions, rf, configs)
	switch {
	case errors.Is(err, cluster.ErrTopicDeleting):
		return fmt.Errorf("%w (%v)", kafka.ErrTopicDeleting, err)
	case errors.Is(err, cluster.ErrTopicExists):
		return fmt.Errorf("%w (%v)", kafka.ErrTopicExists, err)
	case errors.Is(err, cluster.ErrInvalidReplicationFactor):
		return &kafka.InvalidReplicationError{Factor: rf, Why: fmt.Sprintf("%d live brokers", len(c.m.Nodes()))}
	}
	return partitionLimit(err)
}

func (c clusterView) DeleteTopic(ctx context.Context, topic string) error {
	err := c.m.DeleteTopic(ctx, topic)
	if errors.Is(err, cluster.ErrUnknownTopic) {
		return kafka.ErrUnknownTopic
	}
	return err
}

func (c clusterView) CreatePartitions(ctx context.Context, topic string, count int32) error {
	err := c.m.CreatePartitions(ctx, topic, count)
	var perr *cluster.PartitionCountError
	switch {
	case errors.Is(err, cluster.ErrUnknownTopic):
		return kafka.ErrUnknownTopic
	case errors.As(err, &perr):
		return &kafka.InvalidPartitionsError{Topic: topic, Has: perr.Has, Asked: perr.Asked}
	}
	return partitionLimit(err)
}

func partitionLimit(err error) error {
	var lerr *cluster.PartitionLimitError
	if errors.As(err, &lerr) {
		return &kafka.PartitionLimitError{Max: lerr.Max, Has: lerr.Has, More: lerr.More}
	}
	return err
}

// TopicConfigs are the configs in the topic's etcd record, as this node's
// view has them.
func (c clusterView) TopicConfigs(topic string) map[string]string {
	t, _ := c.m.Topic(topic)
	return t.Configs
}

// AlterTopicConfigs rewrites the topic's etcd record by compare-and-swap.
func (c clusterView) AlterTopicConfigs(ctx context.Context, topic string, change func(map[string]string) (map[string]string, error)) error {
	_, err := c.m.AlterTopicConfigs(ctx, topic, change)
	if errors.Is(err, cluster.ErrUnknownTopic) {
		return kafka.ErrUnknownTopic
	}
	return err
}

// Coordinator picks a group's node by rendezvous hashing over the live
// nodes: when a node joins or leaves, only the groups it wins or held move,
// not most of them as with a hash modulo the node count.
func (c clusterView) Coordinator(group string) kafka.Broker {
	best, bestScore := kafka.Broker{NodeID: -1}, uint64(0)
	for _, n := range c.m.Nodes() {
		b, ok := broker(n)
		if !ok {
			continue
		}
		h := fnv.New64a()
		h.Write([]byte(group))
		h.Write([]byte{0})
		h.Write([]byte(strconv.Itoa(int(n.ID))))
		if score := h.Sum64(); best.NodeID < 0 || score > bestScore {
			best, bestScore = b, score
		}
	}
	return best
}

var (
	_ kafka.AppendGuard = clusterView{}
	_ kafka.SplitLog    = clusterView{}
)

// GuardAppend holds a partition's appends against its handoff at a roll.
func (c clusterView) GuardAppend(topic string, p int32) (func(), bool) {
	return c.m.GuardAppend(topic, p)
}

// Parts are the spans of a partition whose leadership moved at rolls.
func (c clusterView) Parts(topic string, p int32) []kafka.LogPart {
	part, ok := c.m.Partition(topic, p)
	if !ok || len(part.Spans) < 2 {
		return nil
	}
	out := make([]kafka.LogPart, len(part.Spans))
	for i, s := range part.Spans {
		out[i] = kafka.LogPart{Start: s.Start, Node: s.Node}
	}
	return out
}

// replicaMeta is the cluster's metadata as replication reads and writes it
// (replica.Meta): the partitions with several replicas that name this node.
type replicaMeta struct {
	m      *cluster.Member
	self   int32
	broker topicconfig.Broker
	warned *sync.Map // topics whose configs were warned about
}

var _ replica.Meta = replicaMeta{}

func (r replicaMeta) Live() bool               { return r.m.Live() }
func (r replicaMeta) Changed() <-chan struct{} { return r.m.Changed() }
func (r replicaMeta) Assignments() []replica.Assignment {
	var out []replica.Assignment
	live := map[int32]bool{}
	for _, n := range r.m.Nodes() {
		live[n.ID] = true
	}
	for name, t := range r.m.Topics() {
		if t.ReplicationFactor <= 1 {
			continue
		}
		cfg := topicconfig.Resolve(t.Configs, r.broker)
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
			if !ok || !slices.Contains(part.Replicas, r.self) {
				continue
			}
			if part.Leader == r.self && r.m.LostLog(part) {
				part.Leader = -1 // until the controller names a leader that kept its log
			}
			out = append(out, replica.Assignment{Topic: name, Partition: p, Leader: part.Leader, Epoch: part.Epoch,
				Replicas: part.Replicas, ISR: part.ISR, Rev: rev, MinISR: int(cfg.MinInsyncReplicas), Mode: mode, LeaderLive: live[part.Leader],
				Unclean: cfg.UncleanLeaderElection})
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
	return r.m.RecordSeal(ctx, topic, p, leaderEpoch, cluster.SealRecord{Start: s.Start, Last: s.Last, CRC: s.CRC, Replicas: s.Replicas})
}

func (r replicaMeta) Seals(ctx context.Context, topic string, p int32, from, to uint64) ([]replica.SealRecord, error) {
	recs, err := r.m.Seals(ctx, topic, p, from, to)
	out := make([]replica.SealRecord, len(recs))
	for i, s := range recs {
		out[i] = replica.SealRecord{Seal: replica.Seal{Start: s.Start, Last: s.Last, CRC: s.CRC}, Replicas: s.Replicas}
	}
	return out, err
}

func (r replicaMeta) PruneSeals(ctx context.Context, topic string, p int32, below uint64) (int, error) {
	return r.m.PruneSeals(ctx, topic, p, below)
}
