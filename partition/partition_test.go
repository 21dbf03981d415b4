package partition

import (
	"context"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"slices"
	"sync"
	"testing"
	"time"

	"strata/engine/memory"
	"strata/engine/record"
	"strata/engine/store"
	"strata/metadata"
)

var quiet = slog.New(slog.NewTextHandler(io.Discard, nil))

// Leader is a partition as a test's metadata says it: whether this node
// leads it, its leader epoch and how many replicas it has.
type Leader struct {
	Leads    bool
	Epoch    int32
	Replicas int
}

// meta is a cluster's metadata that a test changes as it goes; this node
// is node 1.
type meta struct {
	mu sync.Mutex
	ld Leader
	// block, if set, holds the next Partition call until it is closed, once
	// entered is closed: the append is then inside its gate.
	block, entered chan struct{}
}

func (m *meta) Self() int32 { return 1 }

func (m *meta) Partition(string, int32) (metadata.PartitionInfo, bool) {
	m.mu.Lock()
	block, entered := m.block, m.entered
	m.block = nil
	ld := m.ld
	m.mu.Unlock()
	if block != nil {
		close(entered)
		<-block
	}
	info := metadata.PartitionInfo{Leader: 2, LeaderEpoch: ld.Epoch}
	if ld.Leads {
		info.Leader = 1
	}
	for i := range ld.Replicas {
		info.Replicas = append(info.Replicas, int32(i+1))
	}
	return info, true
}

func (m *meta) set(ld Leader) {
	m.mu.Lock()
	m.ld = ld
	m.mu.Unlock()
}

// replication is a fake of replication's leader side, for the outcomes a
// test injects; it notes what the append path told it.
type replication struct {
	epoch    int32
	check    error // CheckAppend's answer
	ack      error // AwaitAck's answer
	acksAll  []bool
	appended []int64
	awaited  [][3]int64 // epoch, base, end
}

func (r *replication) CheckAppend(shard string, acksAll bool) (int32, error) {
	r.acksAll = append(r.acksAll, acksAll)
	return r.epoch, r.check
}

func (r *replication) Appended(shard string, logEnd int64) { r.appended = append(r.appended, logEnd) }

func (r *replication) Leads(string) bool { return r.check == nil }

func (r *replication) AwaitLogStart(context.Context, string, int64) error { return nil }

func (r *replication) AwaitAck(ctx context.Context, shard string, epoch int32, base, end int64, timeout time.Duration) error {
	r.awaited = append(r.awaited, [3]int64{int64(epoch), base, end})
	return r.ack
}

func recs(n int) []record.Record {
	out := make([]record.Record, n)
	for i := range out {
		out[i] = record.Record{Timestamp: int64(1000 + i), Value: fmt.Appendf(nil, "v%d", i)}
	}
	return out
}

// producerRecs are n records of producer pid at epoch from sequence first,
// as the Kafka front end decodes them.
func producerRecs(pid int64, epoch int16, first int32, n int) []record.Record {
	out := recs(n)
	for i := range out {
		out[i].ProtocolData = ProducerData(pid, epoch, SeqAdd(first, int32(i)), i == n-1)
	}
	return out
}

func idem(pid int64, epoch int16, first int32, n int) Batch {
	return Batch{Records: producerRecs(pid, epoch, first, n),
		Producer: &ProducerBatch{ID: pid, Epoch: epoch, FirstSequence: first, LastOffsetDelta: int32(n - 1)}}
}

var tp = ID{Topic: "t", Partition: 0}

const shard = "t-0"

// step is one append and what it must answer.
type step struct {
	name     string
	batch    Batch
	acks     Acks
	before   func(*meta, *replication) // a change of the world before it
	wantBase int64
	wantErr  error
}

