package interop

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"net/http"
	"os/exec"
	"path/filepath"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/twmb/franz-go/pkg/kadm"
	"github.com/twmb/franz-go/pkg/kgo"

	"strata/internal/testsvc"
	"strata/tiering"
)

// icebergPython is the Iceberg readers' environment (scripts/pyenv iceberg).
func icebergPython(t *testing.T) string {
	root, _ := filepath.Abs("..")
	out, err := exec.Command(filepath.Join(root, "scripts", "pyenv"), "iceberg").Output()
	if err != nil {
		t.Fatalf("scripts/pyenv iceberg: %v", err)
	}
	return strings.TrimSpace(string(out))
}

// With iceberg.enabled, a tiering run of `strata serve` leaves the topic an
// Iceberg table in the cold tier, a local folder or a MinIO bucket: pyiceberg and DuckDB's iceberg extension,
// given only its current metadata (no catalog; or, with iceberg.catalog on
// SQLite, pyiceberg's SqlCatalog names it), read exactly the records
// tiered, each offset once, with partition from the data files' partition
// values; pyiceberg's filter on partition and offset plans only the one
// object holding them, DuckDB's on timestamp returns exactly the records in
// the range, and the snapshot's summary carries each partition's offsets.
func TestPyIcebergAndDuckDBReadTheTable(t *testing.T) {
	for _, backend := range []string{"local", "s3", "sqlite"} {
		t.Run(backend, func(t *testing.T) { readTheTable(t, backend) })
	}
}

func readTheTable(t *testing.T, backend string) {
	var cold, where []string
	switch backend {
	case "local":
		dir := t.TempDir()
		cold = []string{"cold.local.dir=" + dir}
		where = []string{"local", filepath.Join(dir, "topic=orders", "_iceberg")}
	case "sqlite":
		dir := t.TempDir()
		file := filepath.Join(t.TempDir(), "catalog.db")
		cold = []string{"cold.local.dir=" + dir, "iceberg.catalog=sqlite:" + file}
		where = []string{"sqlite", file}
	case "s3":
		m := testsvc.StartMinIO(t)
		bucket := m.Bucket(t, "strata-interop")
		prefix := testsvc.UniquePrefix(t)
		cold = minioCold(m, bucket, prefix)
		where = []string{"s3", m.Endpoint, m.AccessKey, m.SecretKey, "s3://" + bucket + "/" + prefix + "/topic=orders/_iceberg"}
	}
	want := export(t, append(cold, "iceberg.enabled=true")...)
	part, lo, hi := 1, 10, 20
	recs0 := want["orders-0"]
	from, to := recs0[len(recs0)/3].Timestamp, recs0[len(recs0)/2].Timestamp

	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Minute)
	defer cancel()
	cmd := exec.CommandContext(ctx, icebergPython(t), append(append([]string{"iceberg_check.py"}, where...),
		fmt.Sprint(part), fmt.Sprint(lo), fmt.Sprint(hi), fmt.Sprint(from), fmt.Sprint(to))...)
	var got struct {
		Metadata       string                `json:"metadata"`
		PyIceberg      map[string][]exported `json:"pyiceberg"`
		PyIcebergFiles []string              `json:"pyiceberg_files"`
		PyIcebergRange [][]any               `json:"pyiceberg_range"`
		Summary        map[string]string     `json:"summary"`
		DuckDB         map[string][]exported `json:"duckdb"`
		DuckDBRange    [][]any               `json:"duckdb_range"`
	}
	checkJSON(t, cmd, &got)
	for tool, recs := range map[string]map[string][]exported{"pyiceberg": got.PyIceberg, "DuckDB iceberg_scan": got.DuckDB} {
		if len(recs) != len(want) {
			t.Fatalf("%s read partitions %v, want 2", tool, len(recs))
		}
		compare(t, tool, recs, want)
	}

	// The filter on partition and offsets: the rows, and one data file.
	var wantRange [][]any
	for _, r := range want[fmt.Sprintf("orders-%d", part)] {
		if uint64(lo) <= r.Offset && r.Offset <= uint64(hi) {
			wantRange = append(wantRange, []any{part, r.Offset})
		}
	}
	sameRows(t, fmt.Sprintf("pyiceberg, partition %d offsets %d-%d", part, lo, hi), got.PyIcebergRange, wantRange)
	if len(got.PyIcebergFiles) != 1 {
		t.Fatalf("pyiceberg planned %v for offsets %d-%d of partition %d; want only the object holding them", got.PyIcebergFiles, lo, hi, part)
	}

	var inRange [][]any
	for i, shard := range []string{"orders-0", "orders-1"} {
		for _, r := range want[shard] {
			if from <= r.Timestamp && r.Timestamp <= to {
				inRange = append(inRange, []any{i, r.Offset, r.Timestamp})
			}
		}
	}
	if len(inRange) < 20 {
		t.Fatalf("only %d records in the timestamp range %d-%d", len(inRange), from, to)
	}
	sameRows(t, fmt.Sprintf("DuckDB over the table's folder, timestamp %d-%d", from, to), got.DuckDBRange, inRange)

	for i, shard := range []string{"orders-0", "orders-1"} {
		key := fmt.Sprintf("strata.offsets.%d", i)
		if w := fmt.Sprintf("0-%d", len(want[shard])-1); got.Summary[key] != w {
			t.Fatalf("the current snapshot's summary has %s=%q, want %q (all: %v)", key, got.Summary[key], w, got.Summary)
		}
	}
}

