package e2e

import (
	"context"
	"fmt"
	"slices"
	"syscall"
	"testing"
	"time"

	"github.com/twmb/franz-go/pkg/kgo"
)

// A follower whose uncommitted tail spans segment rolls (the leader rolls
// by size, whatever is committed) cannot cut that tail when a shorter log
// wins: the engine cuts only the active segment. It copies the new
// leader's log again instead, and is back in the ISR with the same
// records.
func TestFollowerTailAcrossRolls(t *testing.T) {
	c := newClusterWith(t, 2, "cluster.replica_lag_time_max=30s", "segment.max_bytes=16KiB", "segment.roll_check_interval=1")
	// Node 3 copies slowly, so it stays in the ISR (within the lag time)
	// while holding much less than node 2: the high watermark waits for it.
	c.sets = append(c.sets, "cluster.follower_throttled_rate=16KiB")
	c.add(3)
	createReplicated(t, c, "tail", 1, 3, nil)
	c.waitISR(1, "tail", 3)
	leaders, _ := c.isrs(1, "tail")
	if leaders[0] != 1 {
		t.Fatalf("partition tail-0 is led by node %d; the test needs node 1 (fewest partitions, lowest id) to lead", leaders[0])
	}
	cl := c.client(1, kgo.RequiredAcks(kgo.LeaderAck()), kgo.DisableIdempotentWrite())
	value := make([]byte, 1000)
	// 4 MB in 400 appends: two hundred 16 KiB segments on nodes 1 and 2 (a
	// segment rolls before an append, when it is full); node 3 gets the
	// first two MiB at once (a fetch, then its throttle waits), then 16 KiB
	// a second.
	for i := range 4000 {
		copy(value, fmt.Sprintf("tail-%06d", i))
		cl.Produce(context.Background(), &kgo.Record{Topic: "tail", Value: slices.Clone(value)}, nil)
		if i%10 == 9 {
			if err := cl.Flush(context.Background()); err != nil {
				t.Fatal(err)
			}
		}
	}
	time.Sleep(time.Second) // node 2 copies it all; node 3 a little
	if n := len(c.sealedHere(2, "tail")); n < 60 {
		t.Fatalf("node 2 sealed %d segments; want dozens, many past what node 3 holds", n)
	}
	// The leader dies and node 2 is paused past its lease: node 3, the
	// only live member of the ISR, leads with its short log.
	c.nodes[2].Signal(syscall.SIGSTOP)
	c.nodes[1].Kill()
	c.waitLeader("tail", 3, 1)
	c.nodes[2].Signal(syscall.SIGCONT)
	// Node 2 follows node 3: its log must come to be node 3's.
	deadline := time.Now().Add(60 * time.Second)
	for {
		_, isr := c.isrs(3, "tail")
		if slices.Contains(isr[0], 2) {
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("node 2 is not back in the ISR of tail-0 (%v) a minute after node 3 took over", isr[0])
		}
		time.Sleep(200 * time.Millisecond)
	}
	h := newHistory()
	c.sameCopies(h, "tail", []int32{2, 3})
}
