package kafka

import (
	"context"
	"errors"
	"fmt"

	"strata/engine/store"

	"github.com/twmb/franz-go/pkg/kerr"
)

// Cluster says who serves what: the brokers, the topics, each partition's
// leader, its epoch and replicas, and each group's coordinator; and it
// creates and deletes topics. A single node answers for itself from its
// store (singleNode); a cluster answers from its meta-service (cmd wires
// one in).
type Cluster interface {
	// Self is this node's id.
	Self() int32
	// Brokers lists the live brokers.
	Brokers() []Broker
	// Controller is the node that places partitions (-1: none known).
	Controller() int32
	// Topics lists the topics and their partition counts.
	Topics(ctx context.Context) (map[string]int32, error)
	// Partition is a partition's leader (-1: none now), its epoch (-1:
	// none to check) and its replicas and in-sync replicas; ok is false
	// when the partition does not exist.
	Partition(topic string, partition int32) (info PartitionInfo, ok bool)
	// CreateTopic creates a topic with its configs (checked already; nil:
	// none) (ErrTopicExists if it exists; an *InvalidReplicationError if
	// the replication factor cannot be met).
	CreateTopic(ctx context.Context, topic string, partitions int32, replicationFactor int16, configs map[string]string) error
	// DeleteTopic deletes a topic (ErrUnknownTopic if it does not exist).
	DeleteTopic(ctx context.Context, topic string) error
	// CreatePartitions grows a topic to count partitions, the new ones
	// empty (ErrUnknownTopic; an *InvalidPartitionsError if count is not
	// more than it has).
	CreatePartitions(ctx context.Context, topic string, count int32) error
	// Coordinator is the node that coordinates a group.
	Coordinator(group string) Broker
	// TopicConfigs is a topic's own configs (nil: none), from memory:
	// Produce asks on every request.
	TopicConfigs(topic string) map[string]string
	// AlterTopicConfigs replaces a topic's configs with what change makes
	// of the current ones (which it must not modify), durably and without
	// losing a concurrent change (ErrUnknownTopic if the topic does not
	// exist; an error of change's is returned as it is).
	AlterTopicConfigs(ctx context.Context, topic string, change func(map[string]string) (map[string]string, error)) error
}

// AppendGuard is implemented by a cluster that moves partitions between
// nodes (at rolls): an append holds the guard from its leadership check to
// its end, so a handoff, which takes it, knows that no append is in flight
// and that none follows.
type AppendGuard interface {
	// GuardAppend reports whether this node leads the partition now; if
	// it does, release must be called when the append is done.
	GuardAppend(topic string, partition int32) (release func(), leads bool)
}

// SplitLog is implemented by a cluster whose partitions' logs can be split
// across nodes: when a partition moved at a roll, its sealed segments
// stayed on the node that wrote them. The leader reads those offsets from
// that node (Peers), so clients fetch every offset from the leader.
type SplitLog interface {
	// Parts lists the parts of a partition's log in offset order: from
	// each Start up to the next one's, the offsets are on Node. None: the
	// whole log is the leader's.
	Parts(topic string, partition int32) []LogPart
}

// LogPart is a run of a partition's offsets held by one node.
type LogPart struct {
	Start int64
	Node  int32
}

var (
	ErrTopicExists  = errors.New("topic exists")
	ErrUnknownTopic = errors.New("unknown topic")
	// ErrTopicDeleting (an ErrTopicExists): the name is taken until the
	// topic's deletion is cleared.
	ErrTopicDeleting = fmt.Errorf("%w: marked for deletion", ErrTopicExists)
)

// InvalidReplicationError refuses a replication factor the cluster cannot
// give a topic.
type InvalidReplicationError struct {
	Factor int16
	Why    string
}

func (e *InvalidReplicationError) Error() string {
	return fmt.Sprintf("replication factor %d: %s", e.Factor, e.Why)
}

// InvalidPartitionsError refuses a partition count that does not grow a
// topic: Has is what it has.
type InvalidPartitionsError struct {
	Topic      string
	Has, Asked int32
}

