package kafka

import (
	"errors"
	"slices"
	"sync"
	"time"

	"golang.org/x/time/rate"
)

const produceKey = 0

// budget bounds the request bytes held across all connections. Unlike a
// FIFO semaphore it lets a request that fits go ahead of a larger one that
// waits, so a few clients announcing huge frames cannot stall the small
// requests of everyone else; a request larger than the whole budget runs
// alone. A release wakes only the waiters that now fit.
type budget struct {
	mu      sync.Mutex
	used    int64
	max     int64
	waiters []*budgetWaiter // in arrival order
	gauge   func(int64)
}

type budgetWaiter struct {
	n     int64
	ready chan struct{} // closed once n is granted
}

func newBudget(max int64) *budget {
	return &budget{max: max, gauge: func(int64) {}}
}

var errShuttingDown = errors.New("shutting down")

func (b *budget) fits(n int64) bool { return b.used == 0 || b.used+n <= b.max }

// acquire waits until n bytes are granted, or until stop is closed.
func (b *budget) acquire(stop <-chan struct{}, n int64) error {
	b.mu.Lock()
	if b.fits(n) {
		b.used += n
		b.gauge(b.used)
		b.mu.Unlock()
		return nil
	}
	w := &budgetWaiter{n: n, ready: make(chan struct{})}
	b.waiters = append(b.waiters, w)
	b.mu.Unlock()
	select {
	case <-w.ready:
		return nil
	case <-stop:
		b.mu.Lock()
		defer b.mu.Unlock()
		select {
		case <-w.ready: // granted meanwhile: give it back
			b.used -= n
			b.grant()
		default:
			b.waiters = slices.DeleteFunc(b.waiters, func(o *budgetWaiter) bool { return o == w })
		}
		return errShuttingDown
	}
}

func (b *budget) release(n int64) {
	b.mu.Lock()
	b.used -= n
	b.grant()
	b.mu.Unlock()
}

// grant hands the freed bytes to the waiters that fit, oldest first.
func (b *budget) grant() {
	kept := b.waiters[:0]
	for _, w := range b.waiters {
		if b.fits(w.n) {
			b.used += w.n
			close(w.ready)
		} else {
			kept = append(kept, w)
		}
	}
	clear(b.waiters[len(kept):])
	b.waiters = kept
	b.gauge(b.used)
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

// refusal logs a request refused for what a client sent at most once a
// second per message: a client repeating a bad request cannot flood the log
// (strata_kafka_errors_total and strata_kafka_refused_total count them all).
func (s *Server) refusal(msg string, args ...any) {
	v, _ := s.refusals.LoadOrStore(msg, &rate.Sometimes{Interval: time.Second})
	v.(*rate.Sometimes).Do(func() { s.log.Warn(msg, args...) })
}
