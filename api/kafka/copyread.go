package kafka

import (
	"context"
	"errors"
	"fmt"

	"github.com/twmb/franz-go/pkg/kerr"
	"github.com/twmb/franz-go/pkg/kmsg"

	"strata/engine/record"
	"strata/engine/store"
)

// A copy read is how a node reads another node's copy of a sealed segment
// (tiering one whose own copy did not agree at the seal): a Fetch from a
// replica id, each partition marked with tagCopyRead, answered from the
// receiving node's log, whoever leads, in strata's own record format
// (docs/format.md) with the same tag on each answered partition. Unlike a
// follower's fetch it changes nothing on the answering node: no ISR
// bookkeeping, no fetch position, no seal reports. Records re-encoded with
// record.Append are the stored bytes, so the reader rebuilds the segment's
// file exactly and checks its CRC-32C against the sealed one.
const tagCopyRead = 0x5306

// isCopyRead: a fetch from a peer (fromPeer checked the replica id) whose
// partitions are all marked as a copy read.
func isCopyRead(r *kmsg.FetchRequest) bool {
	if max(r.ReplicaID, r.ReplicaState.ID) < 0 || len(r.Topics) == 0 {
		return false
	}
	for _, t := range r.Topics {
		for _, p := range t.Partitions {
			marked := false
			p.UnknownTags.Each(func(k uint32, _ []byte) { marked = marked || k == tagCopyRead })
			if !marked {
				return false
			}
		}
	}
	return true
}

// copyRead answers a copy read at once, from this node's log up to its log
// end where the engine has one (a sealed segment's records are committed
// on every replica that agreed, whatever high watermark this one knows).
func (s *Server) copyRead(ctx context.Context, r *kmsg.FetchRequest) kmsg.Response {
	resp := r.ResponseKind().(*kmsg.FetchResponse)
	for _, t := range r.Topics {
		rt := kmsg.NewFetchResponseTopic()
		rt.Topic = t.Topic
		for _, p := range t.Partitions {
			rp := noRecords(p.Partition)
			shard := store.ShardName(t.Topic, p.Partition)
			budget := store.Budget{MaxBytes: max(1, int(p.PartitionMaxBytes))}
			var recs []record.Record
			var err error
			if p.FetchOffset < 0 {
				err = &store.OutOfRangeError{}
			} else if rs, ok := s.store.(store.Replica); ok {
				recs, err = rs.ReadToLogEnd(ctx, shard, uint64(p.FetchOffset), budget)
			} else {
				recs, err = s.store.Read(ctx, shard, uint64(p.FetchOffset), budget)
			}
			var oor *store.OutOfRangeError
			switch {
			case errors.As(err, &oor):
				rp.ErrorCode = kerr.OffsetOutOfRange.Code
			case errors.Is(err, store.ErrUnknownShard):
				rp.ErrorCode = kerr.UnknownTopicOrPartition.Code
			case err != nil:
				s.log.Error("kafka: a peer's copy read", "shard", shard, "offset", p.FetchOffset, "err", err)
				rp.ErrorCode = kerr.UnknownServerError.Code
			}
			for i := range recs {
				if rp.RecordBatches, err = record.Append(rp.RecordBatches, &recs[i]); err != nil {
					break // it was stored, so it encodes: a disk that lies
				}
			}
			rp.UnknownTags.Set(tagCopyRead, nil)
			rt.Partitions = append(rt.Partitions, rp)
		}
		resp.Topics = append(resp.Topics, rt)
	}
	return resp
}

// ReadCopy reads records of topic's partition p from offset on, within
// maxBytes, as node holds them in its own log (whether or not it leads the
// partition), over the Kafka listener as a replica, so with the TLS and
// SASL peers use. The records are strata's, byte for byte as stored.
func (s *Server) ReadCopy(ctx context.Context, node int32, topic string, p int32, offset int64, maxBytes int32) ([]record.Record, error) {
	addr, ok := s.brokerAddr(node)
	if !ok {
		return nil, fmt.Errorf("reading %s-%d from node %d: it is not live", topic, p, node)
	}
	b, err := s.peers.broker(addr)
	if err != nil {
		return nil, err
	}
	req := kmsg.NewPtrFetchRequest()
	req.ReplicaID, req.ReplicaState.ID = s.cluster.Self(), s.cluster.Self()
	req.MaxWaitMillis, req.MinBytes, req.MaxBytes = 0, 1, maxBytes
	rt := kmsg.NewFetchRequestTopic()
	rt.Topic = topic
	rp := kmsg.NewFetchRequestTopicPartition()
	rp.Partition, rp.FetchOffset, rp.PartitionMaxBytes = p, offset, maxBytes
	rp.CurrentLeaderEpoch = -1
	rp.UnknownTags.Set(tagCopyRead, nil)
	rt.Partitions = append(rt.Partitions, rp)
	req.Topics = append(req.Topics, rt)
	s.prove(req, node)
	resp, err := req.RequestWith(ctx, b)
	if err != nil {
		return nil, fmt.Errorf("reading %s-%d from node %d: %w", topic, p, node, err)
	}
	if resp.ErrorCode != errNone || len(resp.Topics) != 1 || len(resp.Topics[0].Partitions) != 1 {
		return nil, fmt.Errorf("reading %s-%d from node %d: answered with %v and %d topics", topic, p, node, kerr.ErrorForCode(resp.ErrorCode), len(resp.Topics))
	}
	part := resp.Topics[0].Partitions[0]
	if part.ErrorCode != errNone {
		return nil, fmt.Errorf("reading %s-%d at %d from node %d: %w", topic, p, offset, node, kerr.ErrorForCode(part.ErrorCode))
	}
	native := false
	part.UnknownTags.Each(func(k uint32, _ []byte) { native = native || k == tagCopyRead })
	if !native {
		return nil, fmt.Errorf("reading %s-%d from node %d: it answered with Kafka record batches (fetch version %d), not a copy read", topic, p, node, resp.Version)
	}
	var out []record.Record
	for bs := part.RecordBatches; len(bs) > 0; {
		r, n, err := record.Decode(bs)
		if err != nil {
			return nil, fmt.Errorf("reading %s-%d from node %d: its records: %w", topic, p, node, err)
		}
		out = append(out, r)
		bs = bs[n:]
	}
	return out, nil
}
