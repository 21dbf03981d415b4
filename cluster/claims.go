package cluster

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
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