// Error is Kafka's message for it.
func (e *InvalidPartitionsError) Error() string {
	if e.Asked == e.Has {
		return fmt.Sprintf("Topic already has %d partition(s).", e.Has)
	}
	return fmt.Sprintf("The topic %s currently has %d partition(s); %d would not be an increase.", e.Topic, e.Has, e.Asked)
}

// PartitionLimitError refuses partitions that would take the broker (a
// cluster: the whole cluster) past kafka.max_partitions.
type PartitionLimitError struct {
	Max, Has, More int
}

// Error is what CreateTopics and CreatePartitions answer with it.
func (e *PartitionLimitError) Error() string {
	return fmt.Sprintf("%d more partitions exceed the cluster's kafka.max_partitions (%d; it has %d).", e.More, e.Max, e.Has)
}

// Broker is one node as clients reach it.
type Broker struct {
	NodeID int32
	Host   string
	Port   int32
}

// PartitionInfo is where a partition is served.
type PartitionInfo struct {
	Leader        int32
	LeaderEpoch   int32
	Replicas, ISR []int32
}

// singleNode is the one node strata runs as without a cluster: it leads
// every partition and coordinates every group, at the address it listens
// on, and its topics are its store's shards. Its one leader epoch never
// changes, so Metadata reports none (-1) and clients skip epoch checks;
// OffsetForLeaderEpoch answers for epoch 0.
type singleNode struct{ s *Server }

func (n singleNode) self() Broker {
	n.s.openMu.Lock()
	defer n.s.openMu.Unlock()
	return Broker{NodeID: 0, Host: n.s.host, Port: n.s.port}
}

func (n singleNode) Self() int32 { return 0 }

func (n singleNode) Brokers() []Broker { return []Broker{n.self()} }

func (n singleNode) Controller() int32 { return 0 }

func (n singleNode) Partition(string, int32) (PartitionInfo, bool) {
	return PartitionInfo{Leader: 0, LeaderEpoch: -1, Replicas: []int32{0}, ISR: []int32{0}}, true
}

func (n singleNode) Coordinator(string) Broker { return n.self() }

// Topics groups the store's shards by topic: topic -> partition count.
func (n singleNode) Topics(ctx context.Context) (map[string]int32, error) {
	shards, err := n.s.store.Shards(ctx)
	if err != nil {
		return nil, err
	}
	out := map[string]int32{}
	for _, sh := range shards {
		if tp, ok := store.ParseShard(sh); ok {
			out[tp.Topic] = max(out[tp.Topic], tp.Partition+1)
		}
	}
	return out, nil
}

func (n singleNode) CreateTopic(ctx context.Context, topic string, partitions int32, rf int16, configs map[string]string) error {
	n.s.topicsMu.Lock()
	defer n.s.topicsMu.Unlock()
	if rf > 1 {
		return &InvalidReplicationError{Factor: rf, Why: "a single node keeps one copy"}
	}
	topics, err := n.Topics(ctx)
	if err != nil {
		return err
	}
	if _, ok := topics[topic]; ok {
		return ErrTopicExists
	}
	// The configs first: the engine a partition is made in is one of them.
	// A crash before the partitions leaves configs the next create replaces.
	if err := n.s.topicStore.SetConfigs(topic, func(map[string]string) (map[string]string, error) { return configs, nil }); err != nil {
		return fmt.Errorf("topic %s: storing its configs: %w", topic, err)
	}
	// All partitions in one step (store.BatchCreator): one by one, each
	// paid its own manifest commit and syncs, 10-27 s for 10,000.
	names := make([]string, partitions)
	for p := range names {
		names[p] = store.ShardName(topic, int32(p))
	}
	err = store.CreateShards(ctx, n.s.store, names)
	if !errors.Is(err, store.ErrShardExists) {
		return err
	}
	// One exists though the topic did not (made by another way into the
	// store than topics): the rest one by one.
	for p := int32(0); p < partitions; p++ {
		err := n.s.store.CreateShard(ctx, store.ShardName(topic, p))
		if errors.Is(err, store.ErrShardExists) {
			if p == 0 {
				return ErrTopicExists
			}
			continue
		}
		if err != nil {
			return err
		}
	}
	return nil
}

