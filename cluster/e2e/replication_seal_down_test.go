package e2e

import (
	"context"
	"testing"
	"time"

	"github.com/twmb/franz-go/pkg/kgo"
)

// A follower's copying is paced by cluster.follower_throttled_rate: one
// that comes back far behind catches up at that pace, not at the disk's,
// and then rejoins the ISR.
func TestFollowerThrottled(t *testing.T) {
	c := newClusterWith(t, 3, "cluster.replica_lag_time_max=2s", "cluster.follower_throttled_rate=512KiB")
	createReplicated(t, c, "slow", 1, 3, nil)
	c.waitISR(1, "slow", 3)
	leaders, _ := c.isrs(1, "slow")
	leader := leaders[0]
	behind := leader%3 + 1
	c.nodes[behind].Kill()
	cl := c.client(leader)
	value := make([]byte, 1024)
	for i := 0; i < 4096; i++ { // 4 MiB
		cl.Produce(context.Background(), &kgo.Record{Topic: "slow", Value: value}, nil)
	}
	if err := cl.Flush(context.Background()); err != nil {
		t.Fatal(err)
	}
	back := time.Now()
	c.nodes[behind].Restart()
	c.waitISR(leader, "slow", 3)
	// 4 MiB at 512 KiB/s, the first MiB at once (the limiter's burst).
	if took := time.Since(back); took < 4*time.Second {
		t.Fatalf("the throttled follower caught up on 4 MiB in %s; at 512 KiB/s it takes about 6s", took)
	}
}
