package memory

import (
	"context"
	"testing"

	"strata/engine/store"
	"strata/engine/store/storetest"
)

func TestContract(t *testing.T) {
	storetest.Run(t, func(t *testing.T) store.Store { return New(0) }, storetest.Options{})
}

func TestEvictsOldestPastTheBound(t *testing.T) {
	s := New(100)
	ctx := context.Background()
	s.CreateShard(ctx, "m-0")
	for i := 0; i < 5; i++ {
		s.Append(ctx, "m-0", storetest.Records(30, i))
	}
	low, high, _ := s.Watermarks(ctx, "m-0")
	if low != 50 || high != 150 {
		t.Fatalf("watermarks %d, %d after 150 records bounded to 100; want 50, 150", low, high)
	}
	if got := storetest.ReadAll(t, s, "m-0", 50); len(got) != 100 || got[0].Offset != 50 {
		t.Fatalf("read %d records from 50", len(got))
	}
	byKey, _ := s.ReadByKey(ctx, "m-0", []byte("key-1"), 0, store.Budget{})
	for _, r := range byKey {
		if r.Offset < 50 {
			t.Fatalf("ReadByKey returned evicted offset %d", r.Offset)
		}
	}
}

// Eviction is retention: it trims the leader-epoch history from the start,
// keeping the epoch that covers the new low watermark.
func TestEvictionTrimsLeaderEpochs(t *testing.T) {
	s := New(10)
	ctx := context.Background()
	s.CreateShard(ctx, "m-0")
	for i, epoch := range []int32{1, 2, 3} {
		if err := s.AssignEpoch(ctx, "m-0", epoch, uint64(i*6)); err != nil {
			t.Fatal(err)
		}
		s.Append(ctx, "m-0", storetest.Records(6, i))
	}
	got, err := s.LeaderEpochs(ctx, "m-0")
	want := []store.EpochEntry{{Epoch: 2, Start: 8}, {Epoch: 3, Start: 12}}
	if err != nil || len(got) != 2 || got[0] != want[0] || got[1] != want[1] {
		t.Fatalf("after evicting below 8: history %v, %v; want %v", got, err, want)
	}
}