func TestAppend(t *testing.T) {
	lead := Leader{Leads: true, Epoch: 3, Replicas: 1}
	replicated := Leader{Leads: true, Epoch: 3, Replicas: 3}
	for _, tc := range []struct {
		name string
		ld   Leader // the metadata at the start; the zero Leader: a single node (no Meta)
		repl bool   // replication runs (else none: Replication is nil)
		// wantLen is how many records the log holds at the end; wantEpochs
		// its leader-epoch history.
		steps      []step
		wantLen    int
		wantEpochs []store.EpochEntry
		check      func(t *testing.T, r *replication)
	}{
		{name: "a single node appends at the log end, with no epochs",
			steps: []step{
				{name: "first", batch: Batch{Records: recs(3)}, wantBase: 0},
				{name: "second", batch: Batch{Records: recs(2)}, acks: AckAll, wantBase: 3},
			},
			wantLen: 5},
		{name: "a leader records its epoch before its first append",
			ld: lead,
			steps: []step{
				{name: "first", batch: Batch{Records: recs(2)}, wantBase: 0},
				{name: "at the next epoch", batch: Batch{Records: recs(1)}, wantBase: 2,
					before: func(m *meta, _ *replication) { m.set(Leader{Leads: true, Epoch: 4, Replicas: 1}) }},
			},
			wantLen: 3, wantEpochs: []store.EpochEntry{{Epoch: 3, Start: 0}, {Epoch: 4, Start: 2}}},
		{name: "a node the metadata does not name leader appends nothing",
			ld: Leader{Leads: false, Epoch: 3, Replicas: 1},
			steps: []step{
				{name: "fenced", batch: Batch{Records: recs(2)}, wantBase: -1, wantErr: ErrFenced},
			}},
		{name: "a leader whose history is past the metadata's epoch appends nothing",
			ld: lead,
			steps: []step{
				{name: "first", batch: Batch{Records: recs(1)}, wantBase: 0},
				{name: "behind", batch: Batch{Records: recs(1)}, wantBase: -1, wantErr: ErrNotLeader,
					before: func(m *meta, _ *replication) { m.set(Leader{Leads: true, Epoch: 2, Replicas: 1}) }},
			},
			wantLen: 1, wantEpochs: []store.EpochEntry{{Epoch: 3, Start: 0}}},
		{name: "a replicated partition is refused while replication does not run",
			ld: replicated,
			steps: []step{
				{name: "no replication", batch: Batch{Records: recs(1)}, wantBase: -1, wantErr: ErrNotLeader},
			}},
		{name: "a replicated partition appends through replication, which has recorded the epoch",
			ld: replicated, repl: true,
			steps: []step{
				{name: "acks=1", batch: Batch{Records: recs(2)}, wantBase: 0},
				{name: "acks=all", batch: Batch{Records: recs(3)}, acks: AckAll, wantBase: 2},
			},
			wantLen: 5,
			check: func(t *testing.T, r *replication) {
				if !slices.Equal(r.acksAll, []bool{false, true}) || !slices.Equal(r.appended, []int64{2, 5}) ||
					!slices.Equal(r.awaited, [][3]int64{{7, 2, 5}}) {
					t.Errorf("replication heard acks=all %v, appended %v, awaited %v; want [false true], [2 5], [[7 2 5]]", r.acksAll, r.appended, r.awaited)
				}
			}},
		{name: "replication refuses an append before it is made",
			ld: replicated, repl: true,
			steps: []step{
				{name: "under min ISR", batch: Batch{Records: recs(2)}, acks: AckAll, wantBase: -1, wantErr: ErrNotEnoughReplicas,
					before: func(_ *meta, r *replication) { r.check = ErrNotEnoughReplicas }},
				{name: "deposed", batch: Batch{Records: recs(2)}, wantBase: -1, wantErr: ErrNotLeader,
					before: func(_ *meta, r *replication) { r.check = ErrNotLeader }},
			},
			check: func(t *testing.T, r *replication) {
				if len(r.appended) != 0 || len(r.awaited) != 0 {
					t.Errorf("refused appends were reported: appended %v, awaited %v", r.appended, r.awaited)
				}
			}},
		{name: "acks=all answers how the wait for acks ended; the records stay",
			ld: replicated, repl: true,
			steps: []step{
				{name: "timed out", batch: Batch{Records: recs(2)}, acks: AckAll, wantBase: -1, wantErr: ErrTimedOut,
					before: func(_ *meta, r *replication) { r.ack = ErrTimedOut }},
				{name: "ISR shrank", batch: Batch{Records: recs(1)}, acks: AckAll, wantBase: -1, wantErr: ErrNotEnoughReplicasAfterAppend,
					before: func(_ *meta, r *replication) { r.ack = ErrNotEnoughReplicasAfterAppend }},
			},
			wantLen: 3},
		{name: "an idempotent producer's retries are answered with their first offsets",
			steps: []step{
				{name: "first batch", batch: idem(7, 0, 0, 3), wantBase: 0},
				{name: "another producer", batch: idem(8, 0, 0, 2), wantBase: 3},
				{name: "next batch", batch: idem(7, 0, 3, 2), wantBase: 5},
				{name: "retry of the first", batch: idem(7, 0, 0, 3), wantBase: 0},
				{name: "retry of the last", batch: idem(7, 0, 3, 2), wantBase: 5},
				{name: "a gap", batch: idem(7, 0, 9, 1), wantBase: -1, wantErr: ErrOutOfOrderSequence},
				{name: "a new epoch", batch: idem(7, 1, 0, 1), wantBase: 7},
				{name: "the old epoch", batch: idem(7, 0, 5, 1), wantBase: -1, wantErr: ErrProducerFenced},
			},
			wantLen: 8},
		{name: "a duplicate older than the recent batches cannot be answered",
			steps: func() []step {
				var s []step
				for i := range recentBatches + 1 {
					s = append(s, step{name: fmt.Sprint("batch ", i), batch: idem(7, 0, int32(i), 1), wantBase: int64(i)})
				}
				return append(s, step{name: "retry of the first", batch: idem(7, 0, 0, 1), wantBase: -1, wantErr: ErrDuplicateSequence})
			}(),
			wantLen: recentBatches + 1},
		{name: "a retry of an idempotent batch through replication waits for its acks again",
			ld: replicated, repl: true,
			steps: []step{
				{name: "first", batch: idem(7, 0, 0, 2), acks: AckAll, wantBase: 0},
				{name: "retry", batch: idem(7, 0, 0, 2), acks: AckAll, wantBase: 0},
			},
			wantLen: 2,
			check: func(t *testing.T, r *replication) {
				if !slices.Equal(r.awaited, [][3]int64{{7, 0, 2}, {7, 0, 2}}) {
					t.Errorf("awaited %v, want the batch's offsets twice", r.awaited)
				}
			}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			ctx := context.Background()
			st := memory.New(0)
			if err := st.CreateShard(ctx, shard); err != nil {
				t.Fatal(err)
			}
			md := &meta{ld: tc.ld}
			r := &replication{epoch: 7}
			cfg := Config{Log: quiet}
			if tc.ld != (Leader{}) {
				cfg.Meta = md
			}
			if tc.repl {
				cfg.Replication = r
			}
			m := New(st, cfg)
			for _, s := range tc.steps {
				if s.before != nil {
					s.before(md, r)
				}
				base, err := m.Append(ctx, tp, s.batch, s.acks, time.Second)
				if base != s.wantBase || !errors.Is(err, s.wantErr) || (s.wantErr == nil && err != nil) {
					t.Fatalf("%s: base %d, err %v; want base %d, err %v", s.name, base, err, s.wantBase, s.wantErr)
				}
			}
			_, high, err := st.Watermarks(ctx, shard)
			if err != nil {
				t.Fatal(err)
			}
			if int(high) != tc.wantLen {
				t.Errorf("the log holds %d records, want %d", high, tc.wantLen)
			}
			eps, err := st.LeaderEpochs(ctx, shard)
			if err != nil {
				t.Fatal(err)
			}
			if !slices.Equal(eps, tc.wantEpochs) {
				t.Errorf("leader epochs %v, want %v", eps, tc.wantEpochs)
			}
			if tc.check != nil {
				tc.check(t, r)
			}
		})
	}
}

