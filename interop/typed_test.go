package interop

import (
	"context"
	"fmt"
	"net/http"
	"os/exec"
	"path/filepath"
	"slices"
	"testing"
	"time"

	"strata/internal/testsvc"
)

// typedRead is what one reader of typed_query.py read of a topic.
type typedRead struct {
	Rows []struct {
		Offset     int64    `json:"offset"`
		ID         *int64   `json:"id"`
		Item       *string  `json:"item"`
		Price      *float64 `json:"price"`
		Tags       []string `json:"tags"`
		Discount   *float64 `json:"discount"`
		Error      *string  `json:"error"`
		ValueBytes int      `json:"value_bytes"`
	} `json:"rows"`
	Groups []typedGroup `json:"groups"`
}

type typedGroup struct {
	Item     string   `json:"item"`
	Count    int      `json:"count"`
	Sum      float64  `json:"sum"`
	Discount *float64 `json:"discount"`
}

// confluent-kafka-python's Avro, Protobuf and JSON Schema serializers
// produce to topics with strata.value.schema=schema_id. Once tiered,
// DuckDB over the objects, and pyiceberg, DuckDB's iceberg extension and
// Spark over each topic's Iceberg table, read every record's fields from
// value_typed by name, as produced, and sum them by group; the one value
// that is not Avro is there with its bytes, a null value_typed and the
// reason. Then a second, compatible version of each schema adds a field:
// the table's schema takes it with a new field id, keeping the others',
// no data file tiered before is rewritten, and the readers read it on the
// newer records and null on the older.
func TestTypedColumnsFromConfluentSerializers(t *testing.T) {
	producePy, queryPy := registryPython(t), icebergPython(t)
	cold := filepath.Join(t.TempDir(), "cold")
	srv := testsvc.ServeStrata(t, strataBin, "cold.local.dir="+cold, "segment.max_bytes=4KiB", "segment.roll_check_interval=5",
		"tiering.schedule=@every 1h", "tiering.min_sealed_age=0s", "tiering.local_retention=0s", "iceberg.catalog=hadoop")
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Minute)
	defer cancel()
	var topics map[string]string
	produce := func(from, to, version int) {
		var produced struct {
			Topics  map[string]string `json:"topics"`
			Records int               `json:"records"`
		}
		checkJSON(t, exec.CommandContext(ctx, producePy, "typed_produce.py", srv.Kafka, "http://"+srv.SchemaRegistry,
			fmt.Sprint(from), fmt.Sprint(to), fmt.Sprint(version)), &produced)
		if len(produced.Topics) != 3 || produced.Records != to-from {
			t.Fatalf("typed_produce.py produced %+v", produced)
		}
		topics = produced.Topics
		resp, err := http.Post("http://"+srv.Admin+"/v1/tiering/run", "application/json", nil)
		if err != nil {
			t.Fatal(err)
		}
		resp.Body.Close()
	}
	type queried struct {
		Parquet       typedRead      `json:"duckdb_parquet"`
		PyIceberg     typedRead      `json:"pyiceberg"`
		DuckDBIceberg typedRead      `json:"duckdb_iceberg"`
		Files         [][]any        `json:"files"`
		IDs           map[string]any `json:"ids"`
	}
	query := func(topic string, version int) queried {
		var got queried
		checkJSON(t, exec.CommandContext(ctx, queryPy, "typed_query.py", cold, topic, fmt.Sprint(version)), &got)
		for what, r := range map[string]typedRead{"DuckDB over the objects": got.Parquet, "pyiceberg": got.PyIceberg, "DuckDB's iceberg_scan": got.DuckDBIceberg} {
			checkTyped(t, topics[topic], fmt.Sprintf("%s, %s, version %d", topics[topic], what, version), r)
		}
		return got
	}

	produce(0, 200, 1)
	first := map[string]queried{}
	for topic := range topics {
		first[topic] = query(topic, 1)
		if id, eid := first[topic].IDs["value_typed"], first[topic].IDs["value_typed_error"]; id != 1000.0 || eid == nil {
			t.Fatalf("%s: the table's value_typed has field id %v, its error column %v", topic, id, eid)
		}
	}

	produce(200, 300, 2)
	last := map[string]typedRead{}
	for topic, kind := range topics {
		got := query(topic, 2)
		last[topic] = got.DuckDBIceberg
		if n := len(got.DuckDBIceberg.Rows); n <= 200 {
			t.Fatalf("%s: %d rows tiered after version 2's records", kind, n)
		}
		before := first[topic]
		for _, f := range before.Files {
			if !slices.ContainsFunc(got.Files, func(g []any) bool { return fmt.Sprint(g) == fmt.Sprint(f) }) {
				t.Errorf("%s: data file %v of the first tiering is not in the table as it was: %v", kind, f, got.Files)
			}
		}
		if got.IDs["value_typed.id"] != before.IDs["value_typed.id"] || got.IDs["value_typed_error"] != before.IDs["value_typed_error"] {
			t.Errorf("%s: field ids changed with the new version: %v, before %v", kind, got.IDs, before.IDs)
		}
		if d := got.IDs["value_typed.discount"]; d == nil || slices.Contains([]any{got.IDs["value_typed"], got.IDs["value_typed.id"], got.IDs["value_typed_error"]}, d) {
			t.Errorf("%s: the added field's id %v is none or another column's (%v)", kind, d, got.IDs)
		}
	}

	// Spark, over the same tables by their paths.
	var spark map[string]struct {
		Groups     []typedGroup `json:"groups"`
		Discounted int          `json:"discounted"`
	}
	args := []string{"typed_spark.py", jars(t, "icespark"), cold}
	for topic := range topics {
		args = append(args, topic)
	}
	cmd := exec.CommandContext(ctx, pyenv(t, "icespark"), args...)
	cmd.Env = append(cmd.Environ(), "SPARK_LOCAL_IP=127.0.0.1")
	checkJSON(t, cmd, &spark)
	for topic, kind := range topics {
		want, discounted := last[topic].Groups, 0
		for _, r := range last[topic].Rows {
			if r.Discount != nil {
				discounted++
			}
		}
		if got := spark[topic]; fmt.Sprint(groupsOf(got.Groups)) != fmt.Sprint(groupsOf(want)) || got.Discounted != discounted {
			t.Errorf("%s: Spark's GROUP BY %v and %d discounted rows; DuckDB's %v and %d", kind, groupsOf(got.Groups), got.Discounted,
				groupsOf(want), discounted)
		}
	}
}

