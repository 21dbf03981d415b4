package e2e

import (
	"context"
	"encoding/binary"
	"errors"
	"fmt"
	"sync"
	"testing"
	"time"

	"github.com/twmb/franz-go/pkg/kadm"
	"github.com/twmb/franz-go/pkg/kerr"
	"github.com/twmb/franz-go/pkg/kgo"
	"github.com/twmb/franz-go/pkg/sr"
)

// The schema registry on every node of a cluster is one registry, kept in
// etcd: a schema registered on node 1 is found by id on node 2; nodes
// registering different schemas at once give them distinct ids, each
// found on the other node; the same schema registered on both at once
// gets one id. Produce validation on either node takes a schema
// registered a moment before on the other.
func TestSchemaRegistryAcrossNodes(t *testing.T) {
	c := newCluster(t, 2)
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	reg := map[int32]*sr.Client{}
	for id, p := range c.nodes {
		if p.SchemaRegistry == "" {
			t.Fatalf("node %d serves no schema registry", id)
		}
		cl, err := sr.NewClient(sr.URLs("http://" + p.SchemaRegistry))
		if err != nil {
			t.Fatal(err)
		}
		reg[id] = cl
	}
	other := map[int32]int32{1: 2, 2: 1}

	first, err := reg[1].CreateSchema(ctx, "clicks-value", sr.Schema{Schema: `{"type":"record","name":"Click","fields":[{"name":"url","type":"string"}]}`})
	if err != nil {
		t.Fatal(err)
	}
	if got, err := reg[2].SchemaByID(ctx, first.ID); err != nil || got.Schema != first.Schema.Schema {
		t.Fatalf("node 2, schema %d registered on node 1: %+v, %v", first.ID, got, err)
	}
	if got, err := reg[2].SchemaByVersion(ctx, "clicks-value", -1); err != nil || got.ID != first.ID {
		t.Fatalf("node 2, clicks-value's latest: %+v, %v; want id %d", got, err, first.ID)
	}

	for _, tc := range []struct {
		name string
		// schema is what node n registers, i-th of perNode, and under
		// which subject.
		schema  func(node int32, i int) (string, sr.Schema)
		perNode int
		sameID  bool
	}{
		{"different schemas", func(node int32, i int) (string, sr.Schema) {
			return fmt.Sprintf("n%d-%d-value", node, i), sr.Schema{Type: sr.TypeJSON, Schema: fmt.Sprintf(`{"type":"string","maxLength":%d}`, int(node)*1000+i)}
		}, 15, false},
		{"one schema on both", func(node int32, i int) (string, sr.Schema) {
			return "shared-value", sr.Schema{Type: sr.TypeJSON, Schema: `{"type":"boolean"}`}
		}, 1, true},
		{"one schema under a subject per node", func(node int32, i int) (string, sr.Schema) {
			return fmt.Sprintf("own-%d-value", node), sr.Schema{Type: sr.TypeJSON, Schema: `{"type":"integer"}`}
		}, 1, true},
	} {
		t.Run(tc.name, func(t *testing.T) {
			type got struct {
				node  int32
				i, id int
				text  string
			}
			var mu sync.Mutex
			var all []got
			var wg sync.WaitGroup
			for node := range reg {
				wg.Go(func() {
					for i := range tc.perNode {
						subject, sc := tc.schema(node, i)
						ss, err := reg[node].CreateSchema(ctx, subject, sc)
						if err != nil {
							t.Errorf("node %d registering under %s: %v", node, subject, err)
							return
						}
						mu.Lock()
						all = append(all, got{node, i, ss.ID, sc.Schema})
						mu.Unlock()
					}
				})
			}
			wg.Wait()
			if t.Failed() {
				t.FailNow()
			}
			ids := map[int]got{}
			for _, g := range all {
				if prev, dup := ids[g.id]; dup && !tc.sameID {
					t.Errorf("id %d given to node %d's schema %d and node %d's schema %d", g.id, prev.node, prev.i, g.node, g.i)
				}
				ids[g.id] = g
				if sc, err := reg[other[g.node]].SchemaByID(ctx, g.id); err != nil || sc.Schema != g.text {
					t.Errorf("node %d, schema %d registered on node %d: %q, %v; want %s", other[g.node], g.id, g.node, sc.Schema, err, g.text)
				}
			}
			if want := 2 * tc.perNode; tc.sameID && len(ids) != 1 || !tc.sameID && len(ids) != want {
				t.Errorf("%d registrations got %d distinct ids: %v", len(all), len(ids), all)
			}
		})
	}

	t.Run("produce validation on the other node", func(t *testing.T) {
		on := "true"
		cl := c.client(1, kgo.RecordPartitioner(kgo.ManualPartitioner()))
		if resp, err := kadm.NewClient(cl).CreateTopic(ctx, 2, 1, map[string]*string{"strata.value.schema.validation": &on}, "validated"); err != nil || resp.Err != nil {
			t.Fatalf("create topic validated: %v, %v", err, resp.Err)
		}
		leaders := c.leaders(1, "validated", allLed)
		// Each node registers its own version: none is checked against
		// the other's.
		if r := reg[1].SetCompatibility(ctx, sr.SetCompatibility{Level: sr.CompatNone}, "validated-value"); r[0].Err != nil {
			t.Fatal(r[0].Err)
		}
		for _, via := range []int32{1, 2} {
			// Registered on one node, then at once produced to every
			// partition: registering on each node in turn, each leader
			// is once the node that did not register it.
			ss, err := reg[via].CreateSchema(ctx, "validated-value", sr.Schema{Type: sr.TypeJSON, Schema: fmt.Sprintf(`{"type":"string","minLength":%d}`, via)})
			if err != nil {
				t.Fatal(err)
			}
			value := binary.BigEndian.AppendUint32([]byte{0}, uint32(ss.ID))
			for p, leader := range leaders {
				r := &kgo.Record{Topic: "validated", Partition: int32(p), Value: append(value, `"x"`...)}
				if err := cl.ProduceSync(ctx, r).FirstErr(); err != nil {
					t.Errorf("schema %d registered on node %d, produced to partition %d led by node %d: %v", ss.ID, via, p, leader, err)
				}
			}
		}
		bad := &kgo.Record{Topic: "validated", Partition: 0, Value: binary.BigEndian.AppendUint32([]byte{0}, 9999)}
		if err := cl.ProduceSync(ctx, bad).FirstErr(); !errors.Is(err, kerr.InvalidRecord) {
			t.Errorf("a value naming no schema: %v, want INVALID_RECORD", err)
		}
	})
}
