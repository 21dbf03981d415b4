package cluster

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"sync"
	"testing"
	"time"

	clientv3 "go.etcd.io/etcd/client/v3"
)

// threeNodes joins nodes 1, 2 and 3 and places topic with replication
// factor 3; it returns the members by id.
func threeNodes(t *testing.T, h *harness, topic string, partitions int32) map[int32]*Member {
	t.Helper()
	ms := map[int32]*Member{1: h.join(1)}
	eventually(t, ms[1], 5*time.Second, "node 1 is not controller", func() bool { return ms[1].Controller() == 1 })
	ms[2], ms[3] = h.join(2), h.join(3)
	eventually(t, ms[1], 5*time.Second, "node 1 does not see nodes 2 and 3", func() bool { return len(ms[1].Nodes()) == 3 })
	if err := ms[1].CreateTopic(context.Background(), topic, partitions, 3, nil); err != nil {
		t.Fatal(err)
	}
	for _, m := range ms {
		eventually(t, m, 5*time.Second, topic+" not placed", placed(m, topic, int(partitions)))
	}
	return ms
}

// sameRev waits until every member's view holds partition 0 of topic at rev.
func sameRev(t *testing.T, ms map[int32]*Member, topic string, rev int64) {
	t.Helper()
	for id, m := range ms {
		eventually(t, m, 5*time.Second, fmt.Sprintf("node %d's view is not at revision %d", id, rev), func() bool {
			_, r, _ := m.PartitionRev(topic, 0)
			return r == rev
		})
	}
}

// The leader shrinks and expands its ISR by compare-and-swap on the
// partition epoch; a stale epoch, a follower, a wrong leader epoch, a bad
// ISR and a lost lease are each refused with an error the caller can tell
// apart, and none of them changes the record.
func TestChangeISR(t *testing.T) {
	h := newHarness(t)
	ms := threeNodes(t, h, "r", 1)
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	rec, rev, ok := ms[1].PartitionRev("r", 0)
	if !ok || rev == 0 || len(rec.Replicas) != 3 || !slices.Equal(rec.ISR, rec.Replicas) {
		t.Fatalf("r-0 placed as %+v at revision %d, want 3 replicas, all in sync", rec, rev)
	}
	got, err := h.cli.Get(ctx, keys{h.prefix}.partition("r", 0))
	if err != nil || got.Kvs[0].ModRevision != rev {
		t.Fatalf("PartitionRev says revision %d, etcd's record is at %v (%v)", rev, got.Kvs[0].ModRevision, err)
	}
	leader := ms[rec.Leader]
	follower := rec.Replicas[1]

	// Shrink: the leader and one follower.
	shrunk := []int32{rec.Leader, rec.Replicas[2]}
	rev2, err := leader.ChangeISR(ctx, "r", 0, rec.Epoch, shrunk, rev)
	if err != nil || rev2 <= rev {
		t.Fatalf("shrink to %v: revision %d, %v", shrunk, rev2, err)
	}
	if now, r, _ := leader.PartitionRev("r", 0); r != rev2 || !slices.Equal(now.ISR, shrunk) || now.Epoch != rec.Epoch || now.Leader != rec.Leader {
		t.Fatalf("after the shrink the leader's view holds %+v at %d, want isr %v at %d, same leader and epoch", now, r, shrunk, rev2)
	}
	sameRev(t, ms, "r", rev2)
	if h.metric(rec.Leader, "strata_cluster_isr_writes_total") != 1 {
		t.Error("strata_cluster_isr_writes_total{result=done} is not 1")
	}
	waitLog(t, h.logs, "the ISR change", "INFO", "ISR changed", "partition=r-0", fmt.Sprintf("isr=%v", shrunk))

	// Refusals, each leaving the record at rev2.
	for _, tc := range []struct {
		name  string
		m     *Member
		epoch int32
		isr   []int32
		rev   int64
		want  error
	}{
		{"stale partition epoch", leader, rec.Epoch, rec.Replicas, rev, ErrISRConflict},
		{"a follower", ms[follower], rec.Epoch, []int32{follower, rec.Leader}, rev2, ErrNotLeader},
		{"an old leader epoch", leader, rec.Epoch - 1, rec.Replicas, rev2, ErrNotLeader},
		{"a newer leader epoch", leader, rec.Epoch + 1, rec.Replicas, rev2, ErrNotLeader},
		{"the leader left out", leader, rec.Epoch, []int32{follower}, rev2, ErrInvalidISR},
		{"a node outside the replicas", leader, rec.Epoch, []int32{rec.Leader, 9}, rev2, ErrInvalidISR},
		{"a node twice", leader, rec.Epoch, []int32{rec.Leader, follower, follower}, rev2, ErrInvalidISR},
	} {
		cur, err := tc.m.ChangeISR(ctx, "r", 0, tc.epoch, tc.isr, tc.rev)
		if !errors.Is(err, tc.want) {
			t.Errorf("%s: %v, want %v", tc.name, err, tc.want)
		}
		if tc.want == ErrISRConflict && cur != rev2 {
			t.Errorf("%s: the refusal names revision %d, want the current %d", tc.name, cur, rev2)
		}
		if now, r, _ := leader.PartitionRev("r", 0); r != rev2 || !slices.Equal(now.ISR, shrunk) {
			t.Fatalf("%s changed the record: %+v at %d", tc.name, now, r)
		}
	}

	// Expand back to every replica.
	rev3, err := leader.ChangeISR(ctx, "r", 0, rec.Epoch, rec.Replicas, rev2)
	if err != nil || rev3 <= rev2 {
		t.Fatalf("expand to %v: revision %d, %v", rec.Replicas, rev3, err)
	}
	sameRev(t, ms, "r", rev3)
	if now, _, _ := ms[follower].PartitionRev("r", 0); !slices.Equal(now.ISR, rec.Replicas) {
		t.Fatalf("after the expansion a follower sees isr %v, want %v", now.ISR, rec.Replicas)
	}

	// The leader's lease is revoked (as etcd expires it under a paused
	// node): a write it sends with the lease it still believes it holds is
	// refused, although nobody has written the record since.
	stale := leader.lease()
	if _, err := h.cli.Revoke(ctx, stale); err != nil {
		t.Fatal(err)
	}
	cur, err := leader.changeISR(ctx, stale, "r", 0, rec.Epoch, shrunk, rev3)
	if !errors.Is(err, ErrNotLeader) || !errors.Is(err, ErrNotLive) {
		t.Fatalf("a write under a revoked lease: %v, want ErrNotLeader and ErrNotLive", err)
	}
	if cur < rev3 {
		t.Fatalf("the refusal names revision %d, older than the record's %d", cur, rev3)
	}
	if cur == rev3 {
		// Nobody else wrote first (the controller fails r-0 over once it
		// sees the node gone): the lease, not the revision, refused it.
		t.Logf("refused at revision %d, the record unchanged since the expansion", cur)
	}
	waitLog(t, h.logs, "the refusal", "WARN", "ISR change refused", "lease is lost", "partition=r-0")
}

