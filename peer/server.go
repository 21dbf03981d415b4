package peer

import (
	"context"
	"encoding/binary"
	"errors"
	"log/slog"

	"github.com/twmb/franz-go/pkg/kerr"
	"github.com/twmb/franz-go/pkg/kmsg"

	"strata/engine/record"
	"strata/engine/store"
	"strata/replica"
)

// Leader is what the Server asks of replication to answer a follower
// (replica.Node): the follower's position, its seals and log start go in,
// the records from offset on and the leader's log end, segment starts and
// epochs come out. Its errors are replica's (ErrFenced, ErrNotLeader,
// ErrDiverged) or the store's.
type Leader interface {
	FollowerFetch(ctx context.Context, shard string, follower, epoch int32, offset int64, maxBytes int32, probe bool, seals []replica.Seal, logStart int64) (replica.ReplicaRead, error)
}

// Poll answers with read's response when read says it is done, else waits
// for records on one of r's partitions (or r's max wait) and reads again:
// the front end's long poll, which the appends wake.
type Poll func(ctx context.Context, r *kmsg.FetchRequest, read func() (*kmsg.FetchResponse, bool)) kmsg.Response

// Server answers the Fetches other nodes mark as theirs: a follower's
// (tagReplicaFetch), answered through Leader, and a copy read
// (tagCopyRead), answered from Store. The front end has already checked
// that the request comes from a peer (its replica id and proof); anything
// else is a consumer's fetch, not the Server's.
type Server struct {
	Store store.Store
	// Leader answers followers; nil: no follower's fetch is answered here
	// (this node replicates nothing).
	Leader Leader
	Log    *slog.Logger
}

// Answer answers r, a Fetch from a peer, when every partition it names is
// marked as a copy read or as a follower's fetch (ok); a follower's waits
// in poll for records. Otherwise it leaves r to the front end.
func (s *Server) Answer(ctx context.Context, r *kmsg.FetchRequest, poll Poll) (resp kmsg.Response, ok bool) {
	switch {
	case s == nil:
		return nil, false
	case s.isCopyRead(r):
		return s.copyRead(ctx, r), true
	case s.isReplicaFetch(r):
		return s.replicaFetch(ctx, r, poll), true
	}
	return nil, false
}

// allMarked: a fetch from a peer (the front end checked the replica id)
// whose partitions are all marked.
func allMarked(r *kmsg.FetchRequest, marked func(kmsg.FetchRequestTopicPartition) bool) bool {
	if max(r.ReplicaID, r.ReplicaState.ID) < 0 || len(r.Topics) == 0 {
		return false
	}
	for _, t := range r.Topics {
		for _, p := range t.Partitions {
			if !marked(p) {
				return false
			}
		}
	}
	return true
}

func (s *Server) isCopyRead(r *kmsg.FetchRequest) bool {
	return allMarked(r, func(p kmsg.FetchRequestTopicPartition) bool { return markedCopyRead(p.UnknownTags) })
}

func (s *Server) isReplicaFetch(r *kmsg.FetchRequest) bool {
	return s.Leader != nil && allMarked(r, func(p kmsg.FetchRequestTopicPartition) bool {
		_, ok := replicaFetchFlags(p)
		return ok
	})
}

// NoRecords is a fetch answer's partition before anything is read into
// it: a peer's answer's and a client's (the front end's Fetch starts from
// it too, so both answer the same empty partition).
func NoRecords(partition int32) kmsg.FetchResponseTopicPartition {
	rp := kmsg.NewFetchResponseTopicPartition()
	rp.Partition = partition
	rp.HighWatermark, rp.LastStableOffset, rp.LogStartOffset = -1, -1, -1
	rp.PreferredReadReplica = -1
	rp.RecordBatches = []byte{} // empty, not null: librdkafka refuses a null record set
	return rp
}

