package kafka

import (
	"context"
	"errors"
	"time"

	"github.com/twmb/franz-go/pkg/kerr"
	"github.com/twmb/franz-go/pkg/kmsg"

	"strata/engine/store"
)

func (s *Server) listOffsets(ctx context.Context, r *kmsg.ListOffsetsRequest) kmsg.Response {
	resp := r.ResponseKind().(*kmsg.ListOffsetsResponse)
	// A replica (another node reading its part of a split log) is
	// answered from this node's log, whoever leads.
	replica := r.ReplicaID >= 0
	resp.Topics = eachPartition[kmsg.ListOffsetsResponseTopic](r.Topics, func(topic string, p kmsg.ListOffsetsRequestTopicPartition) kmsg.ListOffsetsResponseTopicPartition {
		rp := kmsg.NewListOffsetsResponseTopicPartition()
		rp.Partition, rp.LeaderEpoch, rp.Timestamp = p.Partition, -1, -1
		if !replica {
			if rp.ErrorCode = s.leads(topic, p.Partition); rp.ErrorCode != errNone {
				rp.Offset = -1
				return rp
			}
			if rp.ErrorCode = s.checkCurrentEpoch(topic, p.Partition, p.CurrentLeaderEpoch); rp.ErrorCode != errNone {
				rp.Offset = -1
				return rp
			}
			if rp.ErrorCode = s.offsetsKnown(ctx, topic, p.Partition); rp.ErrorCode != errNone {
				rp.Offset = -1
				return rp
			}
		}
		local := func() kmsg.ListOffsetsResponseTopicPartition { return s.listLocal(ctx, topic, p, rp) }
		if parts := s.parts(topic, p.Partition); !replica && len(parts) > 1 && p.Timestamp != -1 {
			return s.listSplit(ctx, topic, p.Partition, parts, p.Timestamp, local)
		}
		return local()
	})
	return resp
}

// offsetsKnown is OFFSET_NOT_AVAILABLE while a new leader's high
// watermark is below the start of its epoch (KIP-207): until then it does
// not know what the last leader committed, and the log end a client asked
// for could be short of records already acknowledged (a consumer reading
// "to the end" would stop early, one starting at "latest" would re-read).
// The high watermark catches up within a fetch round (at once with no
// follower), so the answer waits for it up to offsetsWait first: Kafka
// answers the error at once, and clients that list offsets through an
// admin client (kadm) see it as a partition error to retry. A single node
// has no epochs, and nothing to wait for.
func (s *Server) offsetsKnown(ctx context.Context, topic string, partition int32) int16 {
	info, ok := s.cluster.Partition(topic, partition)
	if !ok || info.LeaderEpoch < 0 {
		return errNone
	}
	deadline := time.Now().Add(offsetsWait)
	for {
		h, _, err := s.leaderEpochs(ctx, topic, partition)
		if err != nil {
			return errNone // listLocal answers the shard's error
		}
		_, high, err := s.store.Watermarks(ctx, store.ShardName(topic, partition))
		last, ok := h.Latest()
		if err != nil || !ok || last.Epoch != info.LeaderEpoch || last.Start <= high {
			return errNone
		}
		if time.Now().After(deadline) || ctx.Err() != nil {
			return kerr.OffsetNotAvailable.Code
		}
		time.Sleep(10 * time.Millisecond)
	}
}

// offsetsWait bounds how long ListOffsets waits for a new leader's high
// watermark (offsetsKnown).
var offsetsWait = time.Second

// listLocal answers one partition of a ListOffsets from this node's log.
func (s *Server) listLocal(ctx context.Context, topic string, p kmsg.ListOffsetsRequestTopicPartition, rp kmsg.ListOffsetsResponseTopicPartition) kmsg.ListOffsetsResponseTopicPartition {
	shard := store.ShardName(topic, p.Partition)
	low, high, err := s.store.Watermarks(ctx, shard)
	switch {
	case err != nil:
		rp.ErrorCode, rp.Offset = kerr.UnknownTopicOrPartition.Code, -1
	case p.Timestamp == -2: // earliest
		rp.Offset = int64(low)
	case p.Timestamp == -1: // latest
		rp.Offset = int64(high)
	case p.Timestamp == -3: // the record with the largest timestamp (KIP-734)
		rp.Offset = -1
		if ts, off, ok, err := s.maxTimestamp(ctx, shard); err != nil {
			rp.ErrorCode = kerr.UnknownServerError.Code
		} else if ok {
			rp.Offset, rp.Timestamp = off, ts
		}
	default:
		off, err := s.store.OffsetForTime(ctx, shard, p.Timestamp)
		if err != nil {
			rp.ErrorCode, rp.Offset = kerr.UnknownServerError.Code, -1
			break
		}
		rp.Offset = int64(off)
		if off < high {
			if recs, err := s.store.Read(ctx, shard, off, store.Budget{MaxRecords: 1}); err == nil && len(recs) == 1 {
				rp.Timestamp = recs[0].Timestamp
			}
		} else {
			rp.Offset = -1 // no record at or after the time
		}
	}
	if rp.ErrorCode == errNone && rp.Offset >= 0 {
		rp.LeaderEpoch = s.offsetEpoch(ctx, topic, p.Partition, p.Timestamp == -1, uint64(rp.Offset))
	}
	return rp
}

// offsetEpoch is the leader epoch ListOffsets answers with an offset, as
// Kafka does: the latest epoch for the log end, else the epoch that wrote
// the offset's record. A single node has none (-1), as its Metadata says.
func (s *Server) offsetEpoch(ctx context.Context, topic string, partition int32, latest bool, offset uint64) int32 {
	if info, ok := s.cluster.Partition(topic, partition); !ok || info.LeaderEpoch < 0 {
		return -1
	}
	h, _, err := s.leaderEpochs(ctx, topic, partition)
	if err != nil {
		return -1
	}
	if last, ok := h.Latest(); latest && ok {
		return last.Epoch
	}
	epoch, _, _ := h.EpochAt(offset)
	return epoch
}

// maxTimestamper is a store that knows a shard's largest timestamp.
type maxTimestamper interface {
	MaxTimestamp(ctx context.Context, shard string) (int64, bool, error)
}

// maxTimestamp finds the first record holding the shard's largest
// timestamp: the largest timestamp from the store, then the first offset
// at or after it.
func (s *Server) maxTimestamp(ctx context.Context, shard string) (ts, offset int64, ok bool, err error) {
	mt, can := s.store.(maxTimestamper)
	if !can {
		return 0, 0, false, errors.New("the store cannot find the largest timestamp")
	}
	max, ok, err := mt.MaxTimestamp(ctx, shard)
	if err != nil || !ok {
		return 0, 0, false, err
	}
	off, err := s.store.OffsetForTime(ctx, shard, max)
	if err != nil {
		return 0, 0, false, err
	}
	_, high, err := s.store.Watermarks(ctx, shard)
	if err != nil || off >= high {
		return 0, 0, false, err
	}
	return max, int64(off), true, nil
}
