package kafka

import (
	"bufio"
	"context"
	"errors"
	"net"
	"slices"
	"sync"
	"sync/atomic"
	"time"

	"github.com/twmb/franz-go/pkg/kerr"
	"github.com/twmb/franz-go/pkg/kmsg"
	"golang.org/x/time/rate"
)

const produceKey = 0

// budget bounds the request bytes held across all connections. A frame
// takes its bytes as they arrive (readFrame), not when its size is read: a
// client announcing large frames and sending nothing holds nothing. Unlike
// a FIFO semaphore it lets a request that fits go ahead of a larger one
// that waits, so a few clients announcing huge frames cannot stall the
// small requests of everyone else. When every byte in use is held by
// frames waiting for more (none would ever come back), the oldest waiter
// gets all its frame still needs and runs over the budget, by one frame at
// most; so a frame larger than the whole budget runs alone. A release wakes
// only the waiters that now fit.
//
// A frame whose client stops sending part-way holds what it sent until the
// frame timeout, and enough such frames fill the budget while waiting on
// the network, where no rule of the budget's own can see them. So each
// frame being read is a holder: while a request waits for room, a holder
// whose connection has delivered nothing for stallAfter is evicted (its
// connection closed, its bytes given back). A client sending at any pace
// the network allows is never evicted; one that went quiet mid-frame is,
// but only when others wait for the bytes it holds.
type budget struct {
	mu          sync.Mutex
	used        int64
	max         int64
	waiters     []*budgetWaiter // in arrival order
	waitingHeld int64           // what the waiters hold already
	gauge       func(int64)

	holders    map[*budgetHolder]struct{}
	stallAfter time.Duration
}

// budgetHolder is a frame being read from a connection.
type budgetHolder struct {
	lastRead *atomic.Int64 // unix ns of the connection's last read that delivered bytes
	stall    func()        // closes the connection
	held     int64         // granted to this frame so far
	waiting  bool          // waiting for room, not for the network
	gone     bool          // evicted
}

// defaultStallAfter is how long a frame's connection may deliver nothing
// before, under pressure, it loses its bytes: far beyond a healthy
// client's pauses between its writes of one frame.
const defaultStallAfter = 2 * time.Second

type budgetWaiter struct {
	n, held, rest int64
	granted       int64
	ready         chan struct{} // closed once granted is set
}

func newBudget(max int64) *budget {
	return &budget{max: max, gauge: func(int64) {}, holders: map[*budgetHolder]struct{}{},
		stallAfter: defaultStallAfter}
}

var errShuttingDown = errors.New("shutting down")

// acquire waits until n bytes are granted, or until stop is closed.
func (b *budget) acquire(stop <-chan struct{}, n int64) error {
	_, err := b.take(stop, n, 0, n)
	return err
}

// take grants n more bytes to a frame that holds held already and may need
// rest more in all (n <= rest), waiting for room, or until stop is closed.
// It returns what was granted: n, or rest when the frame was let over the
// budget.
func (b *budget) take(stop <-chan struct{}, n, held, rest int64) (int64, error) {
	return b.takeFor(nil, stop, n, held, rest)
}

// takeFor is take for a frame being read by holder h (nil: none), which
// it registers, so that h can be evicted should its connection stall while
// it holds bytes others wait for; done ends the registration.
func (b *budget) takeFor(h *budgetHolder, stop <-chan struct{}, n, held, rest int64) (int64, error) {
	b.mu.Lock()
	if h != nil {
		b.holders[h] = struct{}{}
	}
	if b.used+n <= b.max {
		b.used += n
		if h != nil {
			h.held += n
		}
		b.gauge(b.used)
		b.mu.Unlock()
		return n, nil
	}
	w := &budgetWaiter{n: n, held: held, rest: max(n, rest), ready: make(chan struct{})}
	b.waiters = append(b.waiters, w)
	b.waitingHeld += held
	if h != nil {
		h.waiting = true
	}
	b.grant()
	check := b.stallAfter / 4
	b.mu.Unlock()
	tick := time.NewTicker(check)
	defer tick.Stop()
	for {
		select {
		case <-w.ready:
			b.mu.Lock()
			if h != nil {
				h.waiting, h.held = false, h.held+w.granted
			}
			b.mu.Unlock()
			return w.granted, nil
		case now := <-tick.C:
			b.evictStalled(now)
		case <-stop:
			b.mu.Lock()
			defer b.mu.Unlock()
			if h != nil {
				h.waiting = false
			}
			select {
			case <-w.ready: // granted meanwhile: give it back
				b.used -= w.granted
			default:
				b.waiters = slices.DeleteFunc(b.waiters, func(o *budgetWaiter) bool { return o == w })
				b.waitingHeld -= held
			}
			b.grant()
			return 0, errShuttingDown
		}
	}
}

