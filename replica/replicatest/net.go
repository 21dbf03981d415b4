package replicatest

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"strings"
	"sync"
	"time"

	"strata/engine/store"
	"strata/replica"
)

// Net is an in-memory replica.Transport between the kit's nodes. A
// follower's fetch waits in the net, as a long poll waits at its leader,
// until the test delivers it (Deliver): which fetch is answered when is the
// script's choice, so a run is the same every time. A fetch to or from a
// node that is down fails at once, as a refused connection does.
type Net struct {
	clock   *Clock
	mu      sync.Mutex
	leaders map[int32]Leader
	calls   []*Call
	seq     int
}

// Leader is the side of a node that answers its followers' fetches
// (replica.Node).
type Leader interface {
	FollowerFetch(ctx context.Context, shard string, follower int32, epoch int32, offset int64, maxBytes int32, probe bool, seals []replica.Seal, logStart int64) (replica.ReplicaRead, error)
}

// Call is one fetch waiting in the net.
type Call struct {
	From, To int32
	Reqs     []replica.FetchRequest
	seq      int
	due      time.Time // when its long poll ends, answered or not
	ctx      context.Context
	answer   chan []replica.FetchAnswer
}

// ErrUnreachable is a fetch to or from a node that is down.
var ErrUnreachable = errors.New("replicatest: node unreachable")

// NewNet is a net with no node up.
// Its long polls end on clock.
func NewNet(clock *Clock) *Net { return &Net{clock: clock, leaders: map[int32]Leader{}} }

// Up connects node: fetches to it are answered by l.
func (n *Net) Up(node int32, l Leader) {
	n.mu.Lock()
	defer n.mu.Unlock()
	n.leaders[node] = l
}

// Down disconnects node: its fetches waiting in the net, and those to it,
// fail.
func (n *Net) Down(node int32) {
	n.mu.Lock()
	defer n.mu.Unlock()
	delete(n.leaders, node)
	n.calls = slices.DeleteFunc(n.calls, func(c *Call) bool {
		if c.From == node || c.To == node {
			close(c.answer)
			return true
		}
		return false
	})
}

// For is node's transport.
func (n *Net) For(node int32) replica.Transport { return transport{n, node} }

type transport struct {
	n    *Net
	self int32
}

func (t transport) Fetch(ctx context.Context, leader int32, reqs []replica.FetchRequest) ([]replica.FetchAnswer, error) {
	n := t.n
	n.mu.Lock()
	if n.leaders[t.self] == nil || n.leaders[leader] == nil {
		n.mu.Unlock()
		return nil, fmt.Errorf("node %d to node %d: %w", t.self, leader, ErrUnreachable)
	}
	n.seq++
	var wait time.Duration
	for _, r := range reqs {
		wait = max(wait, r.Wait)
	}
	c := &Call{From: t.self, To: leader, Reqs: reqs, seq: n.seq, due: n.clock.Now().Add(wait), ctx: ctx, answer: make(chan []replica.FetchAnswer, 1)}
	n.calls = append(n.calls, c)
	n.mu.Unlock()
	select {
	case ans, ok := <-c.answer:
		if !ok {
			return nil, fmt.Errorf("node %d to node %d: %w", t.self, leader, ErrUnreachable)
		}
		return ans, nil
	case <-ctx.Done():
		n.mu.Lock()
		n.calls = slices.DeleteFunc(n.calls, func(o *Call) bool { return o == c })
		n.mu.Unlock()
		return nil, ctx.Err()
	}
}

// Waiting lists the fetches waiting in the net, by sender, then by when
// they were sent.
func (n *Net) Waiting() []*Call {
	n.mu.Lock()
	defer n.mu.Unlock()
	out := slices.Clone(n.calls)
	slices.SortStableFunc(out, func(a, b *Call) int {
		if a.From != b.From {
			return int(a.From - b.From)
		}
		return a.seq - b.seq
	})
	return out
}

// idle reports whether ans told c's sender nothing new but the high
// watermark: no records, no error, no probe.
func idle(c *Call, ans []replica.FetchAnswer) bool {
	for i, a := range ans {
		if c.Reqs[i].Probe || len(a.Records) > 0 || a.Err != nil {
			return false
		}
	}
	return true
}

// Deliver answers c from its leader and returns the answers, which its
// sender then takes; nil if c is no longer waiting.
func (n *Net) Deliver(c *Call) []replica.FetchAnswer {
	n.mu.Lock()
	i := slices.Index(n.calls, c)
	if i < 0 {
		n.mu.Unlock()
		return nil
	}
	n.calls = slices.Delete(n.calls, i, i+1)
	l := n.leaders[c.To]
	n.mu.Unlock()
	out := make([]replica.FetchAnswer, len(c.Reqs))
	for i, r := range c.Reqs {
		shard := store.ShardName(r.Topic, r.Partition)
		maxBytes := r.MaxBytes
		rd, err := l.FollowerFetch(c.ctx, shard, c.From, r.Epoch, r.Offset, maxBytes, r.Probe, r.Seals, r.LogStart)
		out[i] = replica.FetchAnswer{ReplicaRead: rd, Err: err}
	}
	c.answer <- out
	return out
}

// describe is a call and its answers as the trace prints them.
func describe(c *Call, ans []replica.FetchAnswer) string {
	var b strings.Builder
	for i, r := range c.Reqs {
		shard := store.ShardName(r.Topic, r.Partition)
		kind := "fetch"
		if r.Probe {
			kind = "probe"
		}
		fmt.Fprintf(&b, "%d->%d %s %s epoch=%d offset=%d", c.From, c.To, kind, shard, r.Epoch, r.Offset)
		if !r.Probe && r.LogStart >= 0 {
			fmt.Fprintf(&b, " start=%d", r.LogStart)
		}
		b.WriteString("\n")
		if i >= len(ans) {
			continue
		}
		a := ans[i]
		fmt.Fprintf(&b, "%d->%d ", c.To, c.From)
		if a.Err != nil {
			fmt.Fprintf(&b, "error: %v\n", a.Err)
			continue
		}
		if len(a.Records) > 0 {
			fmt.Fprintf(&b, "records=%d..%d ", a.Records[0].Offset, a.Records[len(a.Records)-1].Offset)
		}
		fmt.Fprintf(&b, "hw=%d end=%d start=%d", a.HighWatermark, a.LogEnd, a.LogStart)
		if len(a.Rolls) > 0 {
			fmt.Fprintf(&b, " rolls=%v", a.Rolls)
		}
		if r.Probe {
			var es []string
			for _, e := range a.Epochs {
				es = append(es, fmt.Sprintf("%d@%d", e.Epoch, e.Start))
			}
			fmt.Fprintf(&b, " epochs=[%s]", strings.Join(es, " "))
		}
		b.WriteString("\n")
	}
	return b.String()
}
