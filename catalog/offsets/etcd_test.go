package offsets

import (
	"context"
	"fmt"
	"reflect"
	"sync"
	"testing"
	"time"

	clientv3 "go.etcd.io/etcd/client/v3"

	"strata/internal/testsvc"
)

func etcdClient(t *testing.T) *clientv3.Client {
	t.Helper()
	c, err := clientv3.New(clientv3.Config{Endpoints: []string{testsvc.StartEtcd(t)}, DialTimeout: 10 * time.Second})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { c.Close() })
	return c
}

// Committed positions in etcd come back per group, topic and partition, a
// later commit replaces an earlier one, and another node reads them.
func TestEtcdCommitAndReadBack(t *testing.T) {
	prefix := "/" + testsvc.UniquePrefix(t)
	a := OpenEtcd(etcdClient(t), prefix)
	if err := a.Commit("g", map[string]map[int32]Committed{"a": {0: {Offset: 5}, 1: {Offset: 7, Metadata: "m"}}, "a.b": {0: {Offset: 1}}}); err != nil {
		t.Fatal(err)
	}
	if err := a.Commit("g", map[string]map[int32]Committed{"a": {0: {Offset: 9, LeaderEpoch: 2}}}); err != nil {
		t.Fatal(err)
	}
	if err := a.Commit("g2", map[string]map[int32]Committed{"a": {0: {Offset: 100}}}); err != nil {
		t.Fatal(err)
	}
	b := OpenEtcd(etcdClient(t), prefix) // another node
	want := map[string]map[int32]Committed{"a": {0: {Offset: 9, LeaderEpoch: 2}, 1: {Offset: 7, Metadata: "m"}}, "a.b": {0: {Offset: 1}}}
	if got, err := b.Group("g"); err != nil || !reflect.DeepEqual(got, want) {
		t.Fatalf("group g from another node: %v, %v; want %v", got, err, want)
	}
	if got, err := b.Group("never"); err != nil || len(got) != 0 {
		t.Fatalf("a group that never committed: %v, %v", got, err)
	}
}

// Two nodes committing different partitions of one group at once keep
// every partition's position.
func TestEtcdConcurrentCommitsKeepEachOther(t *testing.T) {
	prefix := "/" + testsvc.UniquePrefix(t)
	nodes := []*Etcd{OpenEtcd(etcdClient(t), prefix), OpenEtcd(etcdClient(t), prefix)}
	var wg sync.WaitGroup
	for i, n := range nodes {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for p := int32(0); p < 20; p++ {
				if err := n.Commit("g", map[string]map[int32]Committed{fmt.Sprintf("t%d", i): {p: {Offset: int64(p)}}}); err != nil {
					t.Error(err)
				}
			}
		}()
	}
	wg.Wait()
	got, err := nodes[0].Group("g")
	if err != nil {
		t.Fatal(err)
	}
	for i := range nodes {
		if n := len(got[fmt.Sprintf("t%d", i)]); n != 20 {
			t.Errorf("topic t%d: %d of 20 partitions' positions kept", i, n)
		}
	}
}

// A commit writes only the partitions it names: etcd's history grows by
// what changed, not by the group's whole set of positions, however many
// partitions the group has committed before. A group of 1,000 partitions
// committing one of them 100 times adds about 100 small values.
func TestEtcdCommitWritesOnlyWhatChanged(t *testing.T) {
	prefix := "/" + testsvc.UniquePrefix(t)
	c := etcdClient(t)
	s := OpenEtcd(c, prefix)
	all := map[int32]Committed{}
	for p := int32(0); p < 1000; p++ {
		all[p] = Committed{Offset: 1, Metadata: "consumer-1 on host-1"}
	}
	if err := s.Commit("big", map[string]map[int32]Committed{"t": all}); err != nil {
		t.Fatal(err)
	}
	// etcd's revisions are shared with other tests' keys: what this
	// group's commits changed is read under its prefix.
	before := etcdRev(t, c)
	for i := range 100 {
		if err := s.Commit("big", map[string]map[int32]Committed{"t": {7: {Offset: int64(i)}}}); err != nil {
			t.Fatal(err)
		}
	}
	// Each commit's revision holds one small value, which is what a
	// compaction drops.
	var written int
	resp, err := c.Get(context.Background(), prefix+"/", clientv3.WithPrefix(), clientv3.WithMinModRev(before+1))
	if err != nil {
		t.Fatal(err)
	}
	for _, kv := range resp.Kvs {
		written += len(kv.Key) + len(kv.Value)
	}
	if len(resp.Kvs) != 1 || written > 200 {
		t.Fatalf("100 commits of one partition of a 1,000-partition group changed %d keys, %d bytes; want 1 key, under 200 bytes", len(resp.Kvs), written)
	}
	got, err := s.Group("big")
	if err != nil || len(got["t"]) != 1000 || got["t"][7].Offset != 99 || got["t"][8].Offset != 1 {
		t.Fatalf("group after the commits: %d partitions, p7 %v, p8 %v, %v", len(got["t"]), got["t"][7], got["t"][8], err)
	}
}

func etcdRev(t *testing.T, c *clientv3.Client) int64 {
	t.Helper()
	resp, err := c.Get(context.Background(), "/")
	if err != nil {
		t.Fatal(err)
	}
	return resp.Header.Revision
}

// Offsets kept one value per group, as before, move to one key per
// group-partition at start; a position committed the new way meanwhile is
// kept, and a second run moves nothing.
func TestEtcdMigrateLegacy(t *testing.T) {
	prefix := "/" + testsvc.UniquePrefix(t)
	c := etcdClient(t)
	ctx := context.Background()
	if _, err := c.Put(ctx, prefix+"/offsets/g/x", `{"a":{"0":{"offset":5,"leader_epoch":1,"metadata":"m"},"1":{"offset":7,"leader_epoch":0}}}`); err != nil {
		t.Fatal(err)
	}
	s := OpenEtcd(c, prefix)
	if err := s.Commit("g/x", map[string]map[int32]Committed{"a": {1: {Offset: 9}}}); err != nil {
		t.Fatal(err)
	}
	if n, err := s.MigrateLegacy(ctx); n != 1 || err != nil {
		t.Fatalf("migrated %d groups, %v; want 1", n, err)
	}
	want := map[string]map[int32]Committed{"a": {0: {Offset: 5, LeaderEpoch: 1, Metadata: "m"}, 1: {Offset: 9}}}
	if got, err := s.Group("g/x"); err != nil || !reflect.DeepEqual(got, want) {
		t.Fatalf("group after the move: %v, %v; want %v", got, err, want)
	}
	if n, err := s.MigrateLegacy(ctx); n != 0 || err != nil {
		t.Fatalf("second run migrated %d groups, %v; want 0", n, err)
	}
	if got, err := s.Groups(); err != nil || !reflect.DeepEqual(got, []string{"g/x"}) {
		t.Fatalf("groups: %v, %v", got, err)
	}
}