// done ends h's registration: its frame has arrived whole, or failed.
func (b *budget) done(h *budgetHolder) {
	b.mu.Lock()
	delete(b.holders, h)
	b.mu.Unlock()
}

// evictStalled closes the connections of the frames that hold bytes while
// waiting on a network that has delivered nothing for stallAfter, as of
// now, if any request waits for room. Their reads fail and give the bytes
// back (serveConn).
func (b *budget) evictStalled(now time.Time) int {
	b.mu.Lock()
	var stalled []*budgetHolder
	if len(b.waiters) > 0 {
		for h := range b.holders {
			if !h.waiting && !h.gone && h.held > 0 && now.Sub(time.Unix(0, h.lastRead.Load())) >= b.stallAfter {
				h.gone = true
				stalled = append(stalled, h)
			}
		}
	}
	b.mu.Unlock()
	for _, h := range stalled {
		h.stall()
	}
	return len(stalled)
}

// takeUpTo grants up to want bytes, as many as there is room for, at once
// if that is at least least (or nothing is in use), else waiting for
// least; or until stop is closed.
func (b *budget) takeUpTo(stop <-chan struct{}, want, least int64) (int64, error) {
	least = min(least, want)
	b.mu.Lock()
	if room := b.max - b.used; room >= least || b.used == 0 {
		n := min(want, max(room, least))
		b.used += n
		b.gauge(b.used)
		b.mu.Unlock()
		return n, nil
	}
	b.mu.Unlock()
	return b.take(stop, least, 0, least)
}

// force takes n bytes without waiting: what is already in memory.
func (b *budget) force(n int64) {
	b.mu.Lock()
	b.used += n
	b.gauge(b.used)
	b.mu.Unlock()
}

func (b *budget) release(n int64) {
	b.mu.Lock()
	b.used -= n
	b.grant()
	b.mu.Unlock()
}

// grant hands the freed bytes to the waiters that fit, oldest first; if
// none fits and only waiters hold bytes, the oldest gets the rest of its
// frame.
func (b *budget) grant() {
	kept := b.waiters[:0]
	for _, w := range b.waiters {
		if b.used+w.n <= b.max {
			b.give(w, w.n)
		} else {
			kept = append(kept, w)
		}
	}
	clear(b.waiters[len(kept):])
	b.waiters = kept
	if len(b.waiters) > 0 && b.used == b.waitingHeld {
		b.give(b.waiters[0], b.waiters[0].rest)
		b.waiters[0] = nil
		b.waiters = b.waiters[1:]
	}
	b.gauge(b.used)
}

func (b *budget) give(w *budgetWaiter, n int64) {
	b.used += n
	b.waitingHeld -= w.held
	w.granted = n
	close(w.ready)
}

// refusal logs a request refused for what a client sent at most once a
// second per message: a client repeating a bad request cannot flood the log
// (strata_kafka_errors_total and strata_kafka_refused_total count them all).
func (s *Server) refusal(msg string, args ...any) {
	v, _ := s.refusals.LoadOrStore(msg, &rate.Sometimes{Interval: time.Second})
	v.(*rate.Sometimes).Do(func() { s.log.Warn(msg, args...) })
}

// Throttling: a client address whose Produce was refused for what it
// carried (a batch over max.message.bytes, a decompression bomb, a corrupt
// batch) is muted before its next request on any connection, for 100ms
// doubling to 5s while the refusals go on, and told so in
// throttle_time_ms, as Kafka mutes a client over its quota. A client
// repeating a refused request, even over new connections, cannot take the
// broker's cores from the others; one refusal costs a well-behaved
// producer 100ms. A produce that is taken ends it.
const (
	firstPenalty = 100 * time.Millisecond
	maxPenalty   = 5 * time.Second
)

