package e2e

import (
	"fmt"
	"slices"
	"testing"
	"time"

	"strata/internal/testsvc"
)

// A cluster of three under a steady idempotent acks=all load grows to
// five: the new nodes take partitions at their rolls while records keep
// arriving, each handoff fencing appends mid-stream, and the history
// holds: every acknowledged record is read back once, at the offset its
// acknowledgement named, none twice, no two at one offset.
func TestFiveNodesGrowUnderLoad(t *testing.T) {
	c := &cluster{t: t, etcd: testsvc.StartEtcd(t), pfx: "/" + testsvc.UniquePrefix(t), nodes: map[int32]*testsvc.Process{},
		sets: []string{"segment.max_bytes=8KiB", "segment.roll_check_interval=5"}}
	for id := int32(1); id <= 3; id++ {
		c.add(id)
	}
	createTopic(t, c.client(1), "grow", 10)
	c.waitHealthy("grow")
	parts := []int32{0, 1, 2, 3, 4, 5, 6, 7, 8, 9}
	h := newHistory()
	stop := c.startLoad(h, "grow", parts, 300, 1, 2)
	defer stop()
	time.Sleep(time.Second)
	c.add(4)
	c.add(5)
	deadline := time.Now().Add(90 * time.Second)
	var leaders []int32
	for {
		leaders = c.leaders(3, "grow", allLed)
		if slices.Contains(leaders, 4) && slices.Contains(leaders, 5) {
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("the new nodes took no partition at its rolls within 90s: leaders %v", leaders)
		}
		time.Sleep(500 * time.Millisecond)
	}
	time.Sleep(2 * time.Second) // the load goes on to the moved partitions
	stop()
	c.readAll(h, 5, "grow")
	n := h.check(t)
	view, err := c.adminView(5)
	if err != nil {
		t.Fatal(err)
	}
	moved := 0
	for _, p := range view.Partitions {
		if p.Topic == "grow" && len(p.Spans) > 1 {
			moved++
		}
	}
	if moved < 2 {
		t.Errorf("%d partitions moved at their rolls; the new nodes lead %v", moved, leaders)
	}
	t.Logf("%d records acknowledged, all read back once; %d partitions moved at rolls; leaders now %v", n, moved, fmt.Sprint(leaders))
}
