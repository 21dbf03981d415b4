package cluster

import (
	"context"
	"errors"
	"sync"
	"testing"
	"time"

	"strata/metadata"
)

// CreatePartitions grows a topic's record in etcd, and the controller
// places the new partitions; the existing ones keep their leader and
// epoch. Two nodes growing the same topic at once do not lose each
// other's write: one wins, the other, reading the winner's count, is
// refused with the count it found (compare-and-swap, never a blind put).
func TestCreatePartitions(t *testing.T) {
	h := newHarness(t)
	m1 := h.join(1)
	m2 := h.join(2)
	eventually(t, m1, 5*time.Second, "no controller", func() bool { return m1.Controller() == 1 })
	eventually(t, m2, 5*time.Second, "node 2 does not see node 1", func() bool { return len(m2.Nodes()) == 2 })
	ctx := context.Background()
	if err := m2.CreateTopic(ctx, "t", 2, 1, nil); err != nil {
		t.Fatal(err)
	}
	eventually(t, m1, 5*time.Second, "t not placed", placed(m1, "t", 2))
	before := leaders(m1, "t")
	inc := m1.TopicRecords()["t"].Incarnation

	for _, c := range []struct {
		topic string
		count int32
		want  error
		has   int32
	}{
		{"t", 2, metadata.ErrInvalidPartitions, 2},
		{"t", 1, metadata.ErrInvalidPartitions, 2},
		{"never", 3, metadata.ErrUnknownTopic, 0},
		{"bad/name", 3, metadata.ErrUnknownTopic, 0},
	} {
		err := m2.CreatePartitions(ctx, c.topic, c.count)
		if !errors.Is(err, c.want) {
			t.Errorf("CreatePartitions(%q, %d): %v, want %v", c.topic, c.count, err, c.want)
		}
		var perr *metadata.InvalidPartitionsError
		if c.has > 0 && (!errors.As(err, &perr) || perr.Has != c.has || perr.Asked != c.count) {
			t.Errorf("CreatePartitions(%q, %d): %v, want a PartitionCountError saying it has %d", c.topic, c.count, err, c.has)
		}
	}

	if err := m2.CreatePartitions(ctx, "t", 5); err != nil {
		t.Fatal(err)
	}
	eventually(t, m1, 5*time.Second, "the new partitions not placed", placed(m1, "t", 5))
	after := leaders(m1, "t")
	for p, le := range before {
		if after[p] != le {
			t.Errorf("t-%d moved when partitions were added: %v -> %v", p, le, after[p])
		}
	}
	for p := int32(2); p < 5; p++ {
		if le, ok := after[p]; !ok || le[1] != 0 {
			t.Errorf("new t-%d: %v, want placed at epoch 0", p, le)
		}
	}
	tp := m1.TopicRecords()["t"]
	if tp.Partitions != 5 || tp.Incarnation != inc || tp.ReplicationFactor != 1 {
		t.Errorf("topic after growing: %+v, want 5 partitions, the same incarnation %d", tp, inc)
	}
	waitLog(t, h.logs, "the partitions created", "cluster: partitions created", "topic=t", "from=2", "to=5")

	// Two at once, to different counts: both succeed in turn or one is
	// refused, and the record ends at the larger count.
	var wg sync.WaitGroup
	errs := make([]error, 2)
	for i, m := range []*Member{m1, m2} {
		wg.Add(1)
		go func() {
			defer wg.Done()
			errs[i] = m.CreatePartitions(ctx, "t", 7+int32(i))
		}()
	}
	wg.Wait()
	for i, err := range errs {
		if err != nil && !errors.Is(err, metadata.ErrInvalidPartitions) {
			t.Errorf("concurrent CreatePartitions %d: %v", i, err)
		}
	}
	eventually(t, m1, 5*time.Second, "t not at 8 partitions", func() bool {
		return m1.TopicRecords()["t"].Partitions == 8 && placed(m1, "t", 8)()
	})
	if errs[1] != nil {
		t.Errorf("growing to 8 (the larger count) failed: %v", errs[1])
	}
}
