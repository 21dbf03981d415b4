package segment

import (
	"context"
	"log/slog"
	"sync"
	"time"
)

// EventListener is told what happens to shards and segments, as Pebble's
// is: the catalog and tiering listen (cmd wires them). Events are delivered
// in order by one goroutine, after the change is durable in the engine's
// manifest; the I/O workers only queue them and never wait. A listener that
// fails, or a crash before delivery, loses nothing: at every start the
// engine tells ShardRecovered for each shard it holds, so a listener
// brings itself up to date. Nil functions are skipped.
type EventListener struct {
	// ShardCreated: a new shard with its first, empty active segment.
	ShardCreated func(sh ShardMeta, first SegmentMeta) error
	// SegmentSealed: a roll sealed a segment (with its checksum) and
	// started the next.
	SegmentSealed func(sealed, next SegmentMeta) error
	// SegmentDropped: a segment's local file is gone, after tiering (State
	// SegmentRemote) or by retention (SegmentDeleted).
	SegmentDropped func(s SegmentMeta) error
	// LowWatermark: offsets below low were deleted (DeleteRecords,
	// retention).
	LowWatermark func(shard string, low uint64) error
	// ShardRecovered runs at every start for every shard: everything the
	// manifest holds of it, oldest segment first.
	ShardRecovered func(sh ShardMeta, segs []SegmentMeta) error
	// ShardDeleted runs once the engine has forgotten a deleted shard (the
	// one created at created: a later shard of the name may exist by the
	// time a retry runs), so a listener can remove what it keeps elsewhere
	// (the catalog's entries, the cold tier's objects and manifest).
	// DeleteShard waits for it; an error, or a crash before it returns,
	// calls it again at the next start.
	ShardDeleted func(ctx context.Context, shard string, created time.Time) error
}

// events delivers queued events in order on one goroutine.
type events struct {
	log *slog.Logger

	mu        sync.Mutex
	queue     []event
	queued    uint64 // events ever queued
	delivered uint64
	wake      chan struct{} // the deliverer waits here for work
	changed   *sync.Cond    // on delivered; waiters of sync
	closed    bool
	done      chan struct{}
	closing   chan struct{} // closed by close: retries stop waiting
}

type event struct {
	name string
	call func() error
}

func newEvents(log *slog.Logger) *events {
	q := &events{log: log, wake: make(chan struct{}, 1), done: make(chan struct{}), closing: make(chan struct{})}
	q.changed = sync.NewCond(&q.mu)
	go q.run()
	return q
}

// post queues an event; it never blocks.
func (q *events) post(name string, call func() error) {
	q.mu.Lock()
	if q.closed {
		q.mu.Unlock()
		return
	}
	q.queue = append(q.queue, event{name, call})
	q.queued++
	q.mu.Unlock()
	select {
	case q.wake <- struct{}{}:
	default:
	}
}

func (q *events) run() {
	defer close(q.done)
	for {
		q.mu.Lock()
		for len(q.queue) == 0 {
			if q.closed {
				q.mu.Unlock()
				return
			}
			q.mu.Unlock()
			<-q.wake
			q.mu.Lock()
		}
		ev := q.queue[0]
		q.queue = q.queue[1:]
		q.mu.Unlock()
		q.deliver(ev)
		q.mu.Lock()
		q.delivered++
		q.changed.Broadcast()
		q.mu.Unlock()
	}
}

// eventRetries are the waits between a failed delivery's tries: a
// listener's store may blink (etcd electing a leader); later events wait
// meanwhile, so they stay in order. After the last, the event is dropped
// and the next start's ShardRecovered makes it up.
var eventRetries = []time.Duration{100 * time.Millisecond, 500 * time.Millisecond, 2 * time.Second, 5 * time.Second, 10 * time.Second}

func (q *events) deliver(ev event) {
	for try := 0; ; try++ {
		err := ev.call()
		if err == nil {
			return
		}
		q.mu.Lock()
		closing := q.closed
		q.mu.Unlock()
		if try == len(eventRetries) || closing {
			q.log.Error("an event listener failed; it catches up at the next start", "event", ev.name, "tries", try+1, "err", err)
			return
		}
		q.log.Warn("an event listener failed; trying again", "event", ev.name, "in", eventRetries[try], "err", err)
		select {
		case <-time.After(eventRetries[try]):
		case <-q.closing:
		}
	}
}

// sync waits until every event queued before it has been delivered.
func (q *events) sync() {
	q.mu.Lock()
	defer q.mu.Unlock()
	target := q.queued
	for q.delivered < target {
		q.changed.Wait()
	}
}

// close delivers what is queued, then stops.
func (q *events) close() {
	q.mu.Lock()
	q.closed = true
	q.mu.Unlock()
	close(q.closing)
	select {
	case q.wake <- struct{}{}:
	default:
	}
	<-q.done
}

// SyncEvents waits until every event so far has reached the listeners: the
// tiering job calls it before planning from the catalog.
func (e *Engine) SyncEvents() { e.events.sync() }

// Event helpers: each posts a listener call if the listener has one.

func (e *Engine) postShardCreated(sh ShardMeta, first SegmentMeta) {
	if f := e.cfg.Events.ShardCreated; f != nil {
		e.events.post("shard created", func() error { return f(sh, first) })
	}
}

func (e *Engine) postSegmentSealed(sealed, next SegmentMeta) {
	if f := e.cfg.Events.SegmentSealed; f != nil {
		e.events.post("segment sealed", func() error { return f(sealed, next) })
	}
}

func (e *Engine) postSegmentDropped(s SegmentMeta) {
	if f := e.cfg.Events.SegmentDropped; f != nil {
		e.events.post("segment dropped", func() error { return f(s) })
	}
}

func (e *Engine) postLowWatermark(shard string, low uint64) {
	if f := e.cfg.Events.LowWatermark; f != nil {
		e.events.post("low watermark", func() error { return f(shard, low) })
	}
}
