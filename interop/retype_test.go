package interop

import (
	"bufio"
	"bytes"
	"context"
	"fmt"
	"net/http"
	"os/exec"
	"path/filepath"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/hamba/avro/v2"
	"github.com/twmb/franz-go/pkg/kadm"
	"github.com/twmb/franz-go/pkg/kgo"
	"github.com/twmb/franz-go/pkg/sr"

	"strata/internal/testsvc"
)

// A topic tiered before it asked for typed columns is backfilled by
// `strata table retype`, killed with SIGKILL midway and run again after
// the restart: a Kafka consumer reads every record byte for byte before,
// during (while the retype rewrites the objects) and after, and once the
// retype is done pyiceberg and DuckDB's iceberg_scan read every record's
// fields from value_typed by name, the one value that is not Avro with
// its reason.
func TestRetypeSurvivesSIGKILL(t *testing.T) {
	queryPy := icebergPython(t)
	dir := t.TempDir()
	// A slow bandwidth, so the retype is killed with objects left to do.
	p := testsvc.StartProcess(t, strataBin, dir, "segment.max_bytes=4KiB", "segment.roll_check_interval=5",
		"tiering.schedule=@every 1h", "tiering.min_sealed_age=0s", "tiering.local_retention=0s", "iceberg.catalog=hadoop",
		"tiering.bandwidth=24KiB")
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Minute)
	defer cancel()
	const topic, records = "typed-avro", 200
	schema := `{"type": "record", "name": "Order", "namespace": "strata.check", "fields": [
		{"name": "id", "type": "long"}, {"name": "item", "type": "string"},
		{"name": "price", "type": "double"}, {"name": "tags", "type": {"type": "array", "items": "string"}},
		{"name": "note", "type": "string"}]}`
	rcl, err := sr.NewClient(sr.URLs("http://" + p.SchemaRegistry))
	if err != nil {
		t.Fatal(err)
	}
	ss, err := rcl.CreateSchema(ctx, topic+"-value", sr.Schema{Schema: schema})
	if err != nil {
		t.Fatal(err)
	}
	cl, err := kgo.NewClient(kgo.SeedBrokers(p.Kafka), kgo.DefaultProduceTopic(topic))
	if err != nil {
		t.Fatal(err)
	}
	defer cl.Close()
	adm := kadm.NewClient(cl)
	if resp, err := adm.CreateTopic(ctx, 1, 1, nil, topic); err != nil || resp.Err != nil {
		t.Fatalf("create %s: %v %v", topic, err, resp.Err)
	}
	as := avro.MustParse(schema)
	var values [][]byte
	for i := range records {
		v, err := avro.Marshal(as, map[string]any{"id": int64(i), "item": fmt.Sprintf("item-%d", i%7), "price": float64(i) * 1.25,
			"tags": []any{"a", fmt.Sprint(i)}, "note": strings.Repeat("n", 150)}) // about 20 records a segment
		if err != nil {
			t.Fatal(err)
		}
		v = append([]byte{0, byte(ss.ID >> 24), byte(ss.ID >> 16), byte(ss.ID >> 8), byte(ss.ID)}, v...)
		if i == 13 {
			v = []byte("not avro")
		}
		values = append(values, v)
	}
	for i := 0; i < records; i += 25 { // batches, so segments roll between them
		var batch []*kgo.Record
		for _, v := range values[i : i+25] {
			batch = append(batch, &kgo.Record{Value: v})
		}
		if err := cl.ProduceSync(ctx, batch...).FirstErr(); err != nil {
			t.Fatal(err)
		}
	}
	tier := func() {
		resp, err := http.Post("http://"+p.Admin+"/v1/tiering/run", "application/json", nil)
		if err != nil {
			t.Fatal(err)
		}
		resp.Body.Close()
	}
	tier()
	consumeAll(t, ctx, p.Kafka, topic, values, "before the retype")

	on := "schema_id"
	if _, err := adm.AlterTopicConfigs(ctx, []kadm.AlterConfig{{Name: "strata.value.schema", Value: &on}}, topic); err != nil {
		t.Fatal(err)
	}
	// The retype, read while it goes, killed after two objects.
	retype := exec.CommandContext(ctx, strataBin, "table", "retype", topic, "--admin-addr", p.Admin)
	out, err := retype.StdoutPipe()
	if err != nil {
		t.Fatal(err)
	}
	if err := retype.Start(); err != nil {
		t.Fatal(err)
	}
	var during sync.WaitGroup
	stop := make(chan struct{})
	during.Add(1)
	go func() {
		defer during.Done()
		for {
			select {
			case <-stop:
				return
			default:
			}
			consumeAll(t, ctx, p.Kafka, topic, values, "during the retype")
		}
	}()
	rewritten := 0
	for sc := bufio.NewScanner(out); sc.Scan() && rewritten < 2; {
		if strings.Contains(sc.Text(), " rewritten: ") {
			rewritten++
		}
	}
	close(stop)
	during.Wait()
	if rewritten < 2 {
		t.Fatalf("the retype rewrote %d objects before it ended", rewritten)
	}
	p.Kill()
	retype.Wait()
	p.Restart()
	consumeAll(t, ctx, p.Kafka, topic, values, "after the kill")

	var stdout bytes.Buffer
	again := exec.CommandContext(ctx, strataBin, "table", "retype", topic, "--admin-addr", p.Admin)
	again.Stdout = &stdout
	if err := again.Run(); err != nil {
		t.Fatalf("strata table retype after the restart: %v\n%s", err, stdout.String())
	}
	var left, done int
	last := strings.TrimSpace(stdout.String())
	last = last[strings.LastIndex(last, "\n")+1:]
	if _, err := fmt.Sscanf(last, "retyped topic "+topic+": %d objects rewritten (%d bytes), %d had", &left, new(int), &done); err != nil || left == 0 || done < 2 {
		t.Fatalf("the retype after the restart rewrote %d objects and found %d done (%v); want the kill to have left some:\n%s", left, done, err, stdout.String())
	}
	tier() // the run after: the catalog, manifest and table agree
	consumeAll(t, ctx, p.Kafka, topic, values, "after the retype")

	var got struct {
		PyIceberg     typedRead `json:"pyiceberg"`
		DuckDBIceberg typedRead `json:"duckdb_iceberg"`
	}
	checkJSON(t, exec.CommandContext(ctx, queryPy, "typed_query.py", filepath.Join(dir, "cold"), topic, "1"), &got)
	// The Hive-style glob over the bucket sees a retyped object's old copy
	// too until tiering.retired_grace has passed; the table never does.
	checkTyped(t, "AVRO", "pyiceberg after the retype", got.PyIceberg)
	checkTyped(t, "AVRO", "DuckDB's iceberg_scan after the retype", got.DuckDBIceberg)
	if n := len(got.PyIceberg.Rows); n < records-40 {
		t.Fatalf("the table holds %d rows of %d produced", n, records)
	}
}

// consumeAll reads the topic's partition 0 from its start and fails
// unless it is want, byte for byte.
func consumeAll(t *testing.T, ctx context.Context, kafka, topic string, want [][]byte, when string) {
	t.Helper()
	c, err := kgo.NewClient(kgo.SeedBrokers(kafka),
		kgo.ConsumePartitions(map[string]map[int32]kgo.Offset{topic: {0: kgo.NewOffset().AtStart()}}))
	if err != nil {
		t.Error(err)
		return
	}
	defer c.Close()
	ctx, cancel := context.WithTimeout(ctx, time.Minute)
	defer cancel()
	n := 0
	for n < len(want) {
		fs := c.PollFetches(ctx)
		if err := fs.Err(); err != nil {
			t.Errorf("%s: consuming %s from offset %d: %v", when, topic, n, err)
			return
		}
		for _, r := range fs.Records() {
			if r.Offset != int64(n) || !bytes.Equal(r.Value, want[n]) {
				t.Errorf("%s: offset %d reads %q, produced %q at offset %d", when, r.Offset, r.Value, want[n], n)
				return
			}
			n++
		}
	}
}
