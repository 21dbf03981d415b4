package kafka

import (
	"context"
	"errors"
	"time"

	"github.com/twmb/franz-go/pkg/kerr"
	"github.com/twmb/franz-go/pkg/kmsg"

	"strata/peer"
)

// A partition whose leadership moved at a roll has its log split across
// nodes (SplitLog): the leader serves every offset, reading the parts
// other nodes hold from them as a replica would (peer.Client). Clients never
// learn of it: no redirect, no preferred read replica, the same answers
// from the one broker they were told leads the partition.

// fromPeer says whether req, naming replica id, comes from another node
// (a follower's fetch, a copy read, a read of its part of a split log),
// which is answered as a replica's: the id must be a live broker other
// than this one, the request must carry that node's peer proof
// (peer.Proofs) and, with SASL on, the connection be signed in as the
// peer user (cluster.peer_user). Anyone else gets a consumer's answer,
// with the leader checks.
func (s *Server) fromPeer(req kmsg.Request, id int32, tags kmsg.Tags, cl clientInfo) bool {
	if id < 0 || id == s.cluster.Self() {
		return false
	}
	if s.cfg.Auth != nil && (s.cfg.PeerUser == "" || cl.user != s.cfg.PeerUser) {
		return false
	}
	live := false
	for _, b := range s.cluster.Brokers() {
		live = live || b.NodeID == id
	}
	if !live {
		return false
	}
	if ok, why := s.peerProofs.Check(s.cfg.PeerSecret, tags, req.Key(), id, s.cluster.Self(), time.Now()); !ok {
		s.refusal("kafka: a request naming a node's replica id without that node's proof; answered as a consumer's",
			"remote", cl.host, "api", kmsg.NameForKey(req.Key()), "replica_id", id, "why", why)
		return false
	}
	return true
}

// parts is a partition's split log, nil when the whole log is here.
func (s *Server) parts(topic string, partition int32) []LogPart {
	sl, ok := s.cluster.(SplitLog)
	if !ok {
		return nil
	}
	return sl.Parts(topic, partition)
}

// holder is the node that holds offset, by parts; this node when the log
// is not split.
func (s *Server) holder(parts []LogPart, offset int64) int32 {
	if len(parts) == 0 {
		return s.cluster.Self()
	}
	i := len(parts) - 1
	for i > 0 && parts[i].Start > offset {
		i--
	}
	return parts[i].Node
}

// remoteRead is one partition of a fetch whose offset another node holds.
type remoteRead struct {
	rp        *kmsg.FetchResponseTopicPartition
	topic     string
	partition int32
	offset    int64
	limit     int
	node      int32
}

// readRemote fills rd.rp from the node that holds its offset. A holder
// that is down answers KAFKA_STORAGE_ERROR, which clients retry: with one
// replica, those offsets are readable again when it returns.
func (s *Server) readRemote(ctx context.Context, rd remoteRead) {
	got, err := s.cfg.Peers.ReadPart(ctx, rd.node, rd.topic, rd.partition, rd.offset, int32(rd.limit))
	if errors.Is(err, peer.ErrNotLive) {
		s.refusal("kafka: fetch: the node holding these offsets is not live", "topic", rd.topic, "partition", rd.partition, "offset", rd.offset, "node", rd.node)
		rd.rp.ErrorCode = kerr.KafkaStorageError.Code
		return
	}
	if err != nil {
		s.refusal("kafka: fetch: reading from the node holding these offsets", "topic", rd.topic, "partition", rd.partition, "offset", rd.offset, "node", rd.node, "err", err)
		rd.rp.ErrorCode = kerr.KafkaStorageError.Code
		return
	}
	rd.rp.ErrorCode, rd.rp.LogStartOffset = got.ErrorCode, got.LogStartOffset
	if got.RecordBatches != nil {
		rd.rp.RecordBatches = got.RecordBatches
	}
	if rd.rp.HighWatermark < 0 {
		rd.rp.HighWatermark, rd.rp.LastStableOffset = got.HighWatermark, got.HighWatermark
	}
}

// listSplit answers ListOffsets for a timestamp, -2 (the earliest) or -3
// (the largest timestamp) on a split log: the earliest is the first
// non-empty part's; a timestamp is looked up in each part in offset order
// until one holds a record at or after it; the largest timestamp is every
// part's largest, the first part's on a tie, as Kafka answers the first
// record holding it. local answers for this node's part.
func (s *Server) listSplit(ctx context.Context, topic string, partition int32, parts []LogPart, ts int64,
	local func() kmsg.ListOffsetsResponseTopicPartition) kmsg.ListOffsetsResponseTopicPartition {
	var rp, best kmsg.ListOffsetsResponseTopicPartition
	for i, part := range parts {
		if part.Node == s.cluster.Self() {
			rp = local()
		} else {
			rp = s.listRemote(ctx, topic, partition, part.Node, ts)
		}
		if rp.ErrorCode != errNone {
			return rp
		}
		if ts == -3 {
			if i == 0 || rp.Offset >= 0 && (best.Offset < 0 || rp.Timestamp > best.Timestamp) {
				best = rp
			}
			if i == len(parts)-1 {
				return best
			}
			continue
		}
		if i == len(parts)-1 {
			return rp
		}
		// The earliest is the first part's, unless DeleteRecords emptied
		// it; a time's offset is the first part's holding a record at or
		// after it.
		if ts == -2 && rp.Offset < parts[i+1].Start || ts >= 0 && rp.Offset >= 0 {
			return rp
		}
	}
	return rp
}

func (s *Server) listRemote(ctx context.Context, topic string, partition int32, node int32, ts int64) kmsg.ListOffsetsResponseTopicPartition {
	rp := kmsg.NewListOffsetsResponseTopicPartition()
	rp.Partition, rp.LeaderEpoch, rp.Timestamp, rp.Offset = partition, -1, -1, -1
	got, err := s.cfg.Peers.ListOffset(ctx, node, topic, partition, ts)
	if errors.Is(err, peer.ErrNotLive) {
		s.refusal("kafka: list offsets: the node holding the partition's earlier offsets is not live", "topic", topic, "partition", partition, "node", node)
		rp.ErrorCode = kerr.KafkaStorageError.Code
		return rp
	}
	if err != nil {
		s.refusal("kafka: list offsets: asking the node holding the partition's earlier offsets", "topic", topic, "partition", partition, "node", node, "err", err)
		rp.ErrorCode = kerr.KafkaStorageError.Code
		return rp
	}
	got.Partition, got.LeaderEpoch = partition, -1
	return got
}
