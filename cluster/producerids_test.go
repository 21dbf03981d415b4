package cluster

import (
	"context"
	"sync"
	"testing"
	"time"

	"strata/metadata"
)

// Producer ids are unique across the cluster: nodes asked concurrently
// never hand out one id twice, whether they reserve a block per id (every
// reservation a compare-and-swap race on the one key) or Kafka's 1000, and
// a node that restarts hands out ids above every id before it. With each
// node counting from its own start time (before this), two nodes started
// microseconds apart collided once the first had handed out that many.
func TestProducerIDsUniqueAcrossNodes(t *testing.T) {
	for _, tc := range []struct {
		name            string
		block           int64
		workers, perJob int
	}{
		{"a block per id", 1, 4, 100},
		{"Kafka's blocks", metadata.ProducerIDBlockSize, 4, 2500},
	} {
		t.Run(tc.name, func(t *testing.T) {
			h := newHarness(t)
			ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
			defer cancel()
			blocks := producerIDBlocks{cli: h.cli, key: keys{h.prefix}.producerIDs(), timeout: 10 * time.Second}
			node := func() *metadata.ProducerIDs { return metadata.NewProducerIDs(blocks, tc.block) }
			got := map[int64]int{} // id -> the node that handed it out
			var mu sync.Mutex
			var wg sync.WaitGroup
			for n, ids := range []*metadata.ProducerIDs{node(), node()} {
				for range tc.workers {
					wg.Go(func() {
						for range tc.perJob {
							id, err := ids.Next(ctx)
							if err != nil {
								t.Error(err)
								return
							}
							mu.Lock()
							if prev, dup := got[id]; dup {
								t.Errorf("id %d handed out by node %d and again by node %d", id, prev, n)
							}
							got[id] = n
							mu.Unlock()
						}
					})
				}
			}
			wg.Wait()
			if want := 2 * tc.workers * tc.perJob; len(got) != want {
				t.Fatalf("%d distinct ids, want %d", len(got), want)
			}
			var highest int64
			for id := range got {
				highest = max(highest, id)
			}
			// A restarted node is a new ProducerIDs on the same key.
			id, err := node().Next(ctx)
			if err != nil {
				t.Fatal(err)
			}
			if id <= highest {
				t.Fatalf("a restarted node handed out %d, not above %d handed out before", id, highest)
			}
		})
	}
}

// Members hand out their ids from the cluster's key: two joined nodes, and
// one of them joined again, never answer one id twice.
func TestMembersProducerIDs(t *testing.T) {
	h := newHarness(t)
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	a, b := h.join(1), h.join(2)
	seen := map[int64]bool{}
	take := func(m *Member, n int) {
		t.Helper()
		for range n {
			id, err := m.ProducerID(ctx)
			if err != nil {
				t.Fatal(err)
			}
			if seen[id] {
				t.Fatalf("node %d handed out %d again", m.Self(), id)
			}
			seen[id] = true
		}
	}
	take(a, 10)
	take(b, 10)
	take(a, 10)
	a.Close()
	take(h.join(1), 10)
}
