package kafka

import (
	"context"
	"net"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/twmb/franz-go/pkg/kerr"
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

// A transactional producer is refused where it starts, with a message:
// FindCoordinator for a transactional id and InitProducerId naming one
// answer INVALID_REQUEST (not retriable), so the Java client's
// initTransactions fails at once saying why, not at its first send.
func TestTransactionalProducersAreRefusedAtTheStart(t *testing.T) {
	addr, _ := startServer(t, Config{AutoCreateTopics: true})
	c := client(t, addr)
	ctx := context.Background()
	fc := kmsg.NewPtrFindCoordinatorRequest()
	fc.Version, fc.CoordinatorType, fc.CoordinatorKeys = 4, 1, []string{"my-tx"}
	// Through the broker itself: the client would turn the refusal into
	// its own error, not the answer.
	b := c.SeedBrokers()[0]
	kr, err := b.Request(ctx, fc)
	if err != nil {
		t.Fatal(err)
	}
	fresp := kr.(*kmsg.FindCoordinatorResponse)
	if co := fresp.Coordinators[0]; co.ErrorCode != kerr.InvalidRequest.Code || co.ErrorMessage == nil || !strings.Contains(*co.ErrorMessage, "transactions") {
		t.Errorf("FindCoordinator for a transactional id: error %d, message %v; want INVALID_REQUEST saying transactions are not supported", co.ErrorCode, co.ErrorMessage)
	}
	fc.CoordinatorType, fc.CoordinatorKeys = 0, []string{"a-group"}
	if kr, err = b.Request(ctx, fc); err != nil || kr.(*kmsg.FindCoordinatorResponse).Coordinators[0].ErrorCode != 0 {
		t.Errorf("FindCoordinator for a group: %v %+v; want this broker", err, kr)
	}
	ip := kmsg.NewPtrInitProducerIDRequest()
	txid := "my-tx"
	ip.TransactionalID, ip.TransactionTimeoutMillis = &txid, 60_000
	kr, err = b.Request(ctx, ip)
	if err != nil {
		t.Fatal(err)
	}
	iresp := kr.(*kmsg.InitProducerIDResponse)
	if iresp.ErrorCode != kerr.InvalidRequest.Code || iresp.ProducerID != -1 {
		t.Errorf("InitProducerId with a transactional id: error %d, id %d; want INVALID_REQUEST, -1", iresp.ErrorCode, iresp.ProducerID)
	}
	ip.TransactionalID = nil
	if iresp, err = ip.RequestWith(ctx, c); err != nil || iresp.ErrorCode != 0 || iresp.ProducerID < 0 {
		t.Errorf("InitProducerId without one: %v, error %d, id %d; want an id", err, iresp.ErrorCode, iresp.ProducerID)
	}
}
