package kafka

import (
	"context"
	"errors"

	"github.com/twmb/franz-go/pkg/kerr"
	"github.com/twmb/franz-go/pkg/kmsg"

	"strata/engine/store"
)

// deleteRecords advances low watermarks (Kafka's DeleteRecords); offset -1
// means the high watermark.
func (s *Server) deleteRecords(ctx context.Context, r *kmsg.DeleteRecordsRequest) kmsg.Response {
	resp := r.ResponseKind().(*kmsg.DeleteRecordsResponse)
	resp.Topics = eachPartition[kmsg.DeleteRecordsResponseTopic](r.Topics, func(topic string, p kmsg.DeleteRecordsRequestTopicPartition) kmsg.DeleteRecordsResponseTopicPartition {
		rp := kmsg.NewDeleteRecordsResponseTopicPartition()
		rp.Partition, rp.LowWatermark = p.Partition, -1
		if rp.ErrorCode = s.leads(topic, p.Partition); rp.ErrorCode != errNone {
			return rp
		}
		shard := store.ShardName(topic, p.Partition)
		_, high, err := s.store.Watermarks(ctx, shard)
		if err != nil {
			rp.ErrorCode = kerr.UnknownTopicOrPartition.Code
			return rp
		}
		off := uint64(p.Offset)
		if p.Offset == -1 {
			off = high
		}
		var oor *store.OutOfRangeError
		switch err := s.store.DeleteBefore(ctx, shard, off); {
		case errors.As(err, &oor), p.Offset < -1:
			rp.ErrorCode = kerr.OffsetOutOfRange.Code
		case err != nil:
			rp.ErrorCode = kerr.UnknownServerError.Code
		default:
			low, _, _ := s.store.Watermarks(ctx, shard)
			rp.LowWatermark = int64(low)
		}
		return rp
	})
	return resp
}
