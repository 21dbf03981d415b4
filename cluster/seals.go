package cluster

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"slices"
	"time"

	clientv3 "go.etcd.io/etcd/client/v3"
)

// A segment of a partition with several replicas is sealed for the cluster
// when its leader has seen every ISR member's copy agree (replica.DecideSeal):
// the leader records it under sealed/{topic}/{p:010d}/{start:020d}, with
// the copies' checksum and the replicas that hold an equal one. Tiering
// takes the segment only from one of those, whose copy it checks against
// the record (Claim), so a replica whose copy differs is never tiered and
// the segment's former leader need not be alive.

// SealRecord is a segment sealed for the cluster.
type SealRecord struct {
	Start    uint64    `json:"start"`
	Last     uint64    `json:"last"` // its last offset
	CRC      uint32    `json:"crc32c"`
	Replicas []int32   `json:"replicas"`
	Epoch    int32     `json:"leader_epoch"`
	Sealed   time.Time `json:"sealed"`
}

// ErrSealMismatch: a sealed segment was recorded already with other bytes.
var ErrSealMismatch = errors.New("cluster: the segment was sealed with another checksum")

func (k keys) seals() string              { return k.prefix + "/sealed/" }
func (k keys) topicSeals(t string) string { return k.seals() + t + "/" }
func (k keys) partitionSeals(t string, p int32) string {
	return fmt.Sprintf("%s%010d/", k.topicSeals(t), p)
}
func (k keys) seal(t string, p int32, start uint64) string {
	return fmt.Sprintf("%s%020d", k.partitionSeals(t, p), start)
}

// RecordSeal records segment s of partition p as sealed, as its leader at
// leaderEpoch: only while this node's lease holds and the partition record
// names it leader at that epoch. A record already there keeps its replicas
// and gains s's (a follower that caught up later); one with other offsets
// or another checksum is an ErrSealMismatch, never overwritten.
func (m *Member) RecordSeal(ctx context.Context, topic string, p int32, leaderEpoch int32, s SealRecord) error {
	tp := TopicPartition{topic, p}
	lease := m.lease()
	if lease == 0 {
		return fmt.Errorf("%w: %w: sealing a segment of %s", ErrNotLeader, ErrNotLive, tp)
	}
	key := m.keys.seal(topic, p, s.Start)
	for {
		resp, err := m.cli.Txn(ctx).Then(clientv3.OpGet(m.keys.partition(topic, p)), clientv3.OpGet(key)).Commit()
		if err != nil {
			return fmt.Errorf("cluster: sealing a segment of %s: %w", tp, err)
		}
		pk, sk := resp.Responses[0].GetResponseRange().Kvs, resp.Responses[1].GetResponseRange().Kvs
		var rec Partition
		if len(pk) == 0 || json.Unmarshal(pk[0].Value, &rec) != nil || rec.Leader != m.cfg.Self.ID || rec.Epoch != leaderEpoch {
			return fmt.Errorf("%w: sealing a segment of %s at epoch %d", ErrNotLeader, tp, leaderEpoch)
		}
		next, prevRev := s, int64(0)
		if len(sk) == 1 {
			var prev SealRecord
			if err := json.Unmarshal(sk[0].Value, &prev); err != nil {
				return fmt.Errorf("cluster: reading the seal of %s at %d: %w", tp, s.Start, err)
			}
			if prev.Last != s.Last || prev.CRC != s.CRC {
				return fmt.Errorf("%w: %s [%d, %d] crc %08x, recorded as [%d, %d] crc %08x", ErrSealMismatch, tp, s.Start, s.Last, s.CRC, prev.Start, prev.Last, prev.CRC)
			}
			next = prev
			for _, r := range s.Replicas {
				if !slices.Contains(next.Replicas, r) {
					next.Replicas = append(next.Replicas, r)
				}
			}
			if len(next.Replicas) == len(prev.Replicas) {
				return nil
			}
			prevRev = sk[0].ModRevision
		}
		next.Epoch = leaderEpoch
		if next.Sealed.IsZero() {
			next.Sealed = time.Now().UTC()
		}
		val, _ := json.Marshal(next)
		txn, err := m.cli.Txn(ctx).If(
			clientv3.Compare(clientv3.ModRevision(m.keys.partition(topic, p)), "=", pk[0].ModRevision),
			clientv3.Compare(clientv3.LeaseValue(m.keys.node(m.cfg.Self.ID)), "=", lease),
			clientv3.Compare(clientv3.ModRevision(key), "=", prevRev),
		).Then(clientv3.OpPut(key, string(val))).Commit()
		if err != nil {
			return fmt.Errorf("cluster: sealing a segment of %s: %w", tp, err)
		}
		if txn.Succeeded {
			return nil
		}
		if m.lease() != lease {
			return fmt.Errorf("%w: %w: sealing a segment of %s", ErrNotLeader, ErrNotLive, tp)
		}
		// The partition record (an ISR change) or the seal changed since
		// they were read: read them again.
	}
}

