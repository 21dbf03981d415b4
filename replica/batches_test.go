package replica

import (
	"context"
	"fmt"
	"slices"
	"sync"
	"testing"
	"time"

	"strata/engine/memory"
	"strata/engine/record"
	"strata/engine/store"
)

// staticMeta is a cluster whose metadata never changes: node 1 leads, node
// 2 follows, and every ISR write is taken.
type staticMeta struct {
	mu  sync.Mutex
	as  []Assignment
	rev int64
}

func (m *staticMeta) Live() bool { return true }
func (m *staticMeta) Assignments() []Assignment {
	m.mu.Lock()
	defer m.mu.Unlock()
	return slices.Clone(m.as)
}
func (m *staticMeta) Changed() <-chan struct{} { return nil }
func (m *staticMeta) ChangeISR(_ context.Context, _ string, _ int32, _ int32, _ []int32, rev int64) (int64, error) {
	m.mu.Lock()
	defer m.mu.Unlock()
	m.rev = max(m.rev, rev) + 1
	return m.rev, nil
}
func (m *staticMeta) ReportCandidate(context.Context, string, int32, int32, int64) error { return nil }
func (m *staticMeta) RecordSeal(context.Context, string, int32, int32, SealRecord) error { return nil }
func (m *staticMeta) PruneSeals(context.Context, string, int32, uint64) (int, error)     { return 0, nil }
func (m *staticMeta) Seals(context.Context, string, int32, uint64, uint64) ([]SealRecord, error) {
	return nil, nil
}
func (m *staticMeta) SealBelow(context.Context, string, int32, uint64) (SealRecord, bool, error) {
	return SealRecord{}, false, nil
}

// localTransport carries a follower's fetches to a leader Node in this
// process, and shows the test each one before it is answered.
type localTransport struct {
	leader *Node
	self   int32
	seen   func()
}

func (tr localTransport) Fetch(ctx context.Context, leader int32, reqs []FetchRequest) ([]FetchAnswer, error) {
	tr.seen()
	out := make([]FetchAnswer, len(reqs))
	got := false
	for i, r := range reqs {
		rd, err := tr.leader.FollowerFetch(ctx, fmt.Sprintf("%s-%d", r.Topic, r.Partition), tr.self, r.Epoch, r.Offset, r.MaxBytes, r.Probe, r.Seals, r.LogStart)
		out[i] = FetchAnswer{ReplicaRead: rd, Err: err}
		got = got || len(rd.Records) > 0 || err != nil || r.Probe
	}
	if !got {
		// The leader's long poll, short: nothing to copy yet.
		select {
		case <-ctx.Done():
		case <-time.After(10 * time.Millisecond):
		}
	}
	return out, nil
}

// testBatchEnd: in these tests a record's protocol data is one byte, 1 on
// the last record of its batch.
func testBatchEnd(r *record.Record) bool { return len(r.ProtocolData) == 1 && r.ProtocolData[0] == 1 }

func batch(n int, closed bool) []record.Record {
	recs := make([]record.Record, n)
	for i := range recs {
		recs[i] = record.Record{Timestamp: 1, Value: make([]byte, 100), ProtocolData: []byte{0}}
	}
	if closed {
		recs[n-1].ProtocolData = []byte{1}
	}
	return recs
}

