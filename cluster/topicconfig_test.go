package cluster

import (
	"context"
	"errors"
	"maps"
	"sync"
	"testing"
	"time"

	"strata/metadata"
)

// A topic's configs live in its etcd record: given at creation on one node,
// seen by another through its view; two nodes altering them at once both
// land (each a compare-and-swap, retried on the other's write), and a
// refusal from the change leaves the record as it was.
func TestTopicConfigsInEtcd(t *testing.T) {
	h := newHarness(t)
	m1, m2 := h.join(1), h.join(2)
	eventually(t, m2, 5*time.Second, "node 2 does not see node 1", func() bool { return len(m2.Nodes()) == 2 })
	ctx := context.Background()
	if err := m2.CreateTopic(ctx, "orders", 2, 1, map[string]string{"retention.ms": "3600000"}); err != nil {
		t.Fatal(err)
	}
	eventually(t, m1, 5*time.Second, "node 1 does not see the configs", func() bool {
		tp, ok := m1.Topic("orders")
		return ok && tp.Configs["retention.ms"] == "3600000"
	})

	var wg sync.WaitGroup
	for i, m := range []*Member{m1, m2} {
		key := []string{"segment.ms", "max.message.bytes"}[i]
		wg.Add(1)
		go func() {
			defer wg.Done()
			for range 5 {
				if err := m.AlterTopicConfigs(ctx, "orders", func(c map[string]string) (map[string]string, error) {
					next := maps.Clone(c)
					if next == nil {
						next = map[string]string{}
					}
					next[key] += "1"
					return next, nil
				}); err != nil {
					t.Error(err)
				}
			}
		}()
	}
	wg.Wait()
	want := map[string]string{"retention.ms": "3600000", "segment.ms": "11111", "max.message.bytes": "11111"}
	for _, m := range []*Member{m1, m2} {
		eventually(t, m, 5*time.Second, "configs not converged", func() bool {
			tp, _ := m.Topic("orders")
			return maps.Equal(tp.Configs, want)
		})
	}

	refused := errors.New("refused")
	if err := m1.AlterTopicConfigs(ctx, "orders", func(map[string]string) (map[string]string, error) { return nil, refused }); !errors.Is(err, refused) {
		t.Fatalf("a refused change: %v", err)
	}
	if err := m1.AlterTopicConfigs(ctx, "nope", func(c map[string]string) (map[string]string, error) { return c, nil }); !errors.Is(err, metadata.ErrUnknownTopic) {
		t.Fatalf("altering a topic that does not exist: %v, want metadata.ErrUnknownTopic", err)
	}
	if tp, _ := m2.Topic("orders"); !maps.Equal(tp.Configs, want) || tp.Partitions != 2 {
		t.Fatalf("after a refused change: %+v", tp)
	}
}
