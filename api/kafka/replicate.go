package kafka

import (
	"context"
	"encoding/binary"
	"errors"
	"fmt"
	"time"

	"github.com/twmb/franz-go/pkg/kerr"
	"github.com/twmb/franz-go/pkg/kmsg"

	"strata/engine/record"
	"strata/engine/store"
	"strata/replica"
)

// A follower copies its leader with Kafka's own Fetch, sent as a replica
// (replica id: the follower's node id) between the nodes' listeners, so it
// rides on the same TLS and SASL as every other request. Kafka's record
// batches cannot carry strata's records byte for byte (tags, per-record
// producer fields), so the follower marks its fetch with a tagged field
// (KIP-482: a flexible version's way to add optional data) and the leader
// answers with the records in strata's own format (docs/format.md), plus
// where its segments start and its leader-epoch history, also as tagged
// fields. docs/replication.md draws it.
const (
	// tagReplicaFetch, on a request partition: 1 byte of flags (probe);
	// on a response partition: present when the records are strata's.
	tagReplicaFetch = 0x5301
	// tagLogEnd, on a response partition: the leader's log end, i64.
	tagLogEnd = 0x5302
	// tagRolls, on a response partition: count u32, then count i64
	// offsets where the leader's segments start.
	tagRolls = 0x5303
	// tagEpochs, on a response partition: the leader's epoch history in
	// its durable form (replica.EpochHistory.Encode).
	tagEpochs = 0x5304
	// tagSeals, on a request partition: the follower's recently sealed
	// copies, count u32, then count × (first offset u64, last offset u64,
	// crc32c u32).
	tagSeals = 0x5305

	flagProbe = 1
)

func encodeSeals(seals []replica.Seal) []byte {
	b := binary.BigEndian.AppendUint32(nil, uint32(len(seals)))
	for _, s := range seals {
		b = binary.BigEndian.AppendUint64(b, s.Start)
		b = binary.BigEndian.AppendUint64(b, s.Last)
		b = binary.BigEndian.AppendUint32(b, s.CRC)
	}
	return b
}

// decodeSeals reads a follower's seal reports: bytes from the network.
func decodeSeals(b []byte) ([]replica.Seal, error) {
	if len(b) < 4 || uint64(len(b)-4) != 20*uint64(binary.BigEndian.Uint32(b)) {
		return nil, fmt.Errorf("sealed segments: %d bytes do not hold the count they give", len(b))
	}
	var out []replica.Seal
	for b = b[4:]; len(b) > 0; b = b[20:] {
		s := replica.Seal{Start: binary.BigEndian.Uint64(b), Last: binary.BigEndian.Uint64(b[8:]), CRC: binary.BigEndian.Uint32(b[16:])}
		if s.Last < s.Start {
			return nil, fmt.Errorf("sealed segment from offset %d to %d: its last offset is before its first", s.Start, s.Last)
		}
		out = append(out, s)
	}
	return out, nil
}

// replicaFetchFlags reports whether p is a follower's fetch, and its flags.
func replicaFetchFlags(p kmsg.FetchRequestTopicPartition) (flags byte, ok bool) {
	p.UnknownTags.Each(func(k uint32, v []byte) {
		if k == tagReplicaFetch && len(v) == 1 {
			flags, ok = v[0], true
		}
	})
	return flags, ok
}

// isReplicaFetch: a fetch from a peer whose partitions are all marked.
func (s *Server) isReplicaFetch(r *kmsg.FetchRequest) bool {
	if s.cfg.Replication == nil || max(r.ReplicaID, r.ReplicaState.ID) < 0 || len(r.Topics) == 0 {
		return false
	}
	for _, t := range r.Topics {
		for _, p := range t.Partitions {
			if _, ok := replicaFetchFlags(p); !ok {
				return false
			}
		}
	}
	return true
}

