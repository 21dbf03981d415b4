package offsets

import (
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
