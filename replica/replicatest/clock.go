package replicatest

import (
	"slices"
	"sync"
	"time"
)

// Clock is a fake replica.Clock: time moves only when Advance says, and
// every wait on it (a node's ticks, a follower's backoff) fires then, in
// the order they are due.
type Clock struct {
	mu      sync.Mutex
	now     time.Time
	waiters []waiter
}

type waiter struct {
	at time.Time
	ch chan time.Time
}

// NewClock is a clock that reads start until it is advanced.
func NewClock(start time.Time) *Clock { return &Clock{now: start} }

func (c *Clock) Now() time.Time {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.now
}

func (c *Clock) After(d time.Duration) <-chan time.Time {
	c.mu.Lock()
	defer c.mu.Unlock()
	ch := make(chan time.Time, 1)
	if d <= 0 {
		ch <- c.now
		return ch
	}
	c.waiters = append(c.waiters, waiter{at: c.now.Add(d), ch: ch})
	return ch
}

// Advance moves the clock on by d and fires the waits that are due by
// then, the earliest first.
func (c *Clock) Advance(d time.Duration) {
	c.mu.Lock()
	defer c.mu.Unlock()
	c.now = c.now.Add(d)
	slices.SortStableFunc(c.waiters, func(a, b waiter) int { return a.at.Compare(b.at) })
	k := 0
	for _, w := range c.waiters {
		if w.at.After(c.now) {
			break
		}
		w.ch <- w.at
		k++
	}
	c.waiters = slices.Delete(c.waiters, 0, k)
}

// Waiting is how many waits have not fired yet.
func (c *Clock) Waiting() int {
	c.mu.Lock()
	defer c.mu.Unlock()
	return len(c.waiters)
}