// An append to a shard not made yet is the store's ErrUnknownShard, with
// or without a producer: the client retries.
func TestAppendToAMissingShard(t *testing.T) {
	m := New(memory.New(0), Config{Log: quiet})
	for _, b := range []Batch{{Records: recs(1)}, idem(7, 0, 0, 1)} {
		if _, err := m.Append(context.Background(), tp, b, AckLeader, time.Second); !errors.Is(err, store.ErrUnknownShard) {
			t.Errorf("producer %v: err %v, want store.ErrUnknownShard", b.Producer != nil, err)
		}
	}
}

// The producer state is rebuilt from the log: a new Manager over the same
// store (a restart, or a new leader) answers a retry of a batch stored
// before it, and ForgetProducers makes the Manager read the log again.
func TestProducersRebuiltFromTheLog(t *testing.T) {
	ctx := context.Background()
	st := memory.New(0)
	if err := st.CreateShard(ctx, shard); err != nil {
		t.Fatal(err)
	}
	first := New(st, Config{Log: quiet})
	for _, b := range []Batch{idem(7, 2, 0, 3), idem(7, 2, 3, 2)} {
		if _, err := first.Append(ctx, tp, b, AckLeader, time.Second); err != nil {
			t.Fatal(err)
		}
	}
	// Records another node appended (a follower's copy) are read too once
	// the state is forgotten.
	if _, err := st.Append(ctx, shard, producerRecs(9, 0, 0, 4)); err != nil {
		t.Fatal(err)
	}
	first.ForgetProducers(shard)
	for name, m := range map[string]*Manager{"restarted": New(st, Config{Log: quiet}), "forgot": first} {
		ps, err := m.Producers(ctx, shard)
		if err != nil {
			t.Fatal(err)
		}
		// Batches stored back to back are one run in the log: the rebuilt
		// state knows them as one, from its first offset.
		want := []Producer{{ID: 7, Epoch: 2, LastSequence: 4, LastTimestamp: 1002, LastBase: 0}, {ID: 9, Epoch: 0, LastSequence: 3, LastTimestamp: 1003, LastBase: 5}}
		if !slices.Equal(ps, want) {
			t.Errorf("%s: producers %+v, want %+v", name, ps, want)
		}
		if base, err := m.Append(ctx, tp, idem(7, 2, 0, 3), AckLeader, time.Second); base != 0 || err != nil {
			t.Errorf("%s: a retry of the first batch: base %d, err %v; want 0", name, base, err)
		}
	}
}

