package replica

import (
	"context"
	"errors"
	"sync/atomic"
	"testing"
	"time"

	"strata/engine/memory"
)

// seenMeta counts a node's reads of the assignments: a reconcile reads
// them, then applies them before it reads again.
type seenMeta struct {
	*staticMeta
	reads atomic.Int64
}

func (m *seenMeta) Assignments() []Assignment {
	m.reads.Add(1)
	return m.staticMeta.Assignments()
}

// applied waits until the node has read the assignments twice more, so
// what they said at the first read is applied.
func (m *seenMeta) applied(ctx context.Context, t *testing.T) {
	t.Helper()
	for want := m.reads.Load() + 2; m.reads.Load() < want; {
		select {
		case <-ctx.Done():
			t.Fatal("the node stopped reconciling")
		case <-time.After(10 * time.Millisecond):
		}
	}
}

// cutTransport is a localTransport whose fetches fail while cut.
type cutTransport struct {
	localTransport
	cut *atomic.Bool
}

func (tr cutTransport) Fetch(ctx context.Context, leader int32, reqs []FetchRequest) ([]FetchAnswer, error) {
	if tr.cut.Load() {
		time.Sleep(10 * time.Millisecond)
		return nil, errors.New("cut")
	}
	return tr.localTransport.Fetch(ctx, leader, reqs)
}

// A topic deleted and made again is led afresh, though its shards have
// the old names and its first leader epoch is the old one's: the leader
// of the old incarnation, which saw its shard replaced under it, must not
// carry over the old log's end and high watermark. With them it took an
// acks=all write to the new topic below the old high watermark as
// acknowledged at once, with no follower holding it (found by the cluster
// harness, seed 28: a re-created partition's ISR stayed at its leader for
// good, and before issue #24's fixes, seed 2 acknowledged an offset twice).
func TestRecreatedTopicIsLedAfresh(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	const shard = "t-0"
	ls, fs := memory.New(0), memory.New(0)
	for _, s := range []*memory.Store{ls, fs} {
		if err := s.CreateShard(ctx, shard); err != nil {
			t.Fatal(err)
		}
	}
	if _, err := ls.Append(ctx, shard, batch(56, true)); err != nil {
		t.Fatal(err)
	}
	a := Assignment{Topic: "t", Partition: 0, Leader: 1, Epoch: 0, Replicas: []int32{1, 2}, ISR: []int32{1, 2}, Rev: 1, MinISR: 2,
		LeaderLive: true, Incarnation: 10}
	meta := &staticMeta{as: []Assignment{a}}
	lm, fm := &seenMeta{staticMeta: meta}, &seenMeta{staticMeta: meta}
	leader := NewNode(NodeConfig{Self: 1, Store: ls, Meta: lm, FetchWait: 10 * time.Millisecond})
	follower := NewNode(NodeConfig{Self: 2, Store: fs, Meta: fm, FetchWait: 10 * time.Millisecond})
	cut := &atomic.Bool{}
	go leader.Run(ctx, nil)
	go follower.Run(ctx, cutTransport{localTransport{leader: leader, self: 2, seen: func() {}}, cut})
	for {
		// Led, and the follower holds all: the high watermark is 56.
		if e, _ := fs.LogEnd(ctx, shard); e == 56 && leader.Leads(shard) {
			break
		}
		select {
		case <-ctx.Done():
			t.Fatal("the follower never caught up with its leader")
		case <-time.After(10 * time.Millisecond):
		}
	}

	// The topic deleted and made again: each node's shard replaced (by
	// cluster.KeepShards), then the new incarnation's assignment, at the
	// same epoch. The follower cannot fetch from here on.
	cut.Store(true)
	for _, s := range []*memory.Store{ls, fs} {
		if err := s.DeleteShard(ctx, shard); err != nil {
			t.Fatal(err)
		}
		if err := s.CreateShard(ctx, shard); err != nil {
			t.Fatal(err)
		}
	}
	a.Incarnation, a.Rev = 20, 2
	meta.mu.Lock()
	meta.as = []Assignment{a}
	meta.mu.Unlock()
	lm.applied(ctx, t)
	fm.applied(ctx, t)

	epoch, err := leader.CheckAppend(shard, true)
	if err != nil {
		t.Fatalf("acks=all append to the new topic: %v", err)
	}
	base, err := ls.Append(ctx, shard, batch(3, true))
	if err != nil {
		t.Fatal(err)
	}
	leader.Appended(shard, int64(base)+3)
	if got := leader.AwaitAck(ctx, shard, epoch, int64(base), int64(base)+3, 500*time.Millisecond); !errors.Is(got, RequestTimedOut.Err()) {
		e, _ := fs.LogEnd(ctx, shard)
		t.Fatalf("acks=all write at %d-%d of the new topic, its follower cut off (holding up to %d): %v; want REQUEST_TIMED_OUT", base, base+2, e, got)
	}
	if _, hw, _ := ls.Watermarks(ctx, shard); hw != 0 {
		t.Fatalf("the new topic's high watermark is %d with its follower cut off; want 0", hw)
	}
}
