package cluster

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"slices"
	"strconv"
	"time"

	clientv3 "go.etcd.io/etcd/client/v3"

	"strata/engine/store"
)

// KeepShards keeps this node's local shards in step with the placement
// until ctx ends: a partition this node leads (while its lease holds), or
// holds a replica of, gets its shard; the shards of a deleted topic go, and so does a shard left by
// an earlier topic of the same name (deleted and created again while this
// node was away), so no record of it reappears in the new topic.
//
// Which topic a shard belongs to is recorded when the shard is made, under
// {prefix}/node/{id}/shards/{shard}: the topic's incarnation (its key's
// creation revision). A local shard with no record is kept and reported,
// never deleted on a guess: a wrong etcd prefix must not empty a data
// folder.
func (m *Member) KeepShards(ctx context.Context, st store.Store, log *slog.Logger) {
	k := m.shardKeys()
	warned := map[string]bool{}
	for {
		changed := m.Changed()
		if err := m.keepShards(ctx, st, k, log, warned); err != nil && ctx.Err() == nil {
			log.Error("cluster: keeping local shards in step with the placement", "err", err)
		}
		select {
		case <-ctx.Done():
			return
		case <-changed:
		case <-time.After(10 * time.Second): // retry what failed
		}
	}
}

// createShard makes a partition's shard; one whose leadership moved here at
// a roll begins where the previous leader's log ended.
func createShard(ctx context.Context, st store.Store, shard string, start int64) error {
	if start == 0 {
		return st.CreateShard(ctx, shard)
	}
	s, ok := st.(interface {
		CreateShardAt(ctx context.Context, shard string, start uint64) error
	})
	if !ok {
		return fmt.Errorf("shard %s begins at offset %d, and this store cannot start a shard past 0", shard, start)
	}
	return s.CreateShardAt(ctx, shard, uint64(start))
}

type shardKeys struct{ prefix string }

// shardKeys are this node's records of the topic incarnation each of its
// shards was made for.
func (m *Member) shardKeys() shardKeys {
	return shardKeys{prefix: m.keys.prefix + "/node/" + strconv.Itoa(int(m.Node().ID)) + "/shards/"}
}

func (k shardKeys) of(shard string) string { return k.prefix + shard }

func (m *Member) keepShards(ctx context.Context, st store.Store, k shardKeys, log *slog.Logger, warned map[string]bool) error {
	self := m.Node().ID
	topics := m.TopicRecords()
	have, err := st.Shards(ctx)
	if err != nil {
		return err
	}
	resp, err := m.cli.Get(ctx, k.prefix, clientv3.WithPrefix())
	if err != nil {
		return err
	}
	made := map[string]int64{} // shard -> the topic incarnation it was made for
	for _, kv := range resp.Kvs {
		if inc, err := strconv.ParseInt(string(kv.Value), 10, 64); err == nil {
			made[string(kv.Key[len(k.prefix):])] = inc
		}
	}
	local := map[string]bool{}
	current := map[string]int64{} // what `made` becomes
	for _, sh := range have {
		tp, ok := store.ParseShard(sh)
		if !ok {
			continue
		}
		t, exists := topics[tp.Topic]
		inc, recorded := made[sh]
		switch {
		case !recorded:
			if !warned[sh] {
				warned[sh] = true
				log.Warn("cluster: a local shard this node did not make for a cluster topic; kept", "shard", sh)
			}
			local[sh] = true
			current[sh] = -1
			continue
		case exists && inc == t.Incarnation:
			local[sh] = true
			current[sh] = inc
			continue
		}
		// Its topic was deleted, or deleted and made again: the shard goes.
		if err := st.DeleteShard(ctx, sh); err != nil && !errors.Is(err, store.ErrUnknownShard) {
			return err
		}
		if _, err := m.cli.Delete(ctx, k.of(sh)); err != nil {
			return err
		}
		log.Info("cluster: shard of a deleted topic deleted", "shard", sh, "topic_recreated", exists)
	}
	defer func() {
		m.mu.Lock()
		m.made = current
		m.mu.Unlock()
	}()
	if !m.Live() {
		return nil
	}
	for name, t := range topics {
		for p := int32(0); p < t.Partitions; p++ {
			part, ok := m.Placement(name, p)
			shard := store.ShardName(name, p)
			// A partition with several replicas has its shard on each of
			// them: the followers copy the leader's log into it.
			follows := len(part.Replicas) > 1 && slices.Contains(part.Replicas, self)
			if !ok || (part.Leader != self && !follows) || local[shard] {
				continue
			}
			// The record first: a crash between the two leaves a record of
			// a shard to make, never a shard nobody knows the topic of.
			if _, err := m.cli.Put(ctx, k.of(shard), strconv.FormatInt(t.Incarnation, 10)); err != nil {
				return err
			}
			if err := createShard(ctx, st, shard, part.LogStart()); err != nil && !errors.Is(err, store.ErrShardExists) {
				return err
			}
			current[shard] = t.Incarnation
			log.Info("cluster: shard created for a partition this node holds a replica of", "shard", shard, "leader", part.Leader, "epoch", part.Epoch, "from_offset", part.LogStart())
		}
	}
	return nil
}

// ShardMadeFor says whether this node's local shard of topic's partition
// p was made for incarnation inc of the topic (or is a shard with no
// record, kept as it is). Until KeepShards has replaced the shard of a
// topic deleted and made again, the shard of that name is the old topic's:
// replication must neither lead nor follow the new partition on it, or it
// would take the old log's end and high watermark for the new one's.
func (m *Member) ShardMadeFor(topic string, p int32, inc int64) bool {
	m.mu.Lock()
	defer m.mu.Unlock()
	got, ok := m.made[store.ShardName(topic, p)]
	return ok && (got == inc || got < 0)
}
