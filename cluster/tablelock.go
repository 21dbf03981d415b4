package cluster

import (
	"context"
	"fmt"
	"time"

	"go.etcd.io/etcd/client/v3/concurrency"
)

// Table commits: every node that tiers a topic's partitions commits the
// topic's Iceberg table in the shared bucket. The pointer's swap and the
// plan keep concurrent commits correct (the loser plans again), but each
// loss is a wasted commit and a conflict counted, and a commit's expiry
// and sweep read every manifest. So one node commits a topic's table at a
// time: LockTable holds the etcd mutex
//
//	{prefix}/tablecommits/{topic}/{lease}
//
// under this node's session, so a node SIGKILLed mid-commit lets the next
// one in when its lease expires (within the session TTL). The next commit
// reads the table as the dead one left it and finishes what it began.

// tableLockWait bounds the wait for another node's commit of the same
// table: past it the commit fails, and the next tiering run commits.
const tableLockWait = time.Minute

// LockTable waits until this node alone may commit the topic's table and
// returns the release.
func (m *Member) LockTable(ctx context.Context, topic string) (release func(), err error) {
	m.mu.Lock()
	s := m.session
	m.mu.Unlock()
	if s == nil {
		return nil, ErrNotLive
	}
	mu := concurrency.NewMutex(s, m.keys.prefix+"/tablecommits/"+topic)
	wait, cancel := context.WithTimeout(ctx, tableLockWait)
	defer cancel()
	if err := mu.Lock(wait); err != nil {
		return nil, fmt.Errorf("cluster: waiting for another node's commit of topic %s's table: %w", topic, err)
	}
	return func() {
		ctx, cancel := context.WithTimeout(context.Background(), claimTimeout)
		defer cancel()
		// A release that fails leaves the key to go with the lease.
		mu.Unlock(ctx)
	}, nil
}
