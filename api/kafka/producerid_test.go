package kafka

import (
	"context"
	"net"
	"sync"
	"testing"
	"time"

	"github.com/twmb/franz-go/pkg/kgo"
	"github.com/twmb/franz-go/pkg/kmsg"

	"strata/engine/segment"
	"strata/metadata"
)

// fakePIDs hands out the test clusters' producer ids (twoNodes, epochNode,
// movedLeader), as metadata.Single does without a catalog.
var fakePIDs = metadata.NewProducerIDs(&metadata.MemoryProducerIDBlocks{}, 0)

// Two nodes that reserve producer id blocks from one place (a cluster's
// etcd key; here one in-memory reservation point) never answer
// InitProducerId with one id twice, asked thousands of times concurrently.
// Before, each server counted from its own start time in microseconds: two
// started a few milliseconds apart collided once the first had handed out
// that many ids (an outside tester's pidclash: the second producer's
// acknowledged batch was dropped as the first's duplicate).
func TestInitProducerIDUniqueAcrossNodes(t *testing.T) {
	blocks := &metadata.MemoryProducerIDBlocks{}
	type node struct {
		e      *segment.Engine
		ln     net.Listener
		single *metadata.Single
	}
	var nodes []node
	for range 2 {
		e, err := segment.Open(segment.Config{Dir: t.TempDir(), Logger: quiet})
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { e.Close() })
		ln, err := net.Listen("tcp", "127.0.0.1:0")
		if err != nil {
			t.Fatal(err)
		}
		self, _ := metadata.BrokerAt(0, ln.Addr().String())
		single := metadata.NewSingle(e, nil, func() metadata.Broker { return self })
		single.SetProducerIDBlocks(blocks)
		nodes = append(nodes, node{e, ln, single})
	}
	// The servers start microseconds apart, as two nodes of a cluster may.
	var addrs []string
	for _, n := range nodes {
		srv := New(n.e, Config{Logger: quiet, Cluster: n.single})
		go srv.Serve(n.ln)
		t.Cleanup(func() {
			ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
			defer cancel()
			srv.Shutdown(ctx)
		})
		addrs = append(addrs, n.ln.Addr().String())
	}
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	const clients, each = 4, 2500
	var mu sync.Mutex
	got := map[int64]string{}
	var wg sync.WaitGroup
	for _, addr := range addrs {
		for range clients {
			c := client(t, addr, kgo.MaxConcurrentFetches(1))
			wg.Go(func() {
				for range each {
					resp, err := kmsg.NewPtrInitProducerIDRequest().RequestWith(ctx, c)
					if err != nil {
						t.Error(err)
						return
					}
					if resp.ErrorCode != 0 {
						t.Errorf("InitProducerId from %s: error %d", addr, resp.ErrorCode)
						return
					}
					mu.Lock()
					if prev, dup := got[resp.ProducerID]; dup {
						t.Errorf("producer id %d from %s and again from %s", resp.ProducerID, prev, addr)
					}
					got[resp.ProducerID] = addr
					mu.Unlock()
				}
			})
		}
	}
	wg.Wait()
	if t.Failed() {
		return
	}
	if want := len(addrs) * clients * each; len(got) != want {
		t.Fatalf("%d distinct ids, want %d", len(got), want)
	}
}
