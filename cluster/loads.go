package cluster

import (
	"context"
	"encoding/json"
	"fmt"

	clientv3 "go.etcd.io/etcd/client/v3"
)

// load is what a node reports of itself under {prefix}/loads/{id}, for
// placement to weigh: the bytes of its local segments.
type load struct {
	Bytes int64 `json:"bytes"`
}

// ReportLoad publishes the bytes this node keeps, under its lease (a dead
// node's report goes with it). It writes only when the figure moved by a
// tenth or more since the report the view holds, so etcd sees a write per
// many rolls, never per produce.
func (m *Member) ReportLoad(ctx context.Context, bytes int64) error {
	self := m.cfg.Self.ID
	m.mu.Lock()
	last, reported := m.view.loads[self]
	live := m.live
	m.mu.Unlock()
	if !live || reported && abs(bytes-last) < max(last/10, 1) {
		return nil
	}
	lease := m.lease()
	val, _ := json.Marshal(load{Bytes: bytes})
	_, err := m.cli.Txn(ctx).
		If(clientv3.Compare(clientv3.LeaseValue(m.keys.node(self)), "=", lease)).
		Then(clientv3.OpPut(m.keys.load(self), string(val), clientv3.WithLease(lease))).
		Commit()
	if err != nil {
		return fmt.Errorf("cluster: reporting this node's load: %w", err)
	}
	return nil
}

func abs(x int64) int64 {
	if x < 0 {
		return -x
	}
	return x
}