// The controller fails a partition over while its leader changes the ISR,
// both from the same partition epoch: exactly one of the two writes wins,
// every round, and the record is the winner's.
func TestISRWriteRacesControllerFailover(t *testing.T) {
	h := newHarness(t)
	ms := threeNodes(t, h, "race", 1)
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()
	wins := map[string]int{}
	for round := range 12 {
		got, err := h.cli.Get(ctx, keys{h.prefix}.partition("race", 0))
		if err != nil {
			t.Fatal(err)
		}
		sameRev(t, ms, "race", got.Kvs[0].ModRevision)
		rec, rev, _ := ms[1].PartitionRev("race", 0)
		var ctl *Member
		for _, m := range ms {
			if m.currentTerm().rev != 0 {
				ctl = m
			}
		}
		if ctl == nil {
			t.Fatal("no node holds a controller term")
		}
		ctl.mu.Lock()
		_, rv := ctl.placementStateLocked()
		ctl.mu.Unlock()

		// The controller's write: the next replica leads, epoch + 1.
		prev := rec.clone()
		next := rec.clone()
		i := slices.Index(rec.Replicas, rec.Leader)
		next.Leader, next.Epoch, next.ISR = rec.Replicas[(i+1)%3], rec.Epoch+1, slices.Clone(rec.Replicas)
		failover := Write{Partition: next, Prev: &prev, Why: "race"}
		// The leader's: drop the follower after it.
		isr := []int32{rec.Leader, rec.Replicas[(i+2)%3]}

		var wg sync.WaitGroup
		var ctlErr, isrErr error
		start := make(chan struct{})
		wg.Add(2)
		go func() {
			defer wg.Done()
			<-start
			_, ctlErr = ctl.writePlacement(ctx, ctl.currentTerm(), []Write{failover}, rv)
		}()
		go func() {
			defer wg.Done()
			<-start
			_, isrErr = ms[rec.Leader].ChangeISR(ctx, "race", 0, rec.Epoch, isr, rev)
		}()
		close(start)
		wg.Wait()

		got, err = h.cli.Get(ctx, keys{h.prefix}.partition("race", 0))
		if err != nil {
			t.Fatal(err)
		}
		sameRev(t, ms, "race", got.Kvs[0].ModRevision)
		now, _, _ := ms[1].PartitionRev("race", 0)
		switch {
		case ctlErr == nil && errors.Is(isrErr, ErrISRConflict):
			wins["controller"]++
			if now.Leader != next.Leader || now.Epoch != next.Epoch || !slices.Equal(now.ISR, next.ISR) {
				t.Fatalf("round %d: the controller won, the record is %+v", round, now)
			}
		case isrErr == nil && errors.Is(ctlErr, errConflict):
			wins["leader"]++
			if now.Leader != rec.Leader || now.Epoch != rec.Epoch || !slices.Equal(now.ISR, isr) {
				t.Fatalf("round %d: the leader won, the record is %+v", round, now)
			}
		default:
			t.Fatalf("round %d: controller %v, leader %v: want exactly one to win, the other refused as a conflict", round, ctlErr, isrErr)
		}
		if now.Epoch < rec.Epoch {
			t.Fatalf("round %d: the epoch went back from %d to %d", round, rec.Epoch, now.Epoch)
		}
		if isrErr == nil && len(now.ISR) < 3 {
			// Back to a full ISR for the next round.
			_, rev, _ := ms[1].PartitionRev("race", 0)
			if _, err := ms[now.Leader].ChangeISR(ctx, "race", 0, now.Epoch, now.Replicas, rev); err != nil {
				t.Fatal(err)
			}
		}
	}
	t.Logf("wins over 12 rounds: %v", wins)
}

