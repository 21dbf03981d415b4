package kafka

import (
	"context"

	"github.com/twmb/franz-go/pkg/kerr"

	"strata/engine/leaderepoch"
	"strata/engine/store"
)

// Leader epochs (docs/kafka.md "Leader epochs"): a partition's leader
// records the epoch it writes under in the shard's history (store.Epochs)
// before its first append in that epoch; record batches are served with the
// epoch that wrote them; OffsetForLeaderEpoch answers from the history.
// A single node has no epochs (its Metadata answers -1): it writes no
// history, serves batches with -1, and answers as a broker that has had
// one epoch, 0.

// checkCurrentEpoch is KIP-320's check of the leader epoch a client last saw
// for a partition, as Kafka's Partition.checkCurrentLeaderEpoch: -1 skips
// it; an older one is fenced (the client's metadata is stale); a newer one
// is unknown (this broker's is).
func (s *Server) checkCurrentEpoch(topic string, partition, current int32) int16 {
	if current == -1 {
		return errNone
	}
	switch e := s.epoch(topic, partition); {
	case current < e:
		return kerr.FencedLeaderEpoch.Code
	case current > e:
		return kerr.UnknownLeaderEpoch.Code
	}
	return errNone
}

// storedEpochs is the shard's history as the engine keeps it; nil when it
// has none or the store keeps none.
func (s *Server) storedEpochs(ctx context.Context, shard string) (leaderepoch.History, error) {
	ep, ok := s.store.(store.Epochs)
	if !ok {
		return nil, nil
	}
	h, err := ep.LeaderEpochs(ctx, shard)
	return leaderepoch.History(h), err
}

// leaderEpochs is the history this node answers from as the partition's
// leader, and the shard's log end. Kafka's leader records its epoch when it
// becomes leader; strata does at its first append in the epoch, so until
// then the current epoch is added here, from the log end, as Kafka's history
// would have it. A single node answers as Kafka's single broker: one epoch,
// 0, from the start.
func (s *Server) leaderEpochs(ctx context.Context, topic string, partition int32) (leaderepoch.History, uint64, error) {
	shard := store.ShardName(topic, partition)
	var end uint64
	var err error
	if rep, ok := s.store.(store.Replica); ok {
		end, err = rep.LogEnd(ctx, shard)
	} else {
		_, end, err = s.store.Watermarks(ctx, shard)
	}
	if err != nil {
		return nil, 0, err
	}
	h, err := s.storedEpochs(ctx, shard)
	if err != nil {
		return nil, 0, err
	}
	info, ok := s.cluster.Partition(topic, partition)
	switch {
	case !ok || info.LeaderEpoch < 0:
		if len(h) == 0 {
			h = leaderepoch.History{{Epoch: 0, Start: 0}}
		}
	default:
		if last, ok := h.Latest(); !ok || last.Epoch < info.LeaderEpoch {
			h = append(h[:len(h):len(h)], store.EpochEntry{Epoch: info.LeaderEpoch, Start: end})
		}
	}
	return h, end, nil
}
