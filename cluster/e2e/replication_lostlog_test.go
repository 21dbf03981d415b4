package e2e

import (
	"io/fs"
	"os"
	"path/filepath"
	"slices"
	"testing"
	"time"
)

// A power cut with a replaced disk: every node is killed at once, and one
// comes back first on an empty data folder, under its old id, while etcd
// still names it in every ISR. It must lead nothing it lost (KIP-966: a
// replica that lost its log may not lead until it has caught up): the
// partitions wait leaderless, without it in their ISRs, for a node that
// kept its log, and no node that kept its log cuts it to follow the empty
// one. Every acknowledged record is then readable, from every replica.
func TestPowerCutWithReplacedDisk(t *testing.T) {
	c := newClusterWith(t, 3, "cluster.replica_lag_time_max=1s", "segment.max_bytes=64KiB")
	replicatedTopic(t, c, "cut", 3)
	h := newHistory()
	for _, vs := range c.produce(1, "cut", []int32{0, 1, 2}, 2000, "before") {
		for _, v := range vs {
			h.ack(v, -1, -1)
		}
	}
	leaders, _ := c.isrs(1, "cut")
	const wiped = int32(1)
	t.Logf("leaders %v; every node is killed; node %d comes back first on an empty folder", leaders, wiped)
	for id := int32(1); id <= 3; id++ {
		c.nodes[id].Kill()
	}
	dir := c.nodes[wiped].Dir()
	if err := os.RemoveAll(dir); err != nil {
		t.Fatal(err)
	}
	if err := os.MkdirAll(dir, 0o755); err != nil {
		t.Fatal(err)
	}
	c.restart(wiped)
	// Once the dead nodes' leases are gone, node wiped is the only live
	// node: the controller (itself) decides every partition's leader from
	// what etcd holds. It must lead none and be in no ISR; past the wait the
	// test goes on, as what the others do next is what loses the records.
	c.waitAlone(wiped, "cut", "on an empty folder")
	for id := int32(2); id <= 3; id++ {
		c.restart(id)
	}
	c.waitISR(2, "cut", 3)
	for _, vs := range c.produce(2, "cut", []int32{0, 1, 2}, 50, "after") {
		for _, v := range vs {
			h.ack(v, -1, -1)
		}
	}
	c.sameCopies(h, "cut", []int32{1, 2, 3})
	checkByValue(t, h)
}

// A node restored from an old copy of its own folder (same identity,
// shorter log) after a power cut comes back first and leads again: etcd
// cannot tell its log is short. The nodes that hold more refuse to cut
// their logs below their high watermarks to follow it (only an unclean
// election may ask that): they stay out of its ISR, count the refusal,
// and keep every acknowledged record.
func TestFollowerKeepsWhatItCommitted(t *testing.T) {
	c := newClusterWith(t, 3, "cluster.replica_lag_time_max=1s")
	replicatedTopic(t, c, "old", 1)
	c.produce(1, "old", []int32{0}, 300, "early")
	const stale = int32(1)
	c.nodes[stale].Kill()
	old := t.TempDir() + "/old"
	copyDir(t, c.nodes[stale].Dir(), old)
	c.restart(stale)
	c.waitISR(2, "old", 3)
	h := newHistory()
	for _, v := range c.produce(2, "old", []int32{0}, 700, "late")[0] {
		h.ack(v, -1, -1)
	}
	c.waitISR(2, "old", 3)
	// A follower learns the high watermark with its next fetch: once each
	// has, every acknowledged record is below every replica's.
	for id := int32(1); id <= 3; id++ {
		deadline := time.Now().Add(30 * time.Second)
		for {
			_, hw, err := c.copyOf(id, id%3+1, "old", 0)
			if err == nil && hw == 1000 {
				break
			}
			if time.Now().After(deadline) {
				t.Fatalf("node %d's high watermark: %d, %v; want 1000", id, hw, err)
			}
			time.Sleep(100 * time.Millisecond)
		}
	}
	for id := int32(1); id <= 3; id++ {
		c.nodes[id].Kill()
	}
	if err := os.RemoveAll(c.nodes[stale].Dir()); err != nil {
		t.Fatal(err)
	}
	copyDir(t, old, c.nodes[stale].Dir())
	c.restart(stale)
	deadline := time.Now().Add(30 * time.Second)
	for {
		if ls, _ := c.isrs(stale, "old"); ls[0] == stale {
			break
		}
		if time.Now().After(deadline) {
			ls, isr := c.isrs(stale, "old")
			t.Fatalf("node %d, restored from an old copy, does not lead: leaders %v, ISRs %v", stale, ls, isr)
		}
		time.Sleep(100 * time.Millisecond)
	}
	for id := int32(2); id <= 3; id++ {
		c.restart(id)
	}
	for id := int32(2); id <= 3; id++ {
		deadline := time.Now().Add(30 * time.Second)
		for c.metric(id, "strata_replica_refused_truncations_total") == 0 {
			if time.Now().After(deadline) {
				t.Fatalf("node %d did not refuse to cut its log to follow node %d's shorter one", id, stale)
			}
			time.Sleep(100 * time.Millisecond)
		}
		recs, hw, err := c.copyOf(id, stale, "old", 0)
		if err != nil {
			t.Fatal(err)
		}
		kept := map[string]bool{}
		for _, r := range recs {
			kept[r.value] = true
		}
		lost := 0
		for v := range h.acked {
			if !kept[v] {
				lost++
			}
		}
		if lost > 0 {
			t.Errorf("node %d holds %d records up to its high watermark %d: %d of %d acknowledged records lost", id, len(recs), hw, lost, len(h.acked))
		}
	}
	if _, isr := c.isrs(stale, "old"); !slices.Equal(isr[0], []int32{stale}) {
		t.Errorf("ISR of old-0 led by node %d with its short log: %v, want only itself", stale, isr[0])
	}
}

// copyDir copies the files under from to to, as a backup would.
func copyDir(t *testing.T, from, to string) {
	t.Helper()
	err := filepath.WalkDir(from, func(path string, d fs.DirEntry, err error) error {
		if err != nil {
			return err
		}
		rel, _ := filepath.Rel(from, path)
		dst := filepath.Join(to, rel)
		if d.IsDir() {
			return os.MkdirAll(dst, 0o755)
		}
		b, err := os.ReadFile(path)
		if err != nil {
			return err
		}
		return os.WriteFile(dst, b, 0o644)
	})
	if err != nil {
		t.Fatal(err)
	}
}
