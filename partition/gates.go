package partition

import "sync"

// Gates hold, for each partition, the one lock that means "no change of
// leadership while an append is in flight": an append holds its shared side
// from its leadership check through the store append and replication's
// notice; a change of leadership (replication taking or losing the lead, a
// handoff fencing the partition at a roll) holds its exclusive side, so no
// append is in flight while it happens and none starts on the old terms
// after it. One node has one Gates, which the Manager, replication and the
// cluster's handoff share.
type Gates struct {
	mu sync.Mutex
	m  map[string]*sync.RWMutex
}

// NewGates makes the gates of a node's partitions.
func NewGates() *Gates { return &Gates{m: map[string]*sync.RWMutex{}} }

func (g *Gates) of(shard string) *sync.RWMutex {
	g.mu.Lock()
	defer g.mu.Unlock()
	l, ok := g.m[shard]
	if !ok {
		l = &sync.RWMutex{}
		g.m[shard] = l
	}
	return l
}

// Append holds shard's gate for one append; release lets a change of
// leadership through. An append takes it once: a change waiting between two
// holds of the same append would wait for it forever.
func (g *Gates) Append(shard string) (release func()) {
	l := g.of(shard)
	l.RLock()
	return l.RUnlock
}

// Change holds shard's gate for a change of its leadership: it waits for
// the appends in flight and holds new ones off until release.
func (g *Gates) Change(shard string) (release func()) {
	l := g.of(shard)
	l.Lock()
	return l.Unlock
}
