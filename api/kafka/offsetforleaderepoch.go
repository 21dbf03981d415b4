package kafka

import (
	"context"

	"github.com/twmb/franz-go/pkg/kerr"
	"github.com/twmb/franz-go/pkg/kmsg"

	"strata/engine/store"
)

// offsetForLeaderEpoch answers for the partition's current leader epoch (0
// on a single node, which has had one): a lower current epoch is fenced, a
// higher one unknown, and an epoch asked for ends at the high watermark.
// Until replication, a partition's log never diverges between epochs, so no
// client ever has to truncate.
func (s *Server) offsetForLeaderEpoch(ctx context.Context, r *kmsg.OffsetForLeaderEpochRequest) kmsg.Response {
	resp := r.ResponseKind().(*kmsg.OffsetForLeaderEpochResponse)
	resp.Topics = eachPartition[kmsg.OffsetForLeaderEpochResponseTopic](r.Topics, func(topic string, p kmsg.OffsetForLeaderEpochRequestTopicPartition) kmsg.OffsetForLeaderEpochResponseTopicPartition {
		rp := kmsg.NewOffsetForLeaderEpochResponseTopicPartition()
		rp.Partition, rp.LeaderEpoch, rp.EndOffset = p.Partition, -1, -1
		if rp.ErrorCode = s.leads(topic, p.Partition); rp.ErrorCode != errNone {
			return rp
		}
		_, high, err := s.store.Watermarks(ctx, store.ShardName(topic, p.Partition))
		epoch := s.epoch(topic, p.Partition)
		switch {
		case err != nil:
			rp.ErrorCode = kerr.UnknownTopicOrPartition.Code
		case p.CurrentLeaderEpoch > epoch:
			rp.ErrorCode = kerr.UnknownLeaderEpoch.Code
		case p.CurrentLeaderEpoch >= 0 && p.CurrentLeaderEpoch < epoch:
			rp.ErrorCode = kerr.FencedLeaderEpoch.Code
		case p.LeaderEpoch > epoch:
			rp.ErrorCode = kerr.UnknownLeaderEpoch.Code
		default:
			rp.LeaderEpoch, rp.EndOffset = min(p.LeaderEpoch, epoch), int64(high)
		}
		return rp
	})
	return resp
}
