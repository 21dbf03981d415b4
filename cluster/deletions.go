package cluster

import (
	"context"
	"time"

	clientv3 "go.etcd.io/etcd/client/v3"
)

// deletion marks a deleted topic's name under {prefix}/deleting/{topic}
// until the controller has cleared what the topic left in the bucket: its
// objects there are keyed by topic and offsets, so a topic created again
// under the name before they go would find the old topic's objects where
// its own belong.
type deletion struct {
	Partitions  int32     `json:"partitions"`
	Incarnation int64     `json:"incarnation"` // the deleted topic key's creation revision
	Deleted     time.Time `json:"deleted"`
}

type deletionRec struct {
	deletion
	modRev int64
}

// clearDeletions runs while t is this node's term: each marked topic's
// leftovers are cleared with Config.ClearTopic and the mark removed, in a
// transaction fenced by the term. A failure is retried after a while: the
// name stays taken, nothing else waits on it.
func (m *Member) clearDeletions(ctx context.Context, t term) {
	failed := map[string]time.Time{}
	for ctx.Err() == nil {
		m.mu.Lock()
		changed := m.changed
		todo := make(map[string]deletionRec, len(m.view.deletions))
		for name, d := range m.view.deletions {
			todo[name] = d
		}
		m.mu.Unlock()
		for name, d := range todo {
			if time.Now().Before(failed[name]) {
				continue
			}
			if m.cfg.ClearTopic != nil {
				if err := m.cfg.ClearTopic(ctx, name, d.Partitions); err != nil {
					if ctx.Err() == nil {
						m.log.Warn("cluster: clearing a deleted topic's objects from the bucket; retrying in 10s", "topic", name, "err", err)
					}
					failed[name] = time.Now().Add(10 * time.Second)
					continue
				}
			}
			resp, err := m.cli.Txn(ctx).
				If(clientv3.Compare(clientv3.CreateRevision(t.key), "=", t.rev),
					clientv3.Compare(clientv3.ModRevision(m.keys.deletion(name)), "=", d.modRev)).
				Then(clientv3.OpDelete(m.keys.deletion(name))).
				Commit()
			switch {
			case err != nil:
				failed[name] = time.Now().Add(10 * time.Second)
			case resp.Succeeded:
				delete(failed, name)
				m.log.Info("cluster: a deleted topic's leftovers are cleared; its name is free", "topic", name, "partitions", d.Partitions)
			}
		}
		select {
		case <-ctx.Done():
		case <-changed:
		case <-time.After(10 * time.Second): // retry what failed
		}
	}
}