// Seal is the record of partition p's segment starting at start, if it
// was sealed for the cluster.
func (m *Member) Seal(ctx context.Context, topic string, p int32, start uint64) (SealRecord, bool, error) {
	resp, err := m.cli.Get(ctx, m.keys.seal(topic, p, start))
	if err != nil {
		return SealRecord{}, false, fmt.Errorf("cluster: reading the seal of %s-%d at %d: %w", topic, p, start, err)
	}
	if len(resp.Kvs) == 0 {
		return SealRecord{}, false, nil
	}
	var s SealRecord
	if err := json.Unmarshal(resp.Kvs[0].Value, &s); err != nil {
		return SealRecord{}, false, fmt.Errorf("cluster: reading the seal of %s-%d at %d: %w", topic, p, start, err)
	}
	return s, true, nil
}

// Seals lists the records of partition p's segments that start from from
// through to, by start: a replica derives from them which of its sealed
// segments are still to be settled (replica.SettleSeals).
func (m *Member) Seals(ctx context.Context, topic string, p int32, from, to uint64) ([]SealRecord, error) {
	end := m.keys.seal(topic, p, to) + "\x00"
	resp, err := m.cli.Get(ctx, m.keys.seal(topic, p, from), clientv3.WithRange(end))
	if err != nil {
		return nil, fmt.Errorf("cluster: reading the seals of %s-%d from %d: %w", topic, p, from, err)
	}
	out := make([]SealRecord, 0, len(resp.Kvs))
	for _, kv := range resp.Kvs {
		var s SealRecord
		if err := json.Unmarshal(kv.Value, &s); err != nil {
			return nil, fmt.Errorf("cluster: reading the seal %s: %w", kv.Key, err)
		}
		out = append(out, s)
	}
	return out, nil
}

// SealBelow is the record of partition p's segment that starts last below
// start, if any: the whole segment of which a copy refilled from a log
// start inside it holds the tail (replica.SettleSeals).
func (m *Member) SealBelow(ctx context.Context, topic string, p int32, start uint64) (SealRecord, bool, error) {
	resp, err := m.cli.Get(ctx, m.keys.partitionSeals(topic, p), clientv3.WithRange(m.keys.seal(topic, p, start)),
		clientv3.WithSort(clientv3.SortByKey, clientv3.SortDescend), clientv3.WithLimit(1))
	if err != nil {
		return SealRecord{}, false, fmt.Errorf("cluster: reading the seal of %s-%d below %d: %w", topic, p, start, err)
	}
	if len(resp.Kvs) == 0 {
		return SealRecord{}, false, nil
	}
	var s SealRecord
	if err := json.Unmarshal(resp.Kvs[0].Value, &s); err != nil {
		return SealRecord{}, false, fmt.Errorf("cluster: reading the seal %s: %w", resp.Kvs[0].Key, err)
	}
	return s, true, nil
}

// PruneSeals deletes the records of partition p's segments that end below
// offset below, its log start: they were deleted (retention, DeleteRecords),
// and their records would otherwise stay in etcd for the topic's life. The
// segment that holds below keeps its record.
func (m *Member) PruneSeals(ctx context.Context, topic string, p int32, below uint64) (int, error) {
	resp, err := m.cli.Get(ctx, m.keys.partitionSeals(topic, p), clientv3.WithRange(m.keys.seal(topic, p, below)))
	if err != nil {
		return 0, fmt.Errorf("cluster: pruning the seals of %s-%d: %w", topic, p, err)
	}
	n := 0
	for _, kv := range resp.Kvs {
		var s SealRecord
		if err := json.Unmarshal(kv.Value, &s); err != nil || s.Last >= below {
			continue
		}
		// Only the record as read: a later write (a replica added) is left
		// for the next prune.
		txn, err := m.cli.Txn(ctx).If(clientv3.Compare(clientv3.ModRevision(string(kv.Key)), "=", kv.ModRevision)).
			Then(clientv3.OpDelete(string(kv.Key))).Commit()
		if err != nil {
			return n, fmt.Errorf("cluster: pruning the seals of %s-%d: %w", topic, p, err)
		}
		if txn.Succeeded {
			n++
		}
	}
	return n, nil
}
