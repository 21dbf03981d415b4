package replica

import (
	"context"
	"sync"
	"time"
)

// A fetcher copies every partition this node follows from one leader node
// with one long poll at a time, as Kafka's replica fetcher does: a
// follower of many partitions sends one request per leader, not one per
// partition, and an idle partition's wait never delays a busy one's
// records. Each partition's own goroutine (follow) truncates first, then
// hands the partition to its leader's fetcher and waits for an error.
type fetcher struct {
	n      *Node
	tr     Transport
	leader int32

	mu      sync.Mutex
	idle    *sync.Cond // signalled when a member's answer has been applied
	members map[string]*member
	running bool
	warned  time.Time // the last failed fetch logged at warn
}

type member struct {
	ctx    context.Context // ends when the partition stops following
	p      *partition
	a      Assignment
	end    int64
	errc   chan error // gets the partition's first error, then it leaves
	taking bool       // an answer is being applied to its log
}

// fetcherFor is the fetcher for leader, started if need be.
func (n *Node) fetcherFor(tr Transport, leader int32) *fetcher {
	n.mu.Lock()
	defer n.mu.Unlock()
	if n.fetchers == nil {
		n.fetchers = map[int32]*fetcher{}
	}
	f := n.fetchers[leader]
	if f == nil {
		f = &fetcher{n: n, tr: tr, leader: leader, members: map[string]*member{}}
		f.idle = sync.NewCond(&f.mu)
		n.fetchers[leader] = f
	}
	return f
}

// add has the fetcher copy p from end on; the channel gets the error that
// stops it.
// A member added during a poll joins the next one (at most FetchWait
// later): ending the poll early would throw away the others' answers.
func (f *fetcher) add(ctx context.Context, p *partition, a Assignment, end int64) <-chan error {
	m := &member{ctx: ctx, p: p, a: a, end: end, errc: make(chan error, 1)}
	f.mu.Lock()
	defer f.mu.Unlock()
	f.members[p.shard] = m
	if !f.running {
		f.running = true
		f.n.goBackground(f.run)
	}
	return m.errc
}

// remove stops copying shard, and returns once no answer is being applied
// to it: the node may lead it next.
func (f *fetcher) remove(shard string) {
	f.mu.Lock()
	defer f.mu.Unlock()
	m := f.members[shard]
	delete(f.members, shard)
	for m != nil && m.taking {
		f.idle.Wait()
	}
}

// run polls the leader for its members until it has none.
func (f *fetcher) run(bg context.Context) {
	backoff := 50 * time.Millisecond
	for {
		f.mu.Lock()
		if len(f.members) == 0 {
			f.running = false
			f.mu.Unlock()
			return
		}
		ms := make([]*member, 0, len(f.members))
		reqs := make([]FetchRequest, 0, len(f.members))
		for _, m := range f.members {
			m.p.mu.Lock()
			seals := f.n.ownSeals(m.p)
			m.p.mu.Unlock()
			start := int64(-1)
			if low, _, err := f.n.cfg.Store.Watermarks(m.ctx, m.p.shard); err == nil {
				start = int64(low)
			}
			ms = append(ms, m)
			reqs = append(reqs, FetchRequest{Topic: m.a.Topic, Partition: m.a.Partition, Epoch: m.a.Epoch,
				Offset: m.end, MaxBytes: f.n.cfg.FetchBytes, Wait: f.n.cfg.FetchWait, Seals: seals, LogStart: start})
		}
		f.mu.Unlock()
		ctx, cancel := context.WithTimeout(bg, f.n.cfg.FetchWait+30*time.Second)
		answers, err := f.tr.Fetch(ctx, f.leader, reqs)
		cancel()
		if err != nil {
			// A leader that died is routine (the metadata moves its
			// partitions); one that stays unreachable (TLS, SASL) is not.
			if now := f.n.cfg.Now(); now.Sub(f.warned) > 10*time.Second {
				f.warned = now
				f.n.cfg.Log.Warn("replica: fetching from the leader", "leader", f.leader, "partitions", len(reqs), "err", err)
			}
			select {
			case <-f.n.cfg.Clock.After(backoff):
			case <-bg.Done():
				// The node stopped: its members are leaving too.
				f.mu.Lock()
				f.running = false
				f.mu.Unlock()
				return
			}
			backoff = min(2*backoff, time.Second)
			continue
		}
		backoff = 50 * time.Millisecond
		for i, m := range ms {
			f.mu.Lock()
			if f.members[m.p.shard] != m {
				f.mu.Unlock()
				continue // it left while the fetch was out
			}
			m.taking = true
			f.mu.Unlock()
			ans := answers[i]
			if ans.Err == nil {
				m.end, ans.Err = f.n.take(m.ctx, m.p, m.end, ans.ReplicaRead)
			}
			f.mu.Lock()
			m.taking = false
			f.idle.Broadcast()
			if ans.Err != nil && f.members[m.p.shard] == m {
				delete(f.members, m.p.shard)
				m.errc <- ans.Err
			}
			f.mu.Unlock()
		}
	}
}
