package kafka

import (
	"context"
	"errors"

	"github.com/twmb/franz-go/pkg/kerr"
	"github.com/twmb/franz-go/pkg/kmsg"

	"strata/engine/store"
)

// offsetForLeaderEpoch answers from the partition's leader-epoch history
// as Kafka's leader does (LeaderEpochFileCache.endOffsetFor): for the latest
// epoch, the log end; for an older one, the start of the next epoch it
// knows; for a newer one, UNDEFINED (-1, -1) without an error. The client's
// current leader epoch is checked first (KIP-320).
func (s *Server) offsetForLeaderEpoch(ctx context.Context, r *kmsg.OffsetForLeaderEpochRequest) kmsg.Response {
	resp := r.ResponseKind().(*kmsg.OffsetForLeaderEpochResponse)
	resp.Topics = eachPartition[kmsg.OffsetForLeaderEpochResponseTopic](r.Topics, func(topic string, p kmsg.OffsetForLeaderEpochRequestTopicPartition) kmsg.OffsetForLeaderEpochResponseTopicPartition {
		rp := kmsg.NewOffsetForLeaderEpochResponseTopicPartition()
		rp.Partition, rp.LeaderEpoch, rp.EndOffset = p.Partition, -1, -1
		if rp.ErrorCode = s.leads(topic, p.Partition); rp.ErrorCode != errNone {
			return rp
		}
		if rp.ErrorCode = s.checkCurrentEpoch(topic, p.Partition, p.CurrentLeaderEpoch); rp.ErrorCode != errNone {
			return rp
		}
		h, end, err := s.leaderEpochs(ctx, topic, p.Partition)
		switch {
		case errors.Is(err, store.ErrUnknownShard):
			rp.ErrorCode = kerr.UnknownTopicOrPartition.Code
		case err != nil:
			s.log.Error("kafka: offset for leader epoch", "topic", topic, "partition", p.Partition, "err", err)
			rp.ErrorCode = kerr.UnknownServerError.Code
		default:
			rp.LeaderEpoch, rp.EndOffset = h.EndOffsetFor(p.LeaderEpoch, end)
		}
		return rp
	})
	return resp
}