// A follower copying a log through fetches of 4 KiB never holds part of a
// batch: the leader's answer runs to the end of a batch of 2,000 records
// (200 KB), and the follower's log end is only ever a batch boundary, or,
// when the leader's own log ends inside a batch (a crash mid-append), the
// leader's log end.
func TestFollowerCopiesWholeBatches(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	const shard = "t-0"
	ls, fs := memory.New(0), memory.New(0)
	for _, s := range []*memory.Store{ls, fs} {
		if err := s.CreateShard(ctx, shard); err != nil {
			t.Fatal(err)
		}
	}
	bounds := []uint64{0}
	for _, b := range [][]record.Record{batch(10, true), batch(2000, true), batch(3, true), batch(7, false)} {
		base, err := ls.Append(ctx, shard, b)
		if err != nil {
			t.Fatal(err)
		}
		bounds = append(bounds, base+uint64(len(b)))
	}
	meta := &staticMeta{as: []Assignment{{Topic: "t", Partition: 0, Leader: 1, Epoch: 1, Replicas: []int32{1, 2}, ISR: []int32{1, 2}, Rev: 1, MinISR: 1, LeaderLive: true}}}
	node := func(self int32, st Store) *Node {
		return NewNode(NodeConfig{Self: self, Store: st, Meta: meta, FetchBytes: 4 << 10, FetchWait: 10 * time.Millisecond, BatchEnd: testBatchEnd})
	}
	leader, follower := node(1, ls), node(2, fs)
	go leader.Run(ctx, nil)
	var mu sync.Mutex
	var ends []uint64
	tr := localTransport{leader: leader, self: 2, seen: func() {
		if e, err := fs.LogEnd(ctx, shard); err == nil {
			mu.Lock()
			if len(ends) == 0 || ends[len(ends)-1] != e {
				ends = append(ends, e)
			}
			mu.Unlock()
		}
	}}
	go follower.Run(ctx, tr)
	want := bounds[len(bounds)-1]
	for {
		if e, _ := fs.LogEnd(ctx, shard); e == want {
			break
		}
		select {
		case <-ctx.Done():
			e, _ := fs.LogEnd(ctx, shard)
			t.Fatalf("the follower's log ends at %d, not the leader's %d", e, want)
		case <-time.After(10 * time.Millisecond):
		}
	}
	tr.seen()
	mu.Lock()
	defer mu.Unlock()
	for _, e := range ends {
		if !slices.Contains(bounds, e) {
			t.Errorf("the follower's log ended at %d, inside a batch (batches end at %v); its log ends were %v", e, bounds, ends)
		}
	}
	recs, err := fs.ReadToLogEnd(ctx, shard, 0, store.Budget{})
	if err != nil || uint64(len(recs)) != want {
		t.Fatalf("the follower holds %d records (%v), want %d", len(recs), err, want)
	}
}

func TestCutToBatch(t *testing.T) {
	n := NewNode(NodeConfig{BatchEnd: testBatchEnd})
	recs := append(append(batch(2, true), batch(3, true)...), batch(4, false)...)
	for i := range recs {
		recs[i].Offset = uint64(i)
	}
	for _, tc := range []struct {
		name   string
		recs   []record.Record
		logEnd int64
		want   int
	}{
		{"whole batches", recs[:5], 20, 5},
		{"a batch's first part after whole ones", recs[:7], 20, 5},
		{"only a batch's first part", recs[2:4], 20, 0},
		{"a batch's first part at the leader's log end", recs, 9, 9},
		{"nothing", nil, 9, 0},
	} {
		if got := n.cutToBatch(tc.recs, tc.logEnd); len(got) != tc.want {
			t.Errorf("%s: %d records kept, want %d", tc.name, len(got), tc.want)
		}
	}
}

// A delete at the leader is answered once the follower's log starts there
// too: the follower deletes with its next fetch, and reports its new log
// start with the one after.
func TestAwaitLogStart(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	const shard = "t-0"
	ls, fs := memory.New(0), memory.New(0)
	for _, s := range []*memory.Store{ls, fs} {
		if err := s.CreateShard(ctx, shard); err != nil {
			t.Fatal(err)
		}
	}
	if _, err := ls.Append(ctx, shard, batch(100, true)); err != nil {
		t.Fatal(err)
	}
	meta := &staticMeta{as: []Assignment{{Topic: "t", Partition: 0, Leader: 1, Epoch: 1, Replicas: []int32{1, 2}, ISR: []int32{1, 2}, Rev: 1, MinISR: 1, LeaderLive: true}}}
	leader := NewNode(NodeConfig{Self: 1, Store: ls, Meta: meta, FetchWait: 10 * time.Millisecond})
	follower := NewNode(NodeConfig{Self: 2, Store: fs, Meta: meta, FetchWait: 10 * time.Millisecond})
	go leader.Run(ctx, nil)
	go follower.Run(ctx, localTransport{leader: leader, self: 2, seen: func() {}})
	for {
		if e, _ := fs.LogEnd(ctx, shard); e == 100 {
			break
		}
		select {
		case <-ctx.Done():
			t.Fatal("the follower never caught up")
		case <-time.After(10 * time.Millisecond):
		}
	}
	if err := ls.DeleteBefore(ctx, shard, 60); err != nil {
		t.Fatal(err)
	}
	wctx, wcancel := context.WithTimeout(ctx, 5*time.Second)
	defer wcancel()
	if err := leader.AwaitLogStart(wctx, shard, 60); err != nil {
		t.Fatalf("waiting for the follower's log start: %v", err)
	}
	if low, _, _ := fs.Watermarks(ctx, shard); low != 60 {
		t.Fatalf("answered with the follower's log starting at %d, want 60", low)
	}
}
