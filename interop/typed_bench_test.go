package interop

import (
	"context"
	"encoding/binary"
	"encoding/json"
	"fmt"
	"net/http"
	"os/exec"
	"path/filepath"
	"testing"
	"time"

	"github.com/twmb/franz-go/pkg/kadm"
	"github.com/twmb/franz-go/pkg/kgo"
	"github.com/twmb/franz-go/pkg/sr"

	"strata/bench"
	"strata/internal/testsvc"
)

// Spark's SUM(value_typed.price) GROUP BY value_typed.item over a topic's
// Iceberg table, its values JSON Schema records (the registry's wire
// format), beside the same query decoding each value's JSON from the raw
// value column (get_json_object past the 5-byte header): what the typed
// column saves an analyst.
func BenchmarkSparkTypedAggregate(b *testing.B) {
	cold := filepath.Join(b.TempDir(), "cold")
	srv := testsvc.ServeStrata(b, strataBin, "cold.local.dir="+cold, "segment.max_bytes=1MiB",
		"tiering.schedule=@every 1h", "tiering.min_sealed_age=0s", "tiering.local_retention=0s", "iceberg.catalog=hadoop")
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Minute)
	defer cancel()
	rcl, err := sr.NewClient(sr.URLs("http://" + srv.SchemaRegistry))
	if err != nil {
		b.Fatal(err)
	}
	ss, err := rcl.CreateSchema(ctx, "typed-bench-value", sr.Schema{Type: sr.TypeJSON, Schema: `{"type": "object",
		"properties": {"id": {"type": "integer"}, "item": {"type": "string"}, "price": {"type": "number"}, "qty": {"type": "integer"},
		"note": {"type": "string"}}, "required": ["id", "item", "price", "qty"]}`})
	if err != nil {
		b.Fatal(err)
	}
	cl, err := kgo.NewClient(kgo.SeedBrokers(srv.Kafka), kgo.DefaultProduceTopic("typed-bench"), kgo.ProducerLinger(5*time.Millisecond))
	if err != nil {
		b.Fatal(err)
	}
	defer cl.Close()
	on := "schema_id"
	if resp, err := kadm.NewClient(cl).CreateTopic(ctx, 1, 1, map[string]*string{"strata.value.schema": &on}, "typed-bench"); err != nil || resp.Err != nil {
		b.Fatalf("create typed-bench: %v %v", err, resp.Err)
	}
	const records = 300_000
	header := binary.BigEndian.AppendUint32([]byte{0}, uint32(ss.ID))
	for i := 0; i < records; i += 5000 {
		var batch []*kgo.Record
		for j := i; j < i+5000; j++ {
			v, _ := json.Marshal(map[string]any{"id": j, "item": fmt.Sprintf("item-%d", j%20), "price": float64(j%1000) * 0.25,
				"qty": j % 7, "note": "a note of some length, as orders carry one"})
			batch = append(batch, &kgo.Record{Value: append(header[:5:5], v...)})
		}
		if err := cl.ProduceSync(ctx, batch...).FirstErr(); err != nil {
			b.Fatal(err)
		}
	}
	resp, err := http.Post("http://"+srv.Admin+"/v1/tiering/run", "application/json", nil)
	if err != nil {
		b.Fatal(err)
	}
	resp.Body.Close()

	const runs = 5
	py := pyenv(b, "icespark")
	cmd := exec.CommandContext(ctx, py, "typed_spark_bench.py", jars(b, "icespark"), cold+"/topic=typed-bench/_iceberg", fmt.Sprint(runs))
	cmd.Env = append(cmd.Environ(), "PYSPARK_PYTHON="+py, "SPARK_LOCAL_IP=127.0.0.1")
	var got struct {
		Rows        int     `json:"rows"`
		Groups      int     `json:"groups"`
		SameAnswer  bool    `json:"same_answer"`
		TypedSecs   float64 `json:"typed_seconds"`
		DecodedSecs float64 `json:"json_seconds"`
	}
	checkJSON(b, cmd, &got)
	if !got.SameAnswer || got.Groups != 20 || got.Rows < records/2 {
		b.Fatalf("the queries disagree, or too little was tiered: %+v", got)
	}
	mrecs := float64(got.Rows) / 1e6
	bench.Must(b, "make bench (go test -bench SparkTypedAggregate ./interop)", bench.Figure{
		Name: "Spark SUM(price) GROUP BY item on typed columns", Value: mrecs / got.TypedSecs, Unit: "Mrec/s",
		Reference: "the same query decoding JSON from value", ReferenceValue: mrecs / got.DecodedSecs, Runs: runs})
}