// checkTyped checks one reader's rows of a topic of kind (AVRO, PROTOBUF,
// JSON) against what typed_produce.py produced, and its groups against
// its rows.
func checkTyped(t *testing.T, kind, what string, got typedRead) {
	t.Helper()
	if len(got.Rows) < 100 {
		t.Fatalf("%s: read %d tiered rows", what, len(got.Rows))
	}
	type sums struct {
		count         int
		sum, discount float64
	}
	want := map[string]*sums{}
	for i, r := range got.Rows {
		if r.Offset != int64(i) || r.ValueBytes == 0 {
			t.Fatalf("%s: row %d has offset %d and %d value bytes", what, i, r.Offset, r.ValueBytes)
		}
		if kind == "AVRO" && i == 13 {
			if r.ID != nil || r.Error == nil {
				t.Errorf("%s: the value that is not Avro reads as id %v, error %v", what, deref(r.ID), deref(r.Error))
			}
			continue
		}
		item, discount := fmt.Sprintf("item-%d", i%7), any(nil)
		if i >= 200 {
			discount = float64(i) * 0.5
		}
		if r.Error != nil || r.ID == nil || *r.ID != int64(i) || *r.Item != item || *r.Price != float64(i)*1.25 ||
			fmt.Sprint(r.Tags) != fmt.Sprintf("[a %d]", i) || deref(r.Discount) != discount {
			t.Fatalf("%s: offset %d reads id %v item %v price %v tags %v discount %v (error %v); produced id %d, %s, %v, [a %d], %v",
				what, i, deref(r.ID), deref(r.Item), deref(r.Price), r.Tags, deref(r.Discount), deref(r.Error), i, item, float64(i)*1.25, i, discount)
		}
		s := want[item]
		if s == nil {
			s = &sums{}
			want[item] = s
		}
		s.count++
		s.sum += float64(i) * 1.25
		if discount != nil {
			s.discount += discount.(float64)
		}
	}
	if len(got.Groups) != 7 {
		t.Fatalf("%s: GROUP BY item gave %d groups, want 7", what, len(got.Groups))
	}
	for _, g := range got.Groups {
		w := want[g.Item]
		if w == nil || g.Count != w.count || g.Sum != w.sum || (w.discount != 0 || g.Discount != nil) && deref(g.Discount) != w.discount {
			t.Errorf("%s: %s: count %d sum %v discount %v, want %+v", what, g.Item, g.Count, g.Sum, deref(g.Discount), w)
		}
	}
}

func groupsOf(gs []typedGroup) []string {
	var out []string
	for _, g := range gs {
		out = append(out, fmt.Sprintf("%s:%d:%v:%v", g.Item, g.Count, g.Sum, deref(g.Discount)))
	}
	return out
}

func deref[T any](p *T) any {
	if p == nil {
		return nil
	}
	return *p
}
