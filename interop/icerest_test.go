package interop

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"os/exec"
	"strings"
	"testing"
	"time"

	"strata/engine/record"
	"strata/internal/testsvc"
)

// catalogServed is strata serving topic orders' Iceberg table on MinIO, its
// REST catalog behind an admin token, after two tiering runs: the records
// each run left in the table (the first run's are a prefix of the second's).
type catalogServed struct {
	uri, token string
	minio      testsvc.MinIO
	first, all map[string][]record.Record
}

func serveCatalog(t *testing.T, rounds int, sets ...string) catalogServed {
	m := testsvc.StartMinIO(t)
	bucket := m.Bucket(t, "strata-interop")
	token := "interop-s3cret"
	srv := serveForExport(t, append(append(minioCold(m, bucket, testsvc.UniquePrefix(t)),
		"iceberg.enabled=true", "admin_token="+token), sets...)...)
	e := &exporter{srv: srv, token: token}
	first := e.export(t, rounds)
	all := e.export(t, rounds)
	return catalogServed{uri: "http://" + srv.Admin + "/iceberg", token: token, minio: m, first: first, all: all}
}

// Through strata's REST catalog alone (its URI and the admin token; the
// reader's own keys for MinIO), pyiceberg's load_catalog(type=rest) lists
// the namespace and the table and reads exactly the records tiered, its
// filter on partition and offsets planning the one object holding them;
// the snapshots carry each run's offsets; drop_table is refused (the table
// reads on after it: DuckDB reads it next). DuckDB's
// iceberg extension ATTACHes the same catalog and reads the same records.
func TestPyIcebergAndDuckDBReadThroughTheRESTCatalog(t *testing.T) {
	c := serveCatalog(t, 25)
	part, point, lo, hi := 1, 15, 10, 20
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Minute)
	defer cancel()
	cmd := exec.CommandContext(ctx, icebergPython(t), "icerest_check.py", c.uri, c.token,
		c.minio.Endpoint, c.minio.AccessKey, c.minio.SecretKey, fmt.Sprint(part), fmt.Sprint(point), fmt.Sprint(lo), fmt.Sprint(hi))
	var stderr bytes.Buffer
	cmd.Stderr = &stderr
	out, err := cmd.Output()
	if err != nil {
		t.Fatalf("icerest_check.py: %v\n%s", err, stderr.String())
	}
	var got struct {
		Namespaces     [][]string            `json:"namespaces"`
		Tables         []string              `json:"tables"`
		Metadata       string                `json:"metadata_location"`
		PyIceberg      map[string][]exported `json:"pyiceberg"`
		PyIcebergFiles []string              `json:"pyiceberg_files"`
		PyIcebergRange [][]any               `json:"pyiceberg_range"`
		Snapshots      []struct {
			ID      int64             `json:"id"`
			Offsets map[string]string `json:"offsets"`
		} `json:"snapshots"`
		Drop         string                `json:"drop"`
		DuckDBTables []string              `json:"duckdb_tables"`
		DuckDB       map[string][]exported `json:"duckdb"`
		DuckDBPoint  [][]any               `json:"duckdb_point"`
	}
	if err := json.Unmarshal(out, &got); err != nil {
		t.Fatalf("icerest_check.py output: %v\n%s", err, out)
	}
	if fmt.Sprint(got.Namespaces) != "[[strata]]" || fmt.Sprint(got.Tables) != "[strata.orders]" {
		t.Fatalf("pyiceberg through the catalog: namespaces %v, tables %v; want [[strata]], [strata.orders]", got.Namespaces, got.Tables)
	}
	if !strings.HasSuffix(got.Metadata, ".metadata.json") || !strings.Contains(got.Metadata, "/topic=orders/_iceberg/metadata/") {
		t.Fatalf("metadata-location %q: want the table's current metadata file", got.Metadata)
	}
	for tool, recs := range map[string]map[string][]exported{"pyiceberg (REST)": got.PyIceberg, "DuckDB (ATTACH of the REST catalog)": got.DuckDB} {
		if len(recs) != len(c.all) {
			t.Fatalf("%s read partitions %v, want 2", tool, len(recs))
		}
		compare(t, tool, recs, c.all)
	}
	if fmt.Sprint(got.DuckDBTables) != "[orders]" {
		t.Fatalf("DuckDB's attached catalog lists %v; want [orders]", got.DuckDBTables)
	}
	var wantRange [][]any
	for _, r := range c.all[fmt.Sprintf("orders-%d", part)] {
		if uint64(lo) <= r.Offset && r.Offset <= uint64(hi) {
			wantRange = append(wantRange, []any{part, r.Offset})
		}
	}
	sameRows(t, fmt.Sprintf("pyiceberg (REST), partition %d offsets %d-%d", part, lo, hi), got.PyIcebergRange, wantRange)
	if len(got.PyIcebergFiles) != 1 {
		t.Fatalf("pyiceberg planned %v for offsets %d-%d of partition %d; want only the object holding them", got.PyIcebergFiles, lo, hi, part)
	}
	sameRows(t, fmt.Sprintf("DuckDB (ATTACH), partition %d offset %d", part, point), got.DuckDBPoint, [][]any{{part, point}})
	// Two runs, two snapshots: each holds the offsets its run left.
	if len(got.Snapshots) != 2 {
		t.Fatalf("snapshots %+v; want one per tiering run", got.Snapshots)
	}
	for i, want := range []map[string][]record.Record{c.first, c.all} {
		for p, shard := range []string{"orders-0", "orders-1"} {
			key := fmt.Sprintf("strata.offsets.%d", p)
			if w := fmt.Sprintf("0-%d", len(want[shard])-1); got.Snapshots[i].Offsets[key] != w {
				t.Fatalf("snapshot %d has %s=%q, want %q", i, key, got.Snapshots[i].Offsets[key], w)
			}
		}
	}
	// pyiceberg negotiates the endpoints config advertises (the reads), so
	// it refuses the drop itself; a client that does not gets the 403.
	if !strings.Contains(got.Drop, "does not support endpoint: DELETE") && !strings.Contains(got.Drop, "strata owns") {
		t.Fatalf("pyiceberg's drop_table: %q; want refused", got.Drop)
	}
}