// The table's delete snapshots as the readers see them: after DeleteRecords
// inside a tiered object of partition 0 and the next tiering run (which
// removes the objects wholly below the new log start and hides the rows
// below it in the kept one with a position delete), pyiceberg and DuckDB's
// iceberg extension read exactly the records from the log start on, and
// the summary starts the partition there.
func TestPyIcebergAndDuckDBHonourTheTablesDeletes(t *testing.T) {
	dir := t.TempDir()
	want, srv := exportServed(t, 25, "cold.local.dir="+dir, "iceberg.enabled=true")
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Minute)
	defer cancel()
	cut := int64(len(want["orders-0"]) / 2)
	if cut%12 == 0 {
		cut += 5 // inside an object: segments roll between 12-record batches
	}
	c, err := kgo.NewClient(kgo.SeedBrokers(srv.Kafka))
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	res, err := kadm.NewClient(c).DeleteRecords(ctx, kadm.Offsets{"orders": {0: {Topic: "orders", Partition: 0, At: cut}}})
	if err != nil || res.Error() != nil {
		t.Fatalf("DeleteRecords below %d: %v %v", cut, err, res.Error())
	}
	req, _ := http.NewRequestWithContext(ctx, http.MethodPost, "http://"+srv.Admin+"/v1/tiering/run", nil)
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	var sum tiering.RunSummary
	if err := json.NewDecoder(resp.Body).Decode(&sum); err != nil || len(sum.Errors) > 0 || sum.Expired == 0 {
		t.Fatalf("the tiering run after DeleteRecords: %v %+v", err, sum)
	}
	resp.Body.Close()
	want["orders-0"] = want["orders-0"][cut:]

	table := filepath.Join(dir, "topic=orders", "_iceberg")
	r0 := want["orders-0"]
	cmd := exec.CommandContext(ctx, icebergPython(t), "iceberg_check.py", "local", table,
		"0", fmt.Sprint(cut-3), fmt.Sprint(cut+3), fmt.Sprint(r0[0].Timestamp), fmt.Sprint(r0[len(r0)-1].Timestamp))
	var got struct {
		PyIceberg      map[string][]exported `json:"pyiceberg"`
		PyIcebergRange [][]any               `json:"pyiceberg_range"`
		Summary        map[string]string     `json:"summary"`
		DuckDB         map[string][]exported `json:"duckdb"`
	}
	checkJSON(t, cmd, &got)
	for tool, recs := range map[string]map[string][]exported{"pyiceberg": got.PyIceberg, "DuckDB iceberg_scan": got.DuckDB} {
		compare(t, tool, recs, want)
	}
	var wantRange [][]any
	for o := cut; o <= cut+3; o++ {
		wantRange = append(wantRange, []any{0, uint64(o)})
	}
	sameRows(t, fmt.Sprintf("pyiceberg, partition 0 offsets %d-%d", cut-3, cut+3), got.PyIcebergRange, wantRange)
	if w := fmt.Sprintf("%d-%d", cut, r0[len(r0)-1].Offset); got.Summary["strata.offsets.0"] != w {
		t.Fatalf("strata.offsets.0 = %q, want %q", got.Summary["strata.offsets.0"], w)
	}

	// Operators see the same table: GET /v1/tables/{topic} and the metrics.
	resp, err = http.Get("http://" + srv.Admin + "/v1/tables/orders")
	if err != nil {
		t.Fatal(err)
	}
	var view struct {
		SnapshotID int64 `json:"snapshot_id"`
		DataFiles  int   `json:"data_files"`
		Partitions []struct {
			Partition  int32  `json:"partition"`
			First      uint64 `json:"first_offset"`
			Last       uint64 `json:"last_offset"`
			LagRecords int64  `json:"lag_records"`
		} `json:"partitions"`
	}
	err = json.NewDecoder(resp.Body).Decode(&view)
	resp.Body.Close()
	if err != nil || resp.StatusCode != http.StatusOK || view.SnapshotID == 0 || view.DataFiles == 0 || len(view.Partitions) != 2 ||
		view.Partitions[0].First != uint64(cut) || view.Partitions[0].Last != r0[len(r0)-1].Offset || view.Partitions[0].LagRecords <= 0 {
		t.Fatalf("GET /v1/tables/orders: %d %v %+v", resp.StatusCode, err, view)
	}
	resp, err = http.Get("http://" + srv.Admin + "/metrics")
	if err != nil {
		t.Fatal(err)
	}
	var metrics bytes.Buffer
	metrics.ReadFrom(resp.Body)
	resp.Body.Close()
	for _, m := range []string{`strata_iceberg_commits_total{result="committed"}`, "strata_iceberg_commit_seconds_count",
		"strata_iceberg_commit_conflicts_total", `strata_iceberg_table_lag_records{partition="0",topic="orders"}`} {
		if !strings.Contains(metrics.String(), m) {
			t.Errorf("/metrics has no %s", m)
		}
	}

	// GET /v1/tables lists the topics' tables; once the topic is deleted
	// its table is no one's, there as in the REST catalog.
	tableList := func() []string {
		resp, err := http.Get("http://" + srv.Admin + "/v1/tables")
		if err != nil {
			t.Fatal(err)
		}
		defer resp.Body.Close()
		var views []struct {
			Topic string `json:"topic"`
		}
		if err := json.NewDecoder(resp.Body).Decode(&views); err != nil || resp.StatusCode != http.StatusOK {
			t.Fatalf("GET /v1/tables: %d %v", resp.StatusCode, err)
		}
		var topics []string
		for _, v := range views {
			topics = append(topics, v.Topic)
		}
		return topics
	}
	if got := tableList(); !slices.Equal(got, []string{"orders"}) {
		t.Fatalf("GET /v1/tables lists %v, want [orders]", got)
	}
	if _, err := kadm.NewClient(c).DeleteTopics(ctx, "orders"); err != nil {
		t.Fatal(err)
	}
	if got := tableList(); len(got) != 0 {
		t.Errorf("GET /v1/tables after DeleteTopics lists %v, want none", got)
	}
	resp, err = http.Get("http://" + srv.Admin + "/v1/tables/orders")
	if err != nil {
		t.Fatal(err)
	}
	resp.Body.Close()
	if resp.StatusCode != http.StatusNotFound {
		t.Errorf("GET /v1/tables/orders after DeleteTopics: %d, want 404", resp.StatusCode)
	}
}
