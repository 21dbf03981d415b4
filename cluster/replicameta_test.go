package cluster

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"testing"
	"time"

	clientv3 "go.etcd.io/etcd/client/v3"
	"go.uber.org/zap"

	"strata/engine/memory"
	"strata/engine/record"
	"strata/internal/testsvc"
	"strata/metadata"
	"strata/replica"
)

// A replicated topic deleted and made again: until this node's shard of
// the new topic is made (KeepShards deletes the old topic's shard
// of the same name and makes the new one), replication is not assigned the
// new partition, so it neither leads nor follows it on the old topic's
// log (found by the cluster harness, seed 28: a node led the new
// partition on the old shard, took its log end 56 for the new log's, and
// the followers never joined the ISR).
func TestReplicationWaitsForTheNewTopicsShard(t *testing.T) {
	cli, err := clientv3.New(clientv3.Config{Endpoints: []string{testsvc.StartEtcd(t)}, DialTimeout: 5 * time.Second, Logger: zap.NewNop()})
	if err != nil {
		t.Fatal(err)
	}
	defer cli.Close()
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	prefix := "/" + testsvc.UniquePrefix(t)
	var ms []*Member
	for id := int32(1); id <= 2; id++ {
		m, err := Join(ctx, Config{Client: cli, Prefix: prefix, SessionTTL: 2 * time.Second, Logger: slog.New(slog.DiscardHandler),
			Self: Node{ID: id, KafkaAddr: fmt.Sprintf("127.0.0.1:%d", 19190+id), AdminAddr: fmt.Sprintf("127.0.0.1:%d", 19740+id)}})
		if err != nil {
			t.Fatal(err)
		}
		defer m.Close()
		ms = append(ms, m)
	}
	m := ms[0]
	rm := m.ReplicaMeta()
	st := memory.New(0)
	// until waits, on the view's changes, for cond.
	until := func(what string, cond func() bool) {
		t.Helper()
		for !cond() {
			select {
			case <-ctx.Done():
				t.Fatalf("%s: not within a minute", what)
			case <-m.Changed():
			case <-time.After(50 * time.Millisecond):
			}
		}
	}
	assigned := func() (replica.Assignment, bool) {
		for _, a := range rm.Assignments() {
			if a.Topic == "t" && a.Partition == 0 {
				return a, true
			}
		}
		return replica.Assignment{}, false
	}
	// keepShards runs cluster.KeepShards until the shard of incarnation inc
	// is made and the partition assigned.
	keepShards := func(inc int64) {
		t.Helper()
		kctx, stop := context.WithCancel(ctx)
		done := make(chan struct{})
		go func() { defer close(done); m.KeepShards(kctx, st, slog.New(slog.DiscardHandler)) }()
		until("the partition assigned once its shard is made", func() bool {
			a, ok := assigned()
			_, err := st.LogEnd(ctx, "t-0")
			return ok && a.Incarnation == inc && err == nil
		})
		stop()
		<-done
	}
	create := func() int64 {
		t.Helper()
		for {
			err := m.CreateTopic(ctx, "t", 1, 2, nil)
			if err == nil {
				break
			}
			if !errors.Is(err, metadata.ErrTopicExists) || ctx.Err() != nil {
				t.Fatalf("create t: %v", err)
			}
			time.Sleep(50 * time.Millisecond) // the controller clears the deleted one first
		}
		until("t placed", func() bool { p, ok := m.Partition("t", 0); return ok && p.Leader >= 0 })
		return m.TopicRecords()["t"].Incarnation
	}

	until("both nodes seen", func() bool { return len(m.Nodes()) == 2 })
	first := create()
	keepShards(first)
	if _, err := st.Append(ctx, "t-0", []record.Record{{Value: []byte("old")}}); err != nil {
		t.Fatal(err)
	}
	if err := m.DeleteTopic(ctx, "t"); err != nil {
		t.Fatal(err)
	}
	second := create()
	if second == first {
		t.Fatalf("the topic made again has the old incarnation %d", first)
	}
	if a, ok := assigned(); ok {
		t.Fatalf("the new topic's partition is assigned (%+v) while this node's shard t-0 is the deleted topic's", a)
	}
	keepShards(second)
	if end, err := st.LogEnd(ctx, "t-0"); err != nil || end != 0 {
		t.Fatalf("the new topic's shard ends at %d (%v); want it empty", end, err)
	}
}