// A change of leadership waits for the append in flight, and an append
// waits for the change: both hold the partition's one gate.
func TestTheGateHoldsLeadershipChangesOffAppends(t *testing.T) {
	ctx := context.Background()
	st := memory.New(0)
	if err := st.CreateShard(ctx, shard); err != nil {
		t.Fatal(err)
	}
	block, entered := make(chan struct{}), make(chan struct{})
	md := &meta{ld: Leader{Leads: true, Epoch: -1, Replicas: 1}, block: block, entered: entered}
	gates := NewGates()
	m := New(st, Config{Meta: md, Gates: gates, Log: quiet})
	done := make(chan error, 1)
	go func() {
		_, err := m.Append(ctx, tp, Batch{Records: recs(1)}, AckLeader, time.Second)
		done <- err
	}()
	<-entered // the append is in its gate and asks who leads
	if gates.of(shard).TryLock() {
		t.Fatal("a change of leadership could take the gate while an append was in flight")
	}
	close(block)
	if err := <-done; err != nil {
		t.Fatal(err)
	}

	// An append that comes while a handoff holds the gate finds, once it
	// is let in, that this node no longer leads, and appends nothing.
	release := gates.Change(shard)
	go func() {
		_, err := m.Append(ctx, tp, Batch{Records: recs(1)}, AckLeader, time.Second)
		done <- err
	}()
	md.set(Leader{Leads: false, Epoch: -1, Replicas: 1})
	release()
	if err := <-done; !errors.Is(err, ErrFenced) {
		t.Fatalf("an append after a handoff: %v, want ErrFenced", err)
	}
	if _, high, _ := st.Watermarks(ctx, shard); high != 1 {
		t.Errorf("the log holds %d records, want 1", high)
	}
}

// An append wakes the long polls waiting on its partition, and only those.
func TestAppendWakesLongPolls(t *testing.T) {
	ctx := context.Background()
	st := memory.New(0)
	for _, s := range []string{shard, "u-0"} {
		if err := st.CreateShard(ctx, s); err != nil {
			t.Fatal(err)
		}
	}
	m := New(st, Config{Log: quiet})
	here, there := m.Wait([]string{shard, "u-0"}), m.Wait([]string{"u-0"})
	if _, err := m.Append(ctx, tp, Batch{Records: recs(1)}, AckLeader, time.Second); err != nil {
		t.Fatal(err)
	}
	select {
	case <-here:
	default:
		t.Fatal("the append did not wake the poll waiting on its partition")
	}
	select {
	case <-there:
		t.Fatal("the append woke a poll on another partition")
	default:
	}
	m.Cancel([]string{shard, "u-0"}, here)
	if n := m.Waiting("u-0"); n != 1 {
		t.Errorf("%d polls wait on u-0, want 1", n)
	}
}
