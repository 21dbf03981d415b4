package main

import (
	"bytes"
	"context"
	"fmt"
	"io"
	"net/http"
	"os"
	"path/filepath"
	"reflect"
	"strings"
	"testing"
	"time"

	"github.com/hamba/avro/v2"
	pq "github.com/parquet-go/parquet-go"
	"github.com/twmb/franz-go/pkg/kadm"
	"github.com/twmb/franz-go/pkg/kgo"
	"github.com/twmb/franz-go/pkg/sr"
)

const typedOrderSchema = `{"type": "record", "name": "Order", "namespace": "shop", "fields": [
	{"name": "id", "type": "long"}, {"name": "sku", "type": "string"}, {"name": "qty", "type": "int"},
	{"name": "price", "type": "double"}, {"name": "tags", "type": {"type": "array", "items": "string"}},
	{"name": "note", "type": ["null", "string"], "default": null}]}`

// A topic with strata.value.schema=schema_id tiers objects whose
// value_typed column holds each value decoded by the schema its wire
// header names (values encoded by franz-go's sr.Serde, schemas in
// strata's registry), beside the raw bytes; a value that is not Avro
// keeps its bytes with the reason in value_typed_error, and is counted in
// /metrics; a consumer reads every record back byte for byte.
func TestTypedColumnsInTheColdTier(t *testing.T) {
	for _, registry := range []string{"own", "external"} {
		t.Run(registry, func(t *testing.T) { typedColumnsInTheColdTier(t, registry) })
	}
}

