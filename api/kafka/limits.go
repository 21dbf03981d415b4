package kafka

import (
	"errors"
	"sync"
)

const produceKey = 0

// budget bounds the request bytes held across all connections. Unlike a
// FIFO semaphore it lets a request that fits go ahead of a larger one that
// waits, so a few clients announcing huge frames cannot stall the small
// requests of everyone else; a request larger than the whole budget runs
// alone.
type budget struct {
	mu    sync.Mutex
	used  int64
	max   int64
	freed chan struct{} // closed and replaced on every release
	gauge func(int64)
}

func newBudget(max int64) *budget {
	return &budget{max: max, freed: make(chan struct{}), gauge: func(int64) {}}
}

var errShuttingDown = errors.New("shutting down")

// acquire waits until n bytes fit, or until stop is closed.
func (b *budget) acquire(stop <-chan struct{}, n int64) error {
	for {
		b.mu.Lock()
		if b.used == 0 || b.used+n <= b.max {
			b.used += n
			b.gauge(b.used)
			b.mu.Unlock()
			return nil
		}
		freed := b.freed
		b.mu.Unlock()
		select {
		case <-freed:
		case <-stop:
			return errShuttingDown
		}
	}
}

func (b *budget) release(n int64) {
	b.mu.Lock()
	b.used -= n
	b.gauge(b.used)
	close(b.freed)
	b.freed = make(chan struct{})
	b.mu.Unlock()
}

// hub wakes the long polls waiting on a shard when records are appended to
// it, so an idle Fetch costs nothing until there is something to read.
type hub struct {
	mu      sync.Mutex
	waiters map[string][]chan struct{}
}

func newHub() *hub { return &hub{waiters: map[string][]chan struct{}{}} }

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
