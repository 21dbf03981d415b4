package etcdstore

import (
	"context"
	"encoding/binary"
	"fmt"
	"sync"
	"testing"

	"strata/internal/testsvc"
	"strata/registry"
	"strata/registry/format"
)

// twoNodes opens two registries over one prefix, each with its own etcd
// client, as two nodes of a cluster do.
func twoNodes(t *testing.T) (a, b *registry.Registry) {
	t.Helper()
	prefix := "/" + testsvc.UniquePrefix(t)
	node := func() *registry.Registry {
		r, err := registry.Open(context.Background(), open(t, etcdClient(t), prefix))
		if err != nil {
			t.Fatal(err)
		}
		return r
	}
	return node(), node()
}

func register(r *registry.Registry, subject, text string) (int, error) {
	var id int
	err := r.Write(context.Background(), func(st *registry.State) ([]registry.Write, error) {
		ss, writes, err := st.Register(registry.RegisterRequest{Subject: subject, Schema: registry.Schema{Type: format.JSON, Text: text}})
		id = ss.ID
		return writes, err
	})
	return id, err
}

func schemaByID(t *testing.T, r *registry.Registry, id int) (registry.Schema, error) {
	t.Helper()
	if err := r.Sync(context.Background()); err != nil {
		t.Fatal(err)
	}
	var sc registry.Schema
	err := r.Read(func(st *registry.State) (err error) {
		sc, err = st.SchemaByID(id)
		return err
	})
	return sc, err
}

// Two nodes registering at once never give one id to two schemas, and the
// same schema on both gets one id; what one registers the other finds by
// id after a Sync (which every REST request makes).
func TestTwoNodesShareOneRegistry(t *testing.T) {
	a, b := twoNodes(t)
	const n = 20
	ids := make([][n]int, 2)
	var wg sync.WaitGroup
	for node, r := range []*registry.Registry{a, b} {
		wg.Go(func() {
			for i := range n {
				id, err := register(r, fmt.Sprintf("s-%d-%d", node, i), fmt.Sprintf(`{"type":"string","maxLength":%d}`, node*1000+i))
				if err != nil {
					t.Errorf("node %d, registration %d: %v", node, i, err)
					return
				}
				ids[node][i] = id
			}
		})
	}
	// The same schema under one subject on both nodes at once.
	same := make([]int, 2)
	for node, r := range []*registry.Registry{a, b} {
		wg.Go(func() {
			var err error
			if same[node], err = register(r, "shared", `{"type":"boolean"}`); err != nil {
				t.Errorf("node %d, the shared schema: %v", node, err)
			}
		})
	}
	wg.Wait()
	if t.Failed() {
		t.FailNow()
	}
	if same[0] != same[1] {
		t.Errorf("the same schema got id %d on one node and %d on the other", same[0], same[1])
	}
	seen := map[int]string{}
	for node := range ids {
		for i, id := range ids[node] {
			what := fmt.Sprintf("node %d's schema %d", node, i)
			if prev, dup := seen[id]; dup || id == same[0] {
				t.Errorf("id %d given to %s and to %s (or the shared schema)", id, prev, what)
			}
			seen[id] = what
			// Each node finds the other's schemas by id.
			other := []*registry.Registry{b, a}[node]
			sc, err := schemaByID(t, other, id)
			if want := fmt.Sprintf(`{"type":"string","maxLength":%d}`, node*1000+i); err != nil || sc.Text != want {
				t.Errorf("the other node's schema %d: %q, %v; want %s", id, sc.Text, err, want)
			}
		}
	}
}

// Produce validation on one node takes an id registered on the other a
// moment ago (the miss syncs), and a header naming no schema is still
// refused.
func TestWireHeaderSeesTheOtherNode(t *testing.T) {
	a, b := twoNodes(t)
	header := func(id int) []byte { return binary.BigEndian.AppendUint32([]byte{0}, uint32(id)) }
	if err := b.CheckWireHeader("t-value", header(1)); err == nil {
		t.Fatal("an id nobody registered was taken")
	}
	id, err := register(a, "t-value", `{"type":"string"}`)
	if err != nil {
		t.Fatal(err)
	}
	for _, tc := range []struct {
		name    string
		subject string
		value   []byte
		ok      bool
	}{
		{"registered on the other node", "t-value", header(id), true},
		{"an id never registered", "t-value", header(id + 1), false},
		{"another subject", "u-value", header(id), false},
	} {
		t.Run(tc.name, func(t *testing.T) {
			if err := b.CheckWireHeader(tc.subject, tc.value); (err == nil) != tc.ok {
				t.Fatalf("CheckWireHeader: %v, want ok=%v", err, tc.ok)
			}
		})
	}
}