func (n singleNode) DeleteTopic(ctx context.Context, topic string) error {
	n.s.topicsMu.Lock()
	defer n.s.topicsMu.Unlock()
	topics, err := n.Topics(ctx)
	if err != nil {
		return err
	}
	parts, ok := topics[topic]
	if !ok {
		return ErrUnknownTopic
	}
	for p := int32(0); p < parts; p++ {
		if err := n.s.store.DeleteShard(ctx, store.ShardName(topic, p)); err != nil && !errors.Is(err, store.ErrUnknownShard) {
			return fmt.Errorf("partition %d: %w", p, err)
		}
	}
	return n.s.topicStore.SetConfigs(topic, func(map[string]string) (map[string]string, error) { return nil, nil })
}

func (n singleNode) TopicConfigs(topic string) map[string]string {
	return n.s.topicStore.Configs(topic)
}

func (n singleNode) AlterTopicConfigs(ctx context.Context, topic string, change func(map[string]string) (map[string]string, error)) error {
	n.s.topicsMu.Lock()
	defer n.s.topicsMu.Unlock()
	topics, err := n.Topics(ctx)
	if err != nil {
		return err
	}
	if _, ok := topics[topic]; !ok {
		return ErrUnknownTopic
	}
	return n.s.topicStore.SetConfigs(topic, change)
}

// CreatePartitions makes the shards of the new partitions; the existing
// ones are not touched.
func (n singleNode) CreatePartitions(ctx context.Context, topic string, count int32) error {
	n.s.topicsMu.Lock()
	defer n.s.topicsMu.Unlock()
	topics, err := n.Topics(ctx)
	if err != nil {
		return err
	}
	has, ok := topics[topic]
	switch {
	case !ok:
		return ErrUnknownTopic
	case count <= has:
		return &InvalidPartitionsError{Topic: topic, Has: has, Asked: count}
	}
	names := make([]string, 0, count-has)
	for p := has; p < count; p++ {
		names = append(names, store.ShardName(topic, p))
	}
	if err := store.CreateShards(ctx, n.s.store, names); !errors.Is(err, store.ErrShardExists) {
		return err
	}
	for p := has; p < count; p++ {
		if err := n.s.store.CreateShard(ctx, store.ShardName(topic, p)); err != nil && !errors.Is(err, store.ErrShardExists) {
			return fmt.Errorf("partition %d: %w", p, err)
		}
	}
	return nil
}

// leads says whether this node serves a partition, or the error a client
// re-routes on: NOT_LEADER_OR_FOLLOWER when another node leads it,
// LEADER_NOT_AVAILABLE when none does now (both retriable).
func (s *Server) leads(topic string, partition int32) int16 {
	info, ok := s.cluster.Partition(topic, partition)
	switch {
	case !ok:
		return kerr.UnknownTopicOrPartition.Code
	case info.Leader == s.cluster.Self():
		return errNone
	case info.Leader < 0:
		return kerr.LeaderNotAvailable.Code
	default:
		return kerr.NotLeaderForPartition.Code
	}
}

// leader is the broker that leads a partition, for KIP-951's hint in a
// NOT_LEADER_OR_FOLLOWER answer (so a client re-routes without a Metadata
// round trip); ok is false when none does.
func (s *Server) leader(topic string, partition int32) (info PartitionInfo, b Broker, ok bool) {
	info, found := s.cluster.Partition(topic, partition)
	if !found || info.Leader < 0 {
		return info, Broker{}, false
	}
	for _, b := range s.cluster.Brokers() {
		if b.NodeID == info.Leader {
			return info, b, true
		}
	}
	return info, Broker{}, false
}

// epoch is a partition's current leader epoch: the cluster's, or 0, the
// one epoch a single node has had.
func (s *Server) epoch(topic string, partition int32) int32 {
	if info, ok := s.cluster.Partition(topic, partition); ok && info.LeaderEpoch >= 0 {
		return info.LeaderEpoch
	}
	return 0
}
