package cluster

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"slices"
	"strata/engine/store"
	"strconv"
	"time"

	clientv3 "go.etcd.io/etcd/client/v3"
)

// Claims: one node at a time tiers a sealed segment that several nodes
// hold (a log split across nodes at a leadership move, or replicas with
// identical copies), all uploading to one shared bucket. The Member
// implements tiering.Claims: a claim is the key
//
//	{prefix}/claims/{shard}/{start_offset:020d}
//
// put only if absent, under this node's lease, so a node that dies loses
// its claims when its lease expires (within the session TTL) and another
// node takes the segment over. A segment is named by its offsets, not its
// number: each node numbers its own segments.

// ErrNotLive: a node whose lease is lost leads, reports and claims nothing
// until it has registered again (its old claims went with the lease).
var ErrNotLive = errors.New("cluster: this node's lease is lost; it leads and claims nothing until it registers again")

// claimTimeout bounds a claim's and a release's round trip to etcd.
const claimTimeout = 10 * time.Second

// claim is a claim key's value, for an operator reading etcd.
type claim struct {
	Node      int32     `json:"node"`
	EndOffset uint64    `json:"end_offset"`
	Claimed   time.Time `json:"claimed"`
}

func (k keys) claim(shard string, start uint64) string {
	return fmt.Sprintf("%s/claims/%s/%020d", k.prefix, shard, start)
}

// Claim takes the segment of shard from startOffset to endOffset for this
// node under its lease. ok is false while another node holds it. release
// deletes the claim if it is still this one's (a claim whose lease was lost
// in between is gone already, or another node's by then).
func (m *Member) Claim(ctx context.Context, shard string, startOffset, endOffset uint64) (release func(), ok bool, err error) {
	lease := m.lease()
	if lease == 0 {
		return nil, false, ErrNotLive
	}
	val, _ := json.Marshal(claim{Node: m.cfg.Self.ID, EndOffset: endOffset, Claimed: time.Now().UTC()})
	// A shard made for a cluster topic is tiered only while that topic
	// lives: once it is deleted (and maybe made again), its objects would
	// land where the controller is clearing the old topic's, or where the
	// new topic's belong.
	var guards []clientv3.Cmp
	if tp, ok := store.ParseShard(shard); ok {
		if mine, why, err := m.replicaTurn(ctx, TopicPartition{tp.Topic, tp.Partition}, startOffset, endOffset); err != nil || !mine {
			if why != "" {
				m.log.Debug("cluster: a replicated segment left to tier later or elsewhere", "shard", shard, "start", startOffset, "why", why)
			}
			return nil, false, err
		}
		marker, err := m.cli.Get(ctx, m.shardKeys().of(shard))
		if err != nil {
			return nil, false, fmt.Errorf("cluster: claiming a segment of %s: %w", shard, err)
		}
		if len(marker.Kvs) == 1 {
			inc, err := strconv.ParseInt(string(marker.Kvs[0].Value), 10, 64)
			if err != nil {
				return nil, false, fmt.Errorf("cluster: claiming a segment of %s: its shard record %q: %w", shard, marker.Kvs[0].Value, err)
			}
			guards = append(guards, clientv3.Compare(clientv3.CreateRevision(m.keys.topic(tp.Topic)), "=", inc))
		}
	}
	return takeClaim(ctx, m.cli, m.keys.claim(shard, startOffset), string(val), lease, guards...)
}

// takeClaim puts key under lease if it is absent. A key already under the
// same lease is this node's own, left by a release that did not reach etcd:
// it is taken again.
func takeClaim(ctx context.Context, cli *clientv3.Client, key, val string, lease clientv3.LeaseID, guards ...clientv3.Cmp) (release func(), ok bool, err error) {
	ctx, cancel := context.WithTimeout(ctx, claimTimeout)
	defer cancel()
	resp, err := cli.Txn(ctx).
		If(append([]clientv3.Cmp{clientv3.Compare(clientv3.CreateRevision(key), "=", 0)}, guards...)...).
		Then(clientv3.OpPut(key, val, clientv3.WithLease(lease))).
		Else(clientv3.OpGet(key)).
		Commit()
	if err != nil {
		return nil, false, fmt.Errorf("cluster: claiming %s: %w", key, err)
	}
	rev := resp.Header.Revision
	if !resp.Succeeded {
		kvs := resp.Responses[0].GetResponseRange().Kvs
		if len(kvs) != 1 || clientv3.LeaseID(kvs[0].Lease) != lease {
			return nil, false, nil
		}
		rev = kvs[0].ModRevision
	}
	return func() { releaseClaim(cli, key, rev) }, true, nil
}