// typedColumnsInTheColdTier is the test with strata's own registry, or
// with another's named by schema_registry.url: a second strata's, a real
// server of Confluent's REST API, which the broker under test asks over
// HTTP with basic auth's password in the URL.
func typedColumnsInTheColdTier(t *testing.T, registry string) {
	sets := []string{"segment.max_bytes=4KiB", "segment.roll_check_interval=5",
		"tiering.schedule=@every 1h", "tiering.min_sealed_age=0s", "tiering.local_retention=0s"}
	var registryAddr string
	if registry == "external" {
		other := startServe(t)
		registryAddr = other.SchemaRegistry
		sets = append(sets, "schema_registry.url=http://someone:secret@"+registryAddr)
	}
	s := startServe(t, sets...)
	if registry == "external" {
		if s.SchemaRegistry != "" {
			t.Fatalf("with schema_registry.url the broker serves a registry of its own at %s", s.SchemaRegistry)
		}
	} else {
		registryAddr = s.SchemaRegistry
	}
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	rcl, err := sr.NewClient(sr.URLs("http://" + registryAddr))
	if err != nil {
		t.Fatal(err)
	}
	ss, err := rcl.CreateSchema(ctx, "orders-value", sr.Schema{Schema: typedOrderSchema})
	if err != nil {
		t.Fatal(err)
	}
	schema := avro.MustParse(typedOrderSchema)
	var serde sr.Serde
	serde.Register(ss.ID, map[string]any{}, sr.EncodeFn(func(v any) ([]byte, error) { return avro.Marshal(schema, v) }))

	cl, err := kgo.NewClient(kgo.SeedBrokers(s.Kafka), kgo.DefaultProduceTopic("orders"))
	if err != nil {
		t.Fatal(err)
	}
	defer cl.Close()
	on := "schema_id"
	if resp, err := kadm.NewClient(cl).CreateTopic(ctx, 1, 1, map[string]*string{"strata.value.schema": &on}, "orders"); err != nil || resp.Err != nil {
		t.Fatalf("create orders: %v %v", err, resp.Err)
	}
	var values [][]byte
	var want []map[string]any // what parquet-go reads back of value_typed; nil where it is null
	for i := range 300 {
		note := any(nil)
		if i%3 == 0 {
			note = fmt.Sprint("note ", i)
		}
		order := map[string]any{"id": int64(i), "sku": fmt.Sprintf("sku-%d", i%7), "qty": int32(i % 5), "price": float64(i) / 4,
			"tags": []any{"a", strings.Repeat("b", i%3)}, "note": note}
		v, err := serde.Encode(order)
		if err != nil {
			t.Fatal(err)
		}
		switch {
		case i == 13:
			v, order = nil, nil
		case i%50 == 7:
			v, order = []byte("not avro"), nil
		}
		values, want = append(values, v), append(want, order)
		if i%50 == 49 { // in several batches, so segments roll between them
			var recs []*kgo.Record
			for _, v := range values[i-49:] {
				recs = append(recs, &kgo.Record{Value: v})
			}
			if err := cl.ProduceSync(ctx, recs...).FirstErr(); err != nil {
				t.Fatal(err)
			}
		}
	}
	resp, err := http.Post("http://"+s.Admin+"/v1/tiering/run", "application/json", nil)
	if err != nil {
		t.Fatal(err)
	}
	resp.Body.Close()

	cold := strings.TrimPrefix(s.sets[1], "cold.local.dir=")
	var objects []string
	filepath.WalkDir(filepath.Join(cold, "topic=orders"), func(path string, d os.DirEntry, err error) error {
		if err == nil && strings.HasSuffix(path, ".parquet") {
			objects = append(objects, path)
		}
		return nil
	})
	if len(objects) < 2 {
		t.Fatalf("%d objects tiered; want several", len(objects))
	}
	undecoded, rows := 0, 0
	for _, path := range objects {
		data, err := os.ReadFile(path)
		if err != nil {
			t.Fatal(err)
		}
		pf, err := pq.OpenFile(bytes.NewReader(data), int64(len(data)))
		if err != nil {
			t.Fatal(err)
		}
		for _, rg := range pf.RowGroups() {
			rr := rg.Rows()
			buf := make([]pq.Row, 100)
			for {
				n, err := rr.ReadRows(buf)
				for _, row := range buf[:n] {
					m := map[string]any{}
					if err := pf.Schema().Reconstruct(&m, row); err != nil {
						t.Fatal(err)
					}
					off := m["offset"].(int64)
					got, _ := m["value_typed"].(map[string]any)
					if w := want[off]; w != nil {
						w["tags"] = []any{"a", strings.Repeat("b", int(off)%3)}
						if !reflect.DeepEqual(fmt.Sprint(got), fmt.Sprint(w)) {
							t.Fatalf("offset %d: value_typed %v, want %v", off, got, w)
						}
					} else if got != nil {
						t.Fatalf("offset %d: value_typed %v, want null", off, got)
					}
					if e := m["value_typed_error"]; (e != nil) != (want[off] == nil && values[off] != nil) {
						t.Fatalf("offset %d: value_typed_error %v", off, e)
					} else if e != nil {
						undecoded++
						if !strings.Contains(fmt.Sprint(e), "wire format") {
							t.Errorf("offset %d: value_typed_error %q does not say why", off, e)
						}
					}
					rows++
				}
				if err == io.EOF {
					break
				}
				if err != nil {
					t.Fatal(err)
				}
			}
			rr.Close()
		}
	}
	if undecoded == 0 || rows < 100 {
		t.Fatalf("%d rows tiered, %d undecoded; want the bad values among them", rows, undecoded)
	}
	mresp, err := http.Get("http://" + s.Admin + "/metrics")
	if err != nil {
		t.Fatal(err)
	}
	metrics, _ := io.ReadAll(mresp.Body)
	mresp.Body.Close()
	if line := fmt.Sprintf(`strata_tiering_undecoded_records_total{column="value_typed",topic="orders"} %d`, undecoded); !strings.Contains(string(metrics), line) {
		t.Errorf("/metrics lacks %s", line)
	}

	// Every record reads back as produced, the tiered ones from the cold tier.
	cons, err := kgo.NewClient(kgo.SeedBrokers(s.Kafka), kgo.ConsumeTopics("orders"), kgo.ConsumeResetOffset(kgo.NewOffset().AtStart()))
	if err != nil {
		t.Fatal(err)
	}
	defer cons.Close()
	for n := 0; n < len(values); {
		fs := cons.PollFetches(ctx)
		if err := fs.Err(); err != nil {
			t.Fatal(err)
		}
		fs.EachRecord(func(r *kgo.Record) {
			if !bytes.Equal(r.Value, values[r.Offset]) || (r.Value == nil) != (values[r.Offset] == nil) {
				t.Fatalf("offset %d: consumed %q, produced %q", r.Offset, r.Value, values[r.Offset])
			}
			n++
		})
	}
}

// A retype of a topic that asks for no typed column is refused at once,
// with the reason as the answer's status and error; of a topic this node
// has no partition of, 404.
func TestRetypeRefusals(t *testing.T) {
	s := startServe(t)
	cl, err := kgo.NewClient(kgo.SeedBrokers(s.Kafka), kgo.DefaultProduceTopic("plain"), kgo.AllowAutoTopicCreation())
	if err != nil {
		t.Fatal(err)
	}
	defer cl.Close()
	if err := cl.ProduceSync(context.Background(), &kgo.Record{Value: []byte("v")}).FirstErr(); err != nil {
		t.Fatal(err)
	}
	for topic, want := range map[string]struct {
		status int
		says   string
	}{"plain": {http.StatusBadRequest, "strata.value.schema and strata.key.schema are none"}, "nosuch": {http.StatusNotFound, "no partition of topic nosuch"}} {
		resp, err := http.Post("http://"+s.Admin+"/v1/tiering/retype?topic="+topic, "application/json", nil)
		if err != nil {
			t.Fatal(err)
		}
		body, _ := io.ReadAll(resp.Body)
		resp.Body.Close()
		if resp.StatusCode != want.status || !strings.Contains(string(body), want.says) {
			t.Errorf("retype %s: %d %s, want %d naming %q", topic, resp.StatusCode, body, want.status, want.says)
		}
	}
}