type penalties struct {
	mu sync.Mutex
	m  map[string]penalty // client address -> its penalty
}

type penalty struct {
	d     time.Duration
	until time.Time
}

// wait holds a request from ip until its penalty has passed; false when
// the server is shutting down meanwhile.
func (p *penalties) wait(ip string, stop <-chan struct{}) bool {
	p.mu.Lock()
	until := p.m[ip].until
	p.mu.Unlock()
	d := time.Until(until)
	if d <= 0 {
		return true
	}
	t := time.NewTimer(d)
	defer t.Stop()
	select {
	case <-t.C:
		return true
	case <-stop:
		return false
	}
}

// set records a refusal (longer penalty) or an accepted produce (none).
func (p *penalties) set(ip string, refused bool) time.Duration {
	p.mu.Lock()
	defer p.mu.Unlock()
	if !refused {
		delete(p.m, ip)
		return 0
	}
	if p.m == nil {
		p.m = map[string]penalty{}
	}
	now := time.Now()
	if len(p.m) > 10_000 { // forget penalties long served
		for k, v := range p.m {
			if now.Sub(v.until) > maxPenalty {
				delete(p.m, k)
			}
		}
	}
	d := min(max(2*p.m[ip].d, firstPenalty), maxPenalty)
	p.m[ip] = penalty{d: d, until: now.Add(d)}
	return d
}

func (s *Server) penalize(remote string, resp kmsg.Response) {
	p, ok := resp.(*kmsg.ProduceResponse)
	if !ok {
		return
	}
	refused := false
	for _, t := range p.Topics {
		for _, part := range t.Partitions {
			refused = refused || part.ErrorCode == kerr.MessageTooLarge.Code || part.ErrorCode == kerr.CorruptMessage.Code
		}
	}
	host, _, err := net.SplitHostPort(remote)
	if err != nil {
		host = remote
	}
	if d := s.penalties.set(host, refused); d > 0 {
		p.ThrottleMillis = int32(d / time.Millisecond)
		s.cfg.Metrics.refused("throttled")
	}
}

// watchAfter is how long a request runs before its client is watched:
// most answer sooner, and watching costs a goroutine and a few syscalls.
const watchAfter = 20 * time.Millisecond

// watchClient returns a context that ends if the client closes its
// connection while a request is handled, and a stop to call once it is.
// A request still running after watchAfter starts the watch, which peeks
// at the connection without consuming anything: a request the client sends
// meanwhile stays buffered for the loop that reads requests (and ends the
// watch: the client is there).
func watchClient(c net.Conn, r *bufio.Reader) (context.Context, func()) {
	ctx, cancel := context.WithCancel(context.Background())
	var mu sync.Mutex // orders the start and stop's wake-up after the watch's own deadline
	started, stopped := false, false
	done := make(chan struct{})
	watch := func() {
		defer close(done)
		for {
			_, err := r.Peek(1)
			var ne net.Error
			if err == nil {
				return
			}
			if !errors.As(err, &ne) || !ne.Timeout() {
				cancel() // closed or reset: the client is gone
				return
			}
			// The frame's read deadline, or Shutdown waking idle
			// connections: the request may take longer, keep watching.
			mu.Lock()
			if stopped {
				mu.Unlock()
				return
			}
			c.SetReadDeadline(time.Time{})
			mu.Unlock()
		}
	}
	t := time.AfterFunc(watchAfter, func() {
		mu.Lock()
		defer mu.Unlock()
		if !stopped {
			started = true
			go watch()
		}
	})
	return ctx, func() {
		mu.Lock()
		stopped = true
		t.Stop()
		if !started {
			mu.Unlock()
			cancel()
			return
		}
		c.SetReadDeadline(time.Now()) // wake the peek if it still waits
		mu.Unlock()
		<-done
		r.Read(nil) // clear the wake-up's timeout, so the next read is clean
		cancel()
	}
}