// releaseClaim deletes the claim only if it is still the one put at rev.
// It runs after the claimant's work, whose context may be over: it has its
// own. A release that fails leaves the claim to expire with the lease.
func releaseClaim(cli *clientv3.Client, key string, rev int64) {
	ctx, cancel := context.WithTimeout(context.Background(), claimTimeout)
	defer cancel()
	cli.Txn(ctx).
		If(clientv3.Compare(clientv3.ModRevision(key), "=", rev)).
		Then(clientv3.OpDelete(key)).
		Commit()
}

// replicaTurn says whether this node may tier the segment of a partition
// with several replicas now (why not, if not). Only a segment sealed for
// the cluster (replica.DecideSeal: its copies compared) is tiered, first by
// the least loaded live replica whose copy agreed, so the work spreads and
// the former leader need not be alive. Past the grace (Config.ReplicaGrace)
// any replica whose copy agreed may, and so may a node whose copy did not:
// its job reads a verified replica's copy instead (TierSource), so the
// segment is tiered even when no verified replica does it.
func (m *Member) replicaTurn(ctx context.Context, tp TopicPartition, start, end uint64) (mine bool, why string, err error) {
	m.mu.Lock()
	t, ok := m.view.topics[tp.Topic]
	m.mu.Unlock()
	if !ok || t.ReplicationFactor <= 1 {
		return true, "", nil
	}
	rec, ok, err := m.Seal(ctx, tp.Topic, tp.Partition, start)
	switch {
	case err != nil:
		return false, "", err
	case !ok:
		return false, "not sealed for the cluster yet (its replicas' copies not compared)", nil
	case rec.Last != end:
		return false, fmt.Sprintf("sealed for the cluster as offsets %d to %d, here %d to %d", rec.Start, rec.Last, start, end), nil
	}
	grace := m.cfg.ReplicaGrace
	late := time.Since(rec.Sealed) > grace
	if !slices.Contains(rec.Replicas, m.cfg.Self.ID) {
		switch {
		case !late:
			return false, fmt.Sprintf("this node's copy did not agree with the leader's; replicas %v tier it, or this node from one of their copies %s after the seal", rec.Replicas, grace), nil
		case m.liveReplica(rec.Replicas) < 0:
			return false, fmt.Sprintf("this node's copy did not agree with the leader's, and none of the replicas %v whose copies did is live to read from", rec.Replicas), nil
		}
		return true, "", nil
	}
	if late {
		return true, "", nil
	}
	if best := m.liveReplica(rec.Replicas); best >= 0 && best != m.cfg.Self.ID {
		return false, fmt.Sprintf("left to node %d, the least loaded replica, for %s after the seal", best, grace), nil
	}
	return true, "", nil
}

// liveReplica is the least loaded live node of replicas, or -1.
func (m *Member) liveReplica(replicas []int32) int32 {
	m.mu.Lock()
	defer m.mu.Unlock()
	best, bestBytes := int32(-1), int64(0)
	for _, r := range replicas {
		if _, live := m.view.nodes[r]; !live {
			continue
		}
		if b := m.view.loads[r]; best < 0 || b < bestBytes {
			best, bestBytes = r, b
		}
	}
	return best
}

// TierSource is the copy of a sealed segment this node's tiering job
// reads: its own (Remote false), or, when its copy did not agree at the
// seal, node Node's, a live replica whose copy did. CRC is the checksum the
// cluster sealed the segment with, which a remote copy must check out to.
type TierSource struct {
	Remote bool
	Node   int32
	CRC    uint32
}

// TierSource says which copy of shard's segment from start to end this
// node tiers, once it has claimed it: a shard of an unreplicated topic,
// and one this node's copy agreed for, is read here.
func (m *Member) TierSource(ctx context.Context, shard string, start, end uint64) (TierSource, error) {
	tp, ok := store.ParseShard(shard)
	if !ok {
		return TierSource{Node: m.cfg.Self.ID}, nil
	}
	m.mu.Lock()
	t, ok := m.view.topics[tp.Topic]
	m.mu.Unlock()
	if !ok || t.ReplicationFactor <= 1 {
		return TierSource{Node: m.cfg.Self.ID}, nil
	}
	rec, ok, err := m.Seal(ctx, tp.Topic, tp.Partition, start)
	switch {
	case err != nil:
		return TierSource{}, err
	case !ok || rec.Last != end:
		return TierSource{}, fmt.Errorf("cluster: %s offsets %d to %d are not sealed for the cluster", shard, start, end)
	case slices.Contains(rec.Replicas, m.cfg.Self.ID):
		return TierSource{Node: m.cfg.Self.ID, CRC: rec.CRC}, nil
	}
	node := m.liveReplica(rec.Replicas)
	if node < 0 {
		return TierSource{}, fmt.Errorf("cluster: %s offsets %d to %d: this node's copy did not agree at the seal, and none of the replicas %v whose copies did is live", shard, start, end, rec.Replicas)
	}
	return TierSource{Remote: true, Node: node, CRC: rec.CRC}, nil
}
