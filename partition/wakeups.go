package partition

import "sync"

// Long polls: a Fetch with nothing to read waits on its shards (Wait), and
// an append, or replication raising the high watermark, wakes it (Wake).

// hub wakes the long polls waiting on a shard when records are appended to
// it, so an idle Fetch costs nothing until there is something to read.
type hub struct {
	mu      sync.Mutex
	waiters map[string][]chan struct{}
}

// wait returns a channel closed at the next append to any of the shards.
func (h *hub) wait(shards []string) chan struct{} {
	ch := make(chan struct{})
	h.mu.Lock()
	for _, s := range shards {
		h.waiters[s] = append(h.waiters[s], ch)
	}
	h.mu.Unlock()
	return ch
}

// cancel forgets a wait that ended without being woken.
func (h *hub) cancel(shards []string, ch chan struct{}) {
	h.mu.Lock()
	defer h.mu.Unlock()
	for _, s := range shards {
		ws := h.waiters[s]
		for i, w := range ws {
			if w == ch {
				ws = append(ws[:i], ws[i+1:]...)
				break
			}
		}
		if len(ws) == 0 {
			delete(h.waiters, s)
		} else {
			h.waiters[s] = ws
		}
	}
}

// wake wakes every wait on shard. A channel waiting on several shards is
// closed once and dropped from the others by its waiter's cancel.
func (h *hub) wake(shard string) {
	h.mu.Lock()
	defer h.mu.Unlock()
	for _, ch := range h.waiters[shard] {
		select {
		case <-ch:
		default:
			close(ch)
		}
	}
	delete(h.waiters, shard)
}

func newHub() *hub { return &hub{waiters: map[string][]chan struct{}{}} }

// Wait returns a channel closed at the next Wake of any of shards; a wait
// that ends otherwise must Cancel it.
func (m *Manager) Wait(shards []string) chan struct{} { return m.hub.wait(shards) }

// Cancel forgets a wait that ended without being woken.
func (m *Manager) Cancel(shards []string, ch chan struct{}) { m.hub.cancel(shards, ch) }

// Wake wakes the long polls waiting on shard: it has new records, or its
// high watermark rose (replication tells it, replica.NodeConfig.Wake).
func (m *Manager) Wake(shard string) { m.hub.wake(shard) }

// Waiting is how many long polls wait on shard.
func (m *Manager) Waiting(shard string) int {
	m.hub.mu.Lock()
	defer m.hub.mu.Unlock()
	return len(m.hub.waiters[shard])
}
