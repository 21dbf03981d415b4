package kafka

import (
	"context"

	"github.com/twmb/franz-go/pkg/kerr"
	"github.com/twmb/franz-go/pkg/kmsg"

	"strata/engine/store"
)

// offsetForLeaderEpoch answers for the one epoch a single node has had: a
// lower epoch is fenced, a higher one unknown, the current one ends at the
// high watermark (the follower's truncation point).
func (s *Server) offsetForLeaderEpoch(ctx context.Context, r *kmsg.OffsetForLeaderEpochRequest) kmsg.Response {
	resp := r.ResponseKind().(*kmsg.OffsetForLeaderEpochResponse)
	resp.Topics = eachPartition[kmsg.OffsetForLeaderEpochResponseTopic](r.Topics, func(topic string, p kmsg.OffsetForLeaderEpochRequestTopicPartition) kmsg.OffsetForLeaderEpochResponseTopicPartition {
		rp := kmsg.NewOffsetForLeaderEpochResponseTopicPartition()
		rp.Partition, rp.LeaderEpoch, rp.EndOffset = p.Partition, -1, -1
		if rp.ErrorCode = s.leads(topic, p.Partition); rp.ErrorCode != errNone {
			return rp
		}
		_, high, err := s.store.Watermarks(ctx, store.ShardName(topic, p.Partition))
		switch {
		case err != nil:
			rp.ErrorCode = kerr.UnknownTopicOrPartition.Code
		case p.CurrentLeaderEpoch > leaderEpoch:
			rp.ErrorCode = kerr.UnknownLeaderEpoch.Code
		case p.CurrentLeaderEpoch >= 0 && p.CurrentLeaderEpoch < leaderEpoch:
			rp.ErrorCode = kerr.FencedLeaderEpoch.Code
		case p.LeaderEpoch > leaderEpoch:
			rp.ErrorCode = kerr.UnknownLeaderEpoch.Code
		default:
			rp.LeaderEpoch, rp.EndOffset = leaderEpoch, int64(high)
		}
		return rp
	})
	return resp
}
