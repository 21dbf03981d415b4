package cluster

import (
	"context"
	"errors"
	"log/slog"

	"strata/engine/store"
)

// KeepShards keeps this node's local shards in step with the placement
// until ctx ends: a partition this node leads (while its lease holds) gets
// its shard; the shards of a topic deleted while this node watched are
// deleted. A local shard whose topic the cluster does not have at start is
// kept and reported, never deleted on a guess: a wrong etcd prefix must not
// empty a data folder.
func (m *Member) KeepShards(ctx context.Context, st store.Store, log *slog.Logger) {
	seen := map[string]bool{} // topics this process has seen in the cluster
	warned := map[string]bool{}
	for {
		changed := m.Changed()
		m.keepShards(ctx, st, log, seen, warned)
		select {
		case <-ctx.Done():
			return
		case <-changed:
		}
	}
}

func (m *Member) keepShards(ctx context.Context, st store.Store, log *slog.Logger, seen, warned map[string]bool) {
	self := m.Self().ID
	topics := m.Topics()
	have, err := st.Shards(ctx)
	if err != nil {
		log.Error("cluster: listing local shards", "err", err)
		return
	}
	local := map[string]bool{}
	for _, sh := range have {
		local[sh] = true
	}
	for name, t := range topics {
		seen[name] = true
		if !m.Live() {
			continue
		}
		for p := int32(0); p < t.Partitions; p++ {
			part, ok := m.Partition(name, p)
			shard := store.ShardName(name, p)
			if !ok || part.Leader != self || local[shard] {
				continue
			}
			if err := st.CreateShard(ctx, shard); err != nil && !errors.Is(err, store.ErrShardExists) {
				log.Error("cluster: creating the shard of a partition this node leads", "shard", shard, "err", err)
				continue
			}
			log.Info("cluster: shard created for a partition this node leads", "shard", shard, "epoch", part.Epoch)
		}
	}
	for _, sh := range have {
		tp, ok := store.ParseShard(sh)
		if !ok {
			continue
		}
		if _, exists := topics[tp.Topic]; exists {
			continue
		}
		if !seen[tp.Topic] {
			if !warned[tp.Topic] {
				warned[tp.Topic] = true
				log.Warn("cluster: a local shard of a topic the cluster does not have; kept", "shard", sh)
			}
			continue
		}
		if err := st.DeleteShard(ctx, sh); err != nil && !errors.Is(err, store.ErrUnknownShard) {
			log.Error("cluster: deleting the shard of a deleted topic", "shard", sh, "err", err)
			continue
		}
		log.Info("cluster: shard of a deleted topic deleted", "shard", sh)
	}
}
