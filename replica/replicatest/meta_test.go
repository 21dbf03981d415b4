package replicatest

import (
	"context"
	"errors"
	"slices"
	"testing"
)

// The fake's ISR writes are etcd's compare-and-swap: a write at a stale
// revision, or by a node that does not lead at the epoch it names, is
// refused and changes nothing.
func TestMetaChangeISRCompareAndSwap(t *testing.T) {
	m := NewMeta()
	m.Create(Partition{Topic: "t", Replicas: []int32{1, 2, 3}, Leader: 1, MinISR: 2})
	m.SetLive(1, true)
	ctx := context.Background()
	rev, err := m.For(1).ChangeISR(ctx, "t", 0, 0, []int32{1, 2}, 1)
	if err != nil || rev != 2 {
		t.Fatalf("ChangeISR at the current rev: rev %d, %v; want rev 2", rev, err)
	}
	if _, err := m.For(1).ChangeISR(ctx, "t", 0, 0, []int32{1}, 1); err == nil {
		t.Fatal("ChangeISR at a stale rev was taken")
	}
	if _, err := m.For(2).ChangeISR(ctx, "t", 0, 0, []int32{2}, 2); !errors.Is(err, errNotLeader) {
		t.Fatalf("ChangeISR by a follower: %v, want errNotLeader", err)
	}
	if err := m.Elect("t-0", 2, nil); err != nil {
		t.Fatal(err)
	}
	m.SetLive(2, true)
	if _, err := m.For(1).ChangeISR(ctx, "t", 0, 0, []int32{1}, 3); !errors.Is(err, errNotLeader) {
		t.Fatalf("ChangeISR by the deposed leader at its old epoch: %v, want errNotLeader", err)
	}
	p, _ := m.Get("t-0")
	if !slices.Equal(p.ISR, []int32{1, 2}) || p.Leader != 2 || p.Epoch != 1 || p.Rev != 3 {
		t.Fatalf("partition after the refusals: %+v; want ISR [1 2], leader 2 at epoch 1, rev 3", p)
	}
}
