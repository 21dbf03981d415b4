package interop

import (
	"context"
	"fmt"
	"net/http"
	"os/exec"
	"path/filepath"
	"testing"
	"time"

	"strata/internal/testsvc"
)

// confluent-kafka-python's Avro, Protobuf and JSON Schema serializers
// produce to topics with strata.value.schema=schema_id; once tiered, DuckDB
// reads each record's fields from value_typed by name, as produced, and
// sums them by group; the one value that is not Avro is there with its
// bytes, a null value_typed and the reason.
func TestTypedColumnsFromConfluentSerializers(t *testing.T) {
	producePy, queryPy := registryPython(t), icebergPython(t)
	cold := filepath.Join(t.TempDir(), "cold")
	srv := testsvc.ServeStrata(t, strataBin, "cold.local.dir="+cold, "segment.max_bytes=4KiB", "segment.roll_check_interval=5",
		"tiering.schedule=@every 1h", "tiering.min_sealed_age=0s", "tiering.local_retention=0s")
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Minute)
	defer cancel()
	const records = 200
	var produced struct {
		Topics  map[string]string `json:"topics"`
		Records int               `json:"records"`
	}
	checkJSON(t, exec.CommandContext(ctx, producePy, "typed_produce.py", srv.Kafka, "http://"+srv.SchemaRegistry, fmt.Sprint(records)), &produced)
	if len(produced.Topics) != 3 || produced.Records != records {
		t.Fatalf("typed_produce.py produced %+v", produced)
	}
	resp, err := http.Post("http://"+srv.Admin+"/v1/tiering/run", "application/json", nil)
	if err != nil {
		t.Fatal(err)
	}
	resp.Body.Close()

	for topic, kind := range produced.Topics {
		var got struct {
			Rows []struct {
				Offset     int64    `json:"offset"`
				ID         *int64   `json:"id"`
				Item       *string  `json:"item"`
				Price      *float64 `json:"price"`
				Tags       []string `json:"tags"`
				Error      *string  `json:"error"`
				ValueBytes int      `json:"value_bytes"`
			} `json:"rows"`
			Groups []struct {
				Item  string  `json:"item"`
				Count int     `json:"count"`
				Sum   float64 `json:"sum"`
			} `json:"groups"`
		}
		checkJSON(t, exec.CommandContext(ctx, queryPy, "typed_query.py", cold, topic), &got)
		if len(got.Rows) < records/2 {
			t.Fatalf("%s: DuckDB read %d tiered rows of %d produced", kind, len(got.Rows), records)
		}
		count, sum := map[string]int{}, map[string]float64{}
		for i, r := range got.Rows {
			if r.Offset != int64(i) || r.ValueBytes == 0 {
				t.Fatalf("%s: row %d has offset %d and %d value bytes", kind, i, r.Offset, r.ValueBytes)
			}
			if kind == "AVRO" && i == 13 {
				if r.ID != nil || r.Error == nil {
					t.Errorf("%s: the value that is not Avro reads as id %v, error %v", kind, r.ID, r.Error)
				}
				continue
			}
			item := fmt.Sprintf("item-%d", i%7)
			if r.Error != nil || r.ID == nil || *r.ID != int64(i) || *r.Item != item || *r.Price != float64(i)*1.25 || fmt.Sprint(r.Tags) != fmt.Sprintf("[a %d]", i) {
				t.Fatalf("%s: offset %d reads id %v item %v price %v tags %v (error %v); produced id %d, %s, %v, [a %d]",
					kind, i, deref(r.ID), deref(r.Item), deref(r.Price), r.Tags, deref(r.Error), i, item, float64(i)*1.25, i)
			}
			count[item]++
			sum[item] += float64(i) * 1.25
		}
		if len(got.Groups) != 7 {
			t.Fatalf("%s: GROUP BY item gave %d groups, want 7", kind, len(got.Groups))
		}
		for _, g := range got.Groups {
			if g.Count != count[g.Item] || g.Sum != sum[g.Item] {
				t.Errorf("%s: %s: count %d sum %v, want %d and %v", kind, g.Item, g.Count, g.Sum, count[g.Item], sum[g.Item])
			}
		}
	}
}

func deref[T any](p *T) any {
	if p == nil {
		return nil
	}
	return *p
}
