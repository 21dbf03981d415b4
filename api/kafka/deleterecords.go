package kafka

import (
	"context"
	"errors"
	"time"

	"github.com/twmb/franz-go/pkg/kerr"
	"github.com/twmb/franz-go/pkg/kmsg"

	"strata/engine/store"
	"strata/partition"
	"strata/peer"
)

// deleteRecords advances low watermarks (Kafka's DeleteRecords); offset -1
// means the high watermark. On a split log the leader asks the nodes
// holding the earlier parts to delete theirs, up to where each part ends,
// and then deletes from its own; such a node takes a DeleteRecords for a
// partition it no longer leads when the offset is within its part.
func (s *Server) deleteRecords(ctx context.Context, r *kmsg.DeleteRecordsRequest) kmsg.Response {
	resp := r.ResponseKind().(*kmsg.DeleteRecordsResponse)
	resp.Topics = eachPartition[kmsg.DeleteRecordsResponseTopic](r.Topics, func(topic string, p kmsg.DeleteRecordsRequestTopicPartition) kmsg.DeleteRecordsResponseTopicPartition {
		rp := kmsg.NewDeleteRecordsResponseTopicPartition()
		rp.Partition, rp.LowWatermark = p.Partition, -1
		shard := store.ShardName(topic, p.Partition)
		parts := s.parts(topic, p.Partition)
		if rp.ErrorCode = s.leads(topic, p.Partition); rp.ErrorCode != errNone {
			// Within this node's earlier part, it is the part's to do;
			// past it, the leader's (which asks this node for its part).
			if end, ok := s.historyEnd(parts); ok && p.Offset >= 0 && p.Offset <= end {
				rp.ErrorCode, rp.LowWatermark = s.deleteLocal(ctx, shard, p.Offset)
			}
			return rp
		}
		_, high, err := s.store.Watermarks(ctx, shard)
		if err != nil {
			rp.ErrorCode = kerr.UnknownTopicOrPartition.Code
			return rp
		}
		off := p.Offset
		switch {
		case p.Offset == -1:
			off = int64(high)
		case p.Offset < -1 || p.Offset > int64(high):
			rp.ErrorCode = kerr.OffsetOutOfRange.Code
			return rp
		}
		// The earlier parts first: a failure leaves the log's start where
		// it was or further on, never a hole.
		for i, part := range parts {
			if part.Node == s.cluster.Self() || part.Start >= off {
				continue
			}
			upTo := off
			if i+1 < len(parts) {
				upTo = min(off, parts[i+1].Start)
			}
			if rp.ErrorCode, rp.LowWatermark = s.deleteRemote(ctx, topic, p.Partition, part.Node, upTo); rp.ErrorCode != errNone {
				return rp
			}
		}
		if len(parts) > 0 && off <= s.ownStart(parts) {
			return rp // all of it in the earlier parts
		}
		rp.ErrorCode, rp.LowWatermark = s.deleteLocal(ctx, shard, off)
		if rp.ErrorCode == errNone {
			if rp.ErrorCode = s.awaitDeleted(ctx, topic, p.Partition, shard, rp.LowWatermark, time.Duration(r.TimeoutMillis)*time.Millisecond); rp.ErrorCode != errNone {
				rp.LowWatermark = -1
			}
		}
		return rp
	})
	return resp
}

func (s *Server) deleteLocal(ctx context.Context, shard string, off int64) (int16, int64) {
	var oor *store.OutOfRangeError
	switch err := s.store.DeleteBefore(ctx, shard, uint64(off)); {
	case errors.As(err, &oor):
		return kerr.OffsetOutOfRange.Code, -1
	case errors.Is(err, store.ErrUnknownShard):
		return kerr.UnknownTopicOrPartition.Code, -1
	case err != nil:
		s.log.Error("kafka: delete records", "shard", shard, "offset", off, "err", err)
		return kerr.UnknownServerError.Code, -1
	}
	low, _, _ := s.store.Watermarks(ctx, shard)
	return errNone, int64(low)
}

func (s *Server) deleteRemote(ctx context.Context, topic string, partition, node int32, off int64) (int16, int64) {
	got, err := s.cfg.Peers.DeleteRecords(ctx, node, topic, partition, off)
	if errors.Is(err, peer.ErrNotLive) {
		s.refusal("kafka: delete records: the node holding the partition's earlier offsets is not live", "topic", topic, "partition", partition, "node", node)
		return kerr.KafkaStorageError.Code, -1
	}
	if err != nil {
		s.refusal("kafka: delete records: asking the node holding the partition's earlier offsets", "topic", topic, "partition", partition, "node", node, "err", err)
		return kerr.KafkaStorageError.Code, -1
	}
	return got.ErrorCode, got.LowWatermark
}

// historyEnd is where this node's part of a split log ends, when it holds
// an earlier part (one that no longer grows).
func (s *Server) historyEnd(parts []LogPart) (int64, bool) {
	for i := 0; i+1 < len(parts); i++ {
		if parts[i].Node == s.cluster.Self() {
			return parts[i+1].Start, true
		}
	}
	return 0, false
}

// ownStart is where the leader's part of a split log begins: the last.
func (s *Server) ownStart(parts []LogPart) int64 { return parts[len(parts)-1].Start }

// awaitDeleted waits, for a replicated partition, until its ISR has
// deleted below low too (partition.Manager.AwaitLogStart: the followers report
// their log starts in their fetches), within the request's timeout:
// REQUEST_TIMED_OUT after it, as Kafka's delayed DeleteRecords answers
// (the leader's delete stands; the followers catch up).
func (s *Server) awaitDeleted(ctx context.Context, topic string, p int32, shard string, low int64, timeout time.Duration) int16 {
	info, _ := s.cluster.Partition(topic, p)
	if len(info.Replicas) <= 1 {
		return errNone
	}
	if timeout <= 0 {
		timeout = 30 * time.Second
	}
	ctx, cancel := context.WithTimeout(ctx, timeout)
	defer cancel()
	switch err := s.partitions.AwaitLogStart(ctx, shard, low); {
	case err == nil:
		return errNone
	case errors.Is(err, partition.ErrNotLeader):
		return kerr.NotLeaderForPartition.Code
	default:
		s.log.Warn("kafka: delete records: the ISR has not deleted within the request's timeout", "shard", shard, "offset", low, "err", err)
		return kerr.RequestTimedOut.Code
	}
}