// A copy read is how a node reads another node's copy of a sealed segment
// (tiering one whose own copy did not agree at the seal): a Fetch from a
// replica id, each partition marked with tagCopyRead, answered from the
// receiving node's log, whoever leads, in strata's own record format
// (docs/format.md) with the same tag on each answered partition. Unlike a
// follower's fetch it changes nothing on the answering node: no ISR
// bookkeeping, no fetch position, no seal reports. Records re-encoded with
// record.Append are the stored bytes, so the reader rebuilds the segment's
// file exactly and checks its CRC-32C against the sealed one.
//
// copyRead answers one at once, from this node's log up to its log end
// where the engine has one (a sealed segment's records are committed on
// every replica that agreed, whatever high watermark this one knows).
func (s *Server) copyRead(ctx context.Context, r *kmsg.FetchRequest) kmsg.Response {
	resp := r.ResponseKind().(*kmsg.FetchResponse)
	for _, t := range r.Topics {
		rt := kmsg.NewFetchResponseTopic()
		rt.Topic = t.Topic
		for _, p := range t.Partitions {
			rp := NoRecords(p.Partition)
			shard := store.ShardName(t.Topic, p.Partition)
			budget := store.Budget{MaxBytes: max(1, int(p.PartitionMaxBytes))}
			var recs []record.Record
			var err error
			if p.FetchOffset < 0 {
				err = &store.OutOfRangeError{}
			} else if rs, ok := s.Store.(store.Replica); ok {
				recs, err = rs.ReadToLogEnd(ctx, shard, uint64(p.FetchOffset), budget)
			} else {
				recs, err = s.Store.Read(ctx, shard, uint64(p.FetchOffset), budget)
			}
			var oor *store.OutOfRangeError
			switch {
			case errors.As(err, &oor):
				rp.ErrorCode = kerr.OffsetOutOfRange.Code
			case errors.Is(err, store.ErrUnknownShard):
				rp.ErrorCode = kerr.UnknownTopicOrPartition.Code
			case err != nil:
				s.Log.Error("peer: a copy read", "shard", shard, "offset", p.FetchOffset, "err", err)
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

// replicaFetch answers a follower: each partition's records from its log
// end (ReadToLogEnd), waiting up to max_wait for some when there are none.
func (s *Server) replicaFetch(ctx context.Context, r *kmsg.FetchRequest, poll Poll) kmsg.Response {
	follower := max(r.ReplicaID, r.ReplicaState.ID)
	return poll(ctx, r, func() (*kmsg.FetchResponse, bool) {
		resp, total, failed := s.replicaFetchOnce(ctx, r, follower)
		return resp, total > 0 || failed
	})
}

func (s *Server) replicaFetchOnce(ctx context.Context, r *kmsg.FetchRequest, follower int32) (*kmsg.FetchResponse, int, bool) {
	resp := r.ResponseKind().(*kmsg.FetchResponse)
	total, failed, moved := 0, false, false
	// One budget for the whole answer (Kafka's replica.fetch.response.max.bytes):
	// a follower of many partitions never gets partitions × 1 MiB at once.
	left := int(r.MaxBytes)
	if left <= 0 {
		left = 16 << 20
	}
	for _, t := range r.Topics {
		rt := kmsg.NewFetchResponseTopic()
		rt.Topic = t.Topic
		for _, p := range t.Partitions {
			rp := NoRecords(p.Partition)
			flags, _ := replicaFetchFlags(p)
			shard := store.ShardName(t.Topic, p.Partition)
			var seals []replica.Seal
			var err error
			p.UnknownTags.Each(func(k uint32, v []byte) {
				if k == tagSeals {
					seals, err = decodeSeals(v)
				}
			})
			if err != nil {
				s.Log.Warn("peer: a follower's fetch with malformed seal reports", "shard", shard, "follower", follower, "err", err)
			}
			limit := min(p.PartitionMaxBytes, int32(left))
			if left <= 0 {
				limit = -1 // over the budget: this fetch counts, its records come next time
			}
			logStart, lerr := followerLogStart(p)
			if lerr != nil {
				s.Log.Warn("peer: a follower's fetch with a malformed log start", "shard", shard, "follower", follower, "err", lerr)
			}
			rd, err := s.Leader.FollowerFetch(ctx, shard, follower, p.CurrentLeaderEpoch, p.FetchOffset, limit, flags&flagProbe != 0, seals, logStart)
			if rp.ErrorCode = replicaFetchCode(err); rp.ErrorCode != errNone {
				if rp.ErrorCode == kerr.UnknownServerError.Code {
					s.Log.Error("peer: a follower's fetch", "shard", shard, "follower", follower, "offset", p.FetchOffset, "err", err)
				}
				failed = true
				rp.UnknownTags.Set(tagLogEnd, binary.BigEndian.AppendUint64(nil, uint64(rd.LogEnd)))
				rt.Partitions = append(rt.Partitions, rp)
				continue
			}
			rp.HighWatermark, rp.LastStableOffset, rp.LogStartOffset = rd.HighWatermark, rd.HighWatermark, rd.LogStart
			// A deletion the follower has yet to make is news: a
			// DeleteRecords waits for it.
			// (Only if it can: it holds records up to the new start.)
			moved = moved || (logStart >= 0 && rd.LogStart > logStart && rd.LogStart <= p.FetchOffset && flags&flagProbe == 0)
			for i := range rd.Records {
				if rp.RecordBatches, err = record.Append(rp.RecordBatches, &rd.Records[i]); err != nil {
					break // it was stored, so it encodes: a disk that lies
				}
			}
			total += len(rp.RecordBatches)
			left -= len(rp.RecordBatches)
			rp.UnknownTags.Set(tagReplicaFetch, nil)
			rp.UnknownTags.Set(tagLogEnd, binary.BigEndian.AppendUint64(nil, uint64(rd.LogEnd)))
			rolls := binary.BigEndian.AppendUint32(nil, uint32(len(rd.Rolls)))
			for _, o := range rd.Rolls {
				rolls = binary.BigEndian.AppendUint64(rolls, uint64(o))
			}
			rp.UnknownTags.Set(tagRolls, rolls)
			var h replica.EpochHistory
			for _, e := range rd.Epochs {
				_ = h.Append(e.Epoch, e.Start) // the leader's own history, in order
			}
			rp.UnknownTags.Set(tagEpochs, h.Encode())
			rt.Partitions = append(rt.Partitions, rp)
		}
		resp.Topics = append(resp.Topics, rt)
	}
	return resp, total, failed || moved
}

func replicaFetchCode(err error) int16 {
	var oor *store.OutOfRangeError
	switch {
	case err == nil:
		return errNone
	case errors.Is(err, replica.ErrFenced):
		return kerr.FencedLeaderEpoch.Code
	case errors.Is(err, replica.ErrNotLeader):
		return kerr.NotLeaderForPartition.Code
	case errors.Is(err, replica.ErrDiverged), errors.As(err, &oor):
		return kerr.OffsetOutOfRange.Code
	case errors.Is(err, store.ErrUnknownShard):
		return kerr.UnknownTopicOrPartition.Code
	}
	return kerr.UnknownServerError.Code
}
