package partition

import (
	"context"
	"testing"
	"time"

	"strata/engine/memory"
	"strata/engine/segment"
	"strata/engine/store"
)

// The tester's tailretry: producer P's batch is stored, another producer
// writes 25,000 records after it, the leader changes (ForgetProducers) or
// the node restarts (the engine reopened), and P's retry of its batch is
// answered with the offset it got, not stored a second time. The state was
// rebuilt from the newest 20,000 records only: P was unknown, and its
// retry was stored again at offset 25,010.
func TestRetryAfterManyOtherRecords(t *testing.T) {
	const others = 25_000
	for _, tc := range []struct {
		name string
		// open gives the store; again is the same log after a failover
		// or a restart, and a Manager over it.
		run func(t *testing.T, fill func(store.Store, *Manager)) (*Manager, store.Store)
	}{
		{"a failover (ForgetProducers)", func(t *testing.T, fill func(store.Store, *Manager)) (*Manager, store.Store) {
			st := memory.New(0)
			m := New(st, Config{Log: quiet})
			fill(st, m)
			m.ForgetProducers(shard)
			return m, st
		}},
		{"a restart (the engine reopened)", func(t *testing.T, fill func(store.Store, *Manager)) (*Manager, store.Store) {
			dir := t.TempDir()
			e, err := segment.Open(segment.Config{Dir: dir, Logger: quiet})
			if err != nil {
				t.Fatal(err)
			}
			fill(e, New(e, Config{Log: quiet}))
			if err := e.Close(); err != nil {
				t.Fatal(err)
			}
			if e, err = segment.Open(segment.Config{Dir: dir, Logger: quiet}); err != nil {
				t.Fatal(err)
			}
			t.Cleanup(func() { e.Close() })
			return New(e, Config{Log: quiet}), e
		}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			ctx := context.Background()
			const p, other = 7, 9
			m, st := tc.run(t, func(st store.Store, m *Manager) {
				if err := st.CreateShard(ctx, shard); err != nil {
					t.Fatal(err)
				}
				if base, err := m.Append(ctx, tp, idem(p, 0, 0, 10), AckLeader, time.Second); base != 0 || err != nil {
					t.Fatalf("P's batch: base %d, err %v", base, err)
				}
				for seq := int32(0); seq < others; seq += 1000 {
					if _, err := m.Append(ctx, tp, idem(other, 0, seq, 1000), AckLeader, time.Second); err != nil {
						t.Fatal(err)
					}
				}
			})
			if base, err := m.Append(ctx, tp, idem(p, 0, 0, 10), AckLeader, time.Second); base != 0 || err != nil {
				t.Fatalf("P's retry: base %d, err %v; want its original offset 0", base, err)
			}
			if _, high, err := st.Watermarks(ctx, shard); err != nil || high != 10+others {
				t.Fatalf("the log ends at %d (%v), want %d: the retry was stored again", high, err, 10+others)
			}
			// The producers' next batches go on from where they were.
			if base, err := m.Append(ctx, tp, idem(p, 0, 10, 1), AckLeader, time.Second); base != 10+others || err != nil {
				t.Fatalf("P's next batch: base %d, err %v", base, err)
			}
		})
	}
}
