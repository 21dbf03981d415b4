package metadata

import (
	"context"
	"errors"
	"fmt"
	"maps"
	"slices"
	"sync"

	"strata/engine/store"
)

// Single is the one node strata runs as without a cluster: it leads every
// partition and coordinates every group, at the address it listens on, and
// its topics are its store's shards. Its one leader epoch never changes,
// so it reports none (-1) and clients skip epoch checks.
type Single struct {
	store   store.Store
	configs ConfigStore
	self    func() Broker
	// mu makes topic changes (create, delete, grow, alter configs) one at
	// a time: each checks the topic, then writes its configs and shards,
	// and two interleaved would mix them.
	mu sync.Mutex
	// pids hands out producer ids; in memory until SetProducerIDBlocks.
	pids *ProducerIDs
}

// NewSingle answers for the node whose partitions are st's shards, whose
// topic configs configs keeps (nil: in memory), reached at self's address.
func NewSingle(st store.Store, configs ConfigStore, self func() Broker) *Single {
	if configs == nil {
		configs = &memoryConfigs{}
	}
	return &Single{store: st, configs: configs, self: self, pids: NewProducerIDs(&MemoryProducerIDBlocks{}, 0)}
}

// SetProducerIDBlocks makes the node reserve its producer ids from b (the
// node's catalog, so a restart never repeats one), before it serves.
func (n *Single) SetProducerIDBlocks(b ProducerIDBlocks) { n.pids = NewProducerIDs(b, 0) }

func (n *Single) ProducerID(ctx context.Context) (int64, error) { return n.pids.Next(ctx) }

var _ Cluster = (*Single)(nil)

func (n *Single) Self() int32 { return 0 }

func (n *Single) Brokers() []Broker { return []Broker{n.self()} }

func (n *Single) Controller() int32 { return 0 }

func (n *Single) Partition(string, int32) (PartitionInfo, bool) {
	return PartitionInfo{Leader: 0, LeaderEpoch: -1, Replicas: []int32{0}, ISR: []int32{0}}, true
}

func (n *Single) Coordinator(string) Broker { return n.self() }

// Topics groups the store's shards by topic: topic -> partition count.
func (n *Single) Topics(ctx context.Context) (map[string]int32, error) {
	shards, err := n.store.Shards(ctx)
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

func (n *Single) CreateTopic(ctx context.Context, topic string, partitions int32, rf int16, configs map[string]string) error {
	n.mu.Lock()
	defer n.mu.Unlock()
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
	if err := CheckTopicName(topic, slices.Collect(maps.Keys(topics))); err != nil {
		return err
	}
	// The configs first: the engine a partition is made in is one of them.
	// A crash before the partitions leaves configs the next create replaces.
	if err := n.configs.SetConfigs(topic, func(map[string]string) (map[string]string, error) { return configs, nil }); err != nil {
		return fmt.Errorf("topic %s: storing its configs: %w", topic, err)
	}
	// All partitions in one step (store.BatchCreator): one by one, each
	// paid its own manifest commit and syncs, 10-27 s for 10,000.
	names := make([]string, partitions)
	for p := range names {
		names[p] = store.ShardName(topic, int32(p))
	}
	err = store.CreateShards(ctx, n.store, names)
	if errors.Is(err, store.ErrShardDeleting) {
		return n.deleting(topic, err)
	}
	if !errors.Is(err, store.ErrShardExists) {
		return err
	}
	// One exists though the topic did not (made by another way into the
	// store than topics): the rest one by one.
	for p := int32(0); p < partitions; p++ {
		err := n.store.CreateShard(ctx, store.ShardName(topic, p))
		if errors.Is(err, store.ErrShardExists) {
			if p == 0 {
				return ErrTopicExists
			}
			continue
		}
		if errors.Is(err, store.ErrShardDeleting) {
			return n.deleting(topic, err)
		}
		if err != nil {
			return err
		}
	}
	return nil
}

// deleting refuses a topic whose name an earlier topic's deletion still
// holds (its objects or its table not yet gone from the bucket, retried
// until they are: store.ErrShardDeleting), as Kafka refuses a topic marked
// for deletion, and drops the configs the create stored.
func (n *Single) deleting(topic string, err error) error {
	n.configs.SetConfigs(topic, func(map[string]string) (map[string]string, error) { return nil, nil })
	return fmt.Errorf("%w: %s: the deleted topic's objects are being removed from the bucket; try again shortly: %w", ErrTopicDeleting, topic, err)
}

func (n *Single) DeleteTopic(ctx context.Context, topic string) error {
	n.mu.Lock()
	defer n.mu.Unlock()
	topics, err := n.Topics(ctx)
	if err != nil {
		return err
	}
	parts, ok := topics[topic]
	if !ok {
		return ErrUnknownTopic
	}
	for p := int32(0); p < parts; p++ {
		if err := n.store.DeleteShard(ctx, store.ShardName(topic, p)); err != nil && !errors.Is(err, store.ErrUnknownShard) {
			return fmt.Errorf("partition %d: %w", p, err)
		}
	}
	return n.configs.SetConfigs(topic, func(map[string]string) (map[string]string, error) { return nil, nil })
}

func (n *Single) TopicConfigs(topic string) map[string]string {
	return n.configs.Configs(topic)
}

func (n *Single) AlterTopicConfigs(ctx context.Context, topic string, change func(map[string]string) (map[string]string, error)) error {
	n.mu.Lock()
	defer n.mu.Unlock()
	topics, err := n.Topics(ctx)
	if err != nil {
		return err
	}
	if _, ok := topics[topic]; !ok {
		return ErrUnknownTopic
	}
	return n.configs.SetConfigs(topic, change)
}

// CreatePartitions makes the shards of the new partitions; the existing
// ones are not touched.
func (n *Single) CreatePartitions(ctx context.Context, topic string, count int32) error {
	n.mu.Lock()
	defer n.mu.Unlock()
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
	if err := store.CreateShards(ctx, n.store, names); !errors.Is(err, store.ErrShardExists) {
		return err
	}
	for p := has; p < count; p++ {
		if err := n.store.CreateShard(ctx, store.ShardName(topic, p)); err != nil && !errors.Is(err, store.ErrShardExists) {
			return fmt.Errorf("partition %d: %w", p, err)
		}
	}
	return nil
}