// A quorum topic's leader dies: the controller writes nothing until a
// majority of the replicas has reported its log, then makes the longest
// log leader at the next epoch, with the reports deleted in the same
// transaction. A report while the leader is live, or from a node whose
// lease is gone, is refused.
func TestQuorumElection(t *testing.T) {
	h := newHarness(t)
	ms := map[int32]*Member{1: h.join(1)}
	eventually(t, ms[1], 5*time.Second, "node 1 is not controller", func() bool { return ms[1].Controller() == 1 })
	ms[2], ms[3], ms[4] = h.join(2), h.join(3), h.join(4)
	eventually(t, ms[1], 5*time.Second, "node 1 does not see 4 nodes", func() bool { return len(ms[1].Nodes()) == 4 })
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	// Three replicas on four nodes: the leader is not node 1, the
	// controller, whose death would only delay the election.
	if err := ms[1].CreateTopic(ctx, "fill", 1, 1, nil); err != nil {
		t.Fatal(err)
	}
	eventually(t, ms[1], 5*time.Second, "fill not placed", placed(ms[1], "fill", 1))
	if err := ms[1].CreateTopic(ctx, "q", 1, 3, map[string]string{"strata.acks.all": "quorum"}); err != nil {
		t.Fatal(err)
	}
	for _, m := range ms {
		eventually(t, m, 5*time.Second, "q not placed", placed(m, "q", 1))
	}
	rec, _, _ := ms[1].PartitionRev("q", 0)
	if rec.Leader == 1 || len(rec.Replicas) != 3 {
		t.Fatalf("q-0 placed as %+v: want 3 replicas, led by a node other than the controller", rec)
	}
	a, b := rec.Replicas[1], rec.Replicas[2]
	if err := ms[a].ReportCandidate(ctx, "q", 0, 0, 100); !errors.Is(err, ErrLeaderLive) {
		t.Fatalf("a report while the leader is live: %v, want ErrLeaderLive", err)
	}

	// The leader dies.
	ms[rec.Leader].Close()
	for _, id := range []int32{a, b} {
		eventually(t, ms[id], 5*time.Second, "the leader is not gone", func() bool { return !slices.Contains(ids(ms[id].Nodes()), rec.Leader) })
	}
	waitLog(t, h.logs, "the controller waiting", "WARN", "cannot place", "q-0", "quorum election waits for 2 of replicas", "0 did []")
	if now, _, _ := ms[1].PartitionRev("q", 0); now.Leader != rec.Leader || now.Epoch != rec.Epoch {
		t.Fatalf("the controller wrote %+v before a majority reported", now)
	}

	if err := ms[a].ReportCandidate(ctx, "q", 0, 0, 100); err != nil {
		t.Fatal(err)
	}
	got, err := h.cli.Get(ctx, keys{h.prefix}.candidate("q", 0, a))
	if err != nil || len(got.Kvs) != 1 || got.Kvs[0].Lease != int64(ms[a].lease()) {
		t.Fatalf("node %d's report is not under its lease: %v %v", a, got, err)
	}
	if want := `{"leader_epoch":0,"epoch":0,"end":100}`; string(got.Kvs[0].Value) != want {
		t.Errorf("the report reads %s, want %s", got.Kvs[0].Value, want)
	}
	waitLog(t, h.logs, "the controller waiting for one more", "WARN", "cannot place", "q-0", fmt.Sprintf("1 did [%d]", a))

	if err := ms[b].ReportCandidate(ctx, "q", 0, 0, 150); err != nil {
		t.Fatal(err)
	}
	eventually(t, ms[a], 5*time.Second, "no new leader elected", func() bool { r, _, _ := ms[a].PartitionRev("q", 0); return r.Leader == b })
	now, _, _ := ms[a].PartitionRev("q", 0)
	if now.Epoch != rec.Epoch+1 || !slices.Equal(now.ISR, []int32{b}) {
		t.Fatalf("after the election: %+v, want node %d at epoch %d with ISR [%d]", now, b, rec.Epoch+1, b)
	}
	if left, err := h.cli.Get(ctx, keys{h.prefix}.partitionCandidates("q", 0), clientv3.WithPrefix(), clientv3.WithCountOnly()); err != nil || left.Count != 0 {
		t.Fatalf("reports left after the election: %v %v", left, err)
	}
	waitLog(t, h.logs, "the election", "INFO", "leader changed", "partition=q-0", fmt.Sprintf("leader=%d", b), "quorum election")

	// Node a's report now: the new leader is live.
	if err := ms[a].ReportCandidate(ctx, "q", 0, 1, 150); !errors.Is(err, ErrLeaderLive) {
		t.Fatalf("a report with the new leader live: %v, want ErrLeaderLive", err)
	}
	// A node whose lease is gone reports nothing, even before it knows.
	ms[b].Close()
	eventually(t, ms[a], 5*time.Second, "the new leader is not gone", func() bool { return !slices.Contains(ids(ms[a].Nodes()), b) })
	lost := ms[a].lease()
	if _, err := h.cli.Revoke(ctx, lost); err != nil {
		t.Fatal(err)
	}
	if err := ms[a].reportCandidate(ctx, lost, "q", 0, 1, 150); !errors.Is(err, ErrNotLive) {
		t.Fatalf("a report under a revoked lease: %v, want ErrNotLive", err)
	}
	if left, err := h.cli.Get(ctx, keys{h.prefix}.partitionCandidates("q", 0), clientv3.WithPrefix(), clientv3.WithCountOnly()); err != nil || left.Count != 0 {
		t.Fatalf("a report under a revoked lease was stored: %v %v", left, err)
	}
}

// A partition's seal records below its log start are deleted; the one of
// the segment that holds the log start stays, and so do those above it.
func TestPruneSeals(t *testing.T) {
	h := newHarness(t)
	ms := threeNodes(t, h, "pruned", 1)
	part, _, _ := ms[1].PartitionRev("pruned", 0)
	leader := ms[part.Leader]
	for _, s := range []SealRecord{{Start: 0, Last: 99}, {Start: 100, Last: 199}, {Start: 200, Last: 299}} {
		s.CRC, s.Replicas = 7, []int32{part.Leader}
		if err := leader.RecordSeal(context.Background(), "pruned", 0, part.Epoch, s); err != nil {
			t.Fatal(err)
		}
	}
	n, err := leader.PruneSeals(context.Background(), "pruned", 0, 150)
	if err != nil || n != 1 {
		t.Fatalf("pruning below 150: %d records deleted, %v; want 1", n, err)
	}
	for start, want := range map[uint64]bool{0: false, 100: true, 200: true} {
		if _, ok, err := leader.Seal(context.Background(), "pruned", 0, start); err != nil || ok != want {
			t.Errorf("the seal at %d: found %v (%v), want %v", start, ok, err, want)
		}
	}
}