// replicaFetch answers a follower: each partition's records from its log
// end (ReadToLogEnd), waiting up to max_wait for some when there are none.
func (s *Server) replicaFetch(ctx context.Context, r *kmsg.FetchRequest) kmsg.Response {
	follower := max(r.ReplicaID, r.ReplicaState.ID)
	return s.longPoll(ctx, r, func() (*kmsg.FetchResponse, bool) {
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
			rp := noRecords(p.Partition)
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
				s.log.Warn("kafka: a follower's fetch with malformed seal reports", "shard", shard, "follower", follower, "err", err)
			}
			limit := min(p.PartitionMaxBytes, int32(left))
			if left <= 0 {
				limit = -1 // over the budget: this fetch counts, its records come next time
			}
			logStart, lerr := followerLogStart(p)
			if lerr != nil {
				s.log.Warn("kafka: a follower's fetch with a malformed log start", "shard", shard, "follower", follower, "err", lerr)
			}
			rd, err := s.cfg.Replication.FollowerFetch(ctx, shard, follower, p.CurrentLeaderEpoch, p.FetchOffset, limit, flags&flagProbe != 0, seals, logStart)
			if rp.ErrorCode = replicaFetchCode(err); rp.ErrorCode != errNone {
				if rp.ErrorCode == kerr.UnknownServerError.Code {
					s.log.Error("kafka: a follower's fetch", "shard", shard, "follower", follower, "offset", p.FetchOffset, "err", err)
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

// ReplicaTransport is how this node's followers fetch from their leaders.
func (s *Server) ReplicaTransport() replica.Transport { return replicaTransport{s} }

type replicaTransport struct{ s *Server }

func (t replicaTransport) Fetch(ctx context.Context, leader int32, frs []replica.FetchRequest) ([]replica.FetchAnswer, error) {
	addr, ok := t.s.brokerAddr(leader)
	if !ok {
		return nil, fmt.Errorf("%w: node %d is not live", replica.ErrNotLeader, leader)
	}
	b, err := t.s.peers.broker(addr)
	if err != nil {
		return nil, err
	}
	req := kmsg.NewPtrFetchRequest()
	req.ReplicaID, req.ReplicaState.ID = t.s.cluster.Self(), t.s.cluster.Self()
	req.MinBytes = 1
	topics := map[string]int{} // topic -> index in req.Topics
	for _, fr := range frs {
		req.MaxWaitMillis = max(req.MaxWaitMillis, int32(fr.Wait/time.Millisecond))
		req.MaxBytes = min(req.MaxBytes+fr.MaxBytes, 64<<20)
		i, ok := topics[fr.Topic]
		if !ok {
			i = len(req.Topics)
			topics[fr.Topic] = i
			rt := kmsg.NewFetchRequestTopic()
			rt.Topic = fr.Topic
			req.Topics = append(req.Topics, rt)
		}
		rp := kmsg.NewFetchRequestTopicPartition()
		rp.Partition, rp.FetchOffset, rp.PartitionMaxBytes = fr.Partition, fr.Offset, fr.MaxBytes
		rp.CurrentLeaderEpoch = fr.Epoch
		var flags byte
		if fr.Probe {
			flags |= flagProbe
		}
		rp.UnknownTags.Set(tagReplicaFetch, []byte{flags})
		if len(fr.Seals) > 0 {
			rp.UnknownTags.Set(tagSeals, encodeSeals(fr.Seals))
		}
		if fr.LogStart >= 0 && !fr.Probe {
			rp.UnknownTags.Set(tagLogStart, encodeLogStart(fr.LogStart))
		}
		req.Topics[i].Partitions = append(req.Topics[i].Partitions, rp)
	}
	t.s.prove(req, leader)
	resp, err := req.RequestWith(ctx, b)
	if err != nil {
		return nil, err
	}
	if resp.ErrorCode != errNone {
		return nil, fmt.Errorf("node %d answered a follower's fetch with %v", leader, kerr.ErrorForCode(resp.ErrorCode))
	}
	got := map[string]map[int32]kmsg.FetchResponseTopicPartition{}
	for _, rt := range resp.Topics {
		if got[rt.Topic] == nil {
			got[rt.Topic] = map[int32]kmsg.FetchResponseTopicPartition{}
		}
		for _, rp := range rt.Partitions {
			got[rt.Topic][rp.Partition] = rp
		}
	}
	out := make([]replica.FetchAnswer, len(frs))
	for i, fr := range frs {
		rp, ok := got[fr.Topic][fr.Partition]
		if !ok {
			out[i].Err = fmt.Errorf("node %d's answer to a follower's fetch leaves out %s-%d", leader, fr.Topic, fr.Partition)
			continue
		}
		out[i].ReplicaRead, out[i].Err = decodeReplicaFetch(resp.Version, rp)
	}
	return out, nil
}

// decodeReplicaFetch reads a leader's answer to a follower: untrusted
// bytes from the network, checked before anything is appended.
func decodeReplicaFetch(version int16, p kmsg.FetchResponseTopicPartition) (replica.ReplicaRead, error) {
	rd := replica.ReplicaRead{HighWatermark: p.HighWatermark, LogStart: p.LogStartOffset, LogEnd: -1}
	var native bool
	var err error
	p.UnknownTags.Each(func(k uint32, v []byte) {
		switch k {
		case tagReplicaFetch:
			native = true
		case tagLogEnd:
			if len(v) != 8 {
				err = fmt.Errorf("log end: %d bytes, want 8", len(v))
				return
			}
			rd.LogEnd = int64(binary.BigEndian.Uint64(v))
		case tagRolls:
			if len(v) < 4 || uint64(len(v)-4) != 8*uint64(binary.BigEndian.Uint32(v)) {
				err = fmt.Errorf("segment starts: %d bytes do not hold the count they give", len(v))
				return
			}
			for v = v[4:]; len(v) > 0; v = v[8:] {
				rd.Rolls = append(rd.Rolls, int64(binary.BigEndian.Uint64(v)))
			}
		case tagEpochs:
			h, herr := replica.DecodeEpochHistory(v)
			if herr != nil {
				err = herr
				return
			}
			rd.Epochs = h.Entries()
		}
	})
	if err != nil {
		return rd, fmt.Errorf("a leader's answer to a follower: %w", err)
	}
	switch p.ErrorCode {
	case errNone:
	case kerr.FencedLeaderEpoch.Code, kerr.UnknownLeaderEpoch.Code:
		return rd, replica.ErrFenced
	case kerr.NotLeaderForPartition.Code, kerr.UnknownTopicOrPartition.Code:
		return rd, replica.ErrNotLeader
	case kerr.OffsetOutOfRange.Code:
		return rd, fmt.Errorf("%w (the leader's log ends at %d)", replica.ErrDiverged, rd.LogEnd)
	default:
		return rd, fmt.Errorf("the leader answered a follower's fetch with %v", kerr.ErrorForCode(p.ErrorCode))
	}
	if !native {
		return rd, fmt.Errorf("the leader answered with Kafka record batches (fetch version %d): it does not speak strata's replica fetch", version)
	}
	for b := p.RecordBatches; len(b) > 0; {
		r, n, err := record.Decode(b)
		if err != nil {
			return rd, fmt.Errorf("a leader's records: %w", err)
		}
		rd.Records = append(rd.Records, r)
		b = b[n:]
	}
	return rd, nil
}

// WakeShard wakes the fetches waiting on shard: its high watermark rose.
func (s *Server) WakeShard(shard string) { s.appended.wake(shard) }

// ForgetProducers drops what is known of shard's idempotent producers: this
// node has just become its leader, and the state is rebuilt from its log
// (which holds every batch the old leader committed) at the next produce.
func (s *Server) ForgetProducers(shard string) { s.seqs.forget(shard) }
