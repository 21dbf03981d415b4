package interop

import (
	"context"
	"fmt"
	"net/url"
	"os/exec"
	"path/filepath"
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
	c := serveCatalogOn(t, rounds, append(minioCold(m, bucket, testsvc.UniquePrefix(t)), sets...)...)
	c.minio = m
	return c
}

// serveCatalogOn is serveCatalog over the cold tier that sets name.
func serveCatalogOn(t *testing.T, rounds int, sets ...string) catalogServed {
	token := "interop-s3cret"
	srv := serveForExport(t, append(sets, "iceberg.enabled=true", "admin_token="+token)...)
	e := &exporter{srv: srv, token: token}
	first := e.export(t, rounds)
	all := e.export(t, rounds)
	return catalogServed{uri: "http://" + srv.Admin + "/iceberg", token: token, first: first, all: all}
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
	checkJSON(t, cmd, &got)
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

// sparkRead is what icespark_check.py reads of topic orders' table through
// one catalog.
type sparkRead struct {
	Namespaces     []string `json:"namespaces"`
	Tables         []string `json:"tables"`
	Files          int      `json:"files"`
	Scan           [][]any  `json:"scan"`
	Point          [][]any  `json:"point"`
	PointFiles     int      `json:"point_files"`
	Range          [][]any  `json:"range"`
	RangeFiles     int      `json:"range_files"`
	PartitionFiles int      `json:"partition_files"`
	Snapshots      []struct {
		ID      int64             `json:"id"`
		Offsets map[string]string `json:"offsets"`
	} `json:"snapshots"`
	First [][]any `json:"first"`
}

// Spark 4.1 (scripts/pyenv icespark: Maven Central's newest Iceberg runtime
// is for Spark 4.1, and does not load on the 4.3 of the other Spark tests)
// with Iceberg's Spark runtime reads the table through strata's REST
// catalog (its URI and the admin token) and through the SQL catalog
// strata commits to (iceberg.catalog on PostgreSQL; Iceberg's
// JdbcCatalog), on MinIO (Iceberg's S3FileIO: the endpoint, path style and
// region from the LoadTable answer, the keys the reader's own) and on
// HDFS (Iceberg's HadoopFileIO, as the files' hdfs:// URIs say). Through
// each it reads exactly the records tiered; a point and a range on offset
// within one partition scan one data file, a partition its own files only;
// VERSION AS OF the first snapshot reads what the first run tiered, whose
// summary says so. DROP TABLE through the REST catalog is refused.
func TestSparkReadsThroughTheRESTAndSQLCatalogs(t *testing.T) {
	for _, backend := range []string{"s3", "hdfs", "hdfs-hadoop"} {
		t.Run(backend, func(t *testing.T) {
			var pg string
			sets := []string{"iceberg.catalog=hadoop"}
			if backend != "hdfs-hadoop" {
				pg = testsvc.StartPostgres(t)
				sets = []string{"iceberg.catalog=" + pg, "iceberg.catalog_name=jdbc"}
			}
			var c catalogServed
			env := []string{"PYSPARK_PYTHON=" + pyenv(t, "icespark"), "SPARK_LOCAL_IP=127.0.0.1"}
			switch backend {
			case "s3":
				c = serveCatalog(t, 50, sets...)
				env = append(env, "S3_ENDPOINT=http://"+c.minio.Endpoint, "WAREHOUSE=s3://strata-interop/warehouse")
			default:
				nn := testsvc.StartHDFS(t)
				root := "/" + testsvc.UniquePrefix(t)
				c = serveCatalogOn(t, 50, append(sets, "cold.backend=hdfs", "cold.hdfs.namenodes=["+nn+"]", "cold.hdfs.root="+root)...)
				env = append(env, "WAREHOUSE=hdfs://"+nn+root+"/warehouse")
				if pg == "" { // the table by path too, as Iceberg's HadoopTables read it
					env = append(env, "HADOOP_TABLE=hdfs://"+nn+root+"/topic=orders/_iceberg")
				}
			}
			sparkReads(t, c, pg, env)
		})
	}
}

// sparkReads runs icespark_check.py on c's table, through strata's REST
// catalog and, given pg, the SQL catalog on PostgreSQL at pg, or without
// it, the Hadoop-style table by its path, and checks each.
func sparkReads(t *testing.T, c catalogServed, pg string, env []string) {
	var jdbcURI string
	if pg != "" {
		u, err := url.Parse(pg)
		if err != nil {
			t.Fatal(err)
		}
		jdbcURI = fmt.Sprintf("jdbc:postgresql://%s%s?user=%s", u.Host, u.Path, u.User.Username())
	}
	part := 1
	// One object holds the point and the range (objects of about 100
	// records here: 8KiB segments).
	point, lo, hi := 5, 2, 12
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Minute)
	defer cancel()
	args := []string{"icespark_check.py", c.uri, c.token, c.minio.AccessKey, c.minio.SecretKey,
		jars(t, "icespark"), fmt.Sprint(part), fmt.Sprint(point), fmt.Sprint(lo), fmt.Sprint(hi)}
	if jdbcURI != "" {
		args = append(args, jdbcURI)
	}
	cmd := exec.CommandContext(ctx, pyenv(t, "icespark"), args...)
	cmd.Env = append(cmd.Environ(), env...)
	var got struct {
		sparkRead
		Drop string    `json:"drop"`
		JDBC sparkRead `json:"jdbc"`
		Path sparkRead `json:"path"`
		// HadoopCatalog: the same table as hadoop.`topic=orders`._iceberg
		HadoopCatalog sparkRead `json:"hadoop_catalog"`
	}
	checkJSON(t, cmd, &got)
	c.sameAsTiered(t, "Spark through the REST catalog", got.sparkRead, part, point, lo, hi)
	if jdbcURI != "" {
		c.sameAsTiered(t, "Spark through the SQL catalog", got.JDBC, part, point, lo, hi)
	} else {
		// A path lists no namespace or table: the catalog's answers stand in.
		got.Path.Namespaces, got.Path.Tables = got.Namespaces, got.Tables
		c.sameAsTiered(t, "Spark reading the Hadoop-style table by its path", got.Path, part, point, lo, hi)
		got.HadoopCatalog.Namespaces, got.HadoopCatalog.Tables = got.Namespaces, got.Tables
		c.sameAsTiered(t, "Spark through Iceberg's HadoopCatalog", got.HadoopCatalog, part, point, lo, hi)
	}
	if got.Drop == "dropped" {
		t.Fatal("Spark dropped the table through the catalog")
	}
	t.Logf("Spark's DROP TABLE: %s", got.Drop)
}

func (c catalogServed) sameAsTiered(t *testing.T, what string, got sparkRead, part, point, lo, hi int) {
	t.Helper()
	recs := c.all[fmt.Sprintf("orders-%d", part)]
	if fmt.Sprint(got.Namespaces) != "[strata]" || fmt.Sprint(got.Tables) != "[orders]" {
		t.Fatalf("%s: namespaces %v, tables %v; want [strata], [orders]", what, got.Namespaces, got.Tables)
	}
	for i, shard := range []string{"orders-0", "orders-1"} {
		valueBytes := 0
		for _, r := range c.all[shard] {
			valueBytes += len(r.Value)
		}
		n := len(c.all[shard])
		if len(got.Scan) <= i {
			t.Fatalf("%s: the aggregate has no partition %d: %v", what, i, got.Scan)
		}
		if g, w := fmt.Sprint(ints(got.Scan[i])), fmt.Sprint([]any{i, n, 0, n - 1, valueBytes}); g != w {
			t.Fatalf("%s: the aggregate of %s: %v, want %v", what, shard, g, w)
		}
	}
	rows := func(from, to int) [][]any {
		var out [][]any
		for _, r := range recs[from : to+1] {
			out = append(out, []any{part, r.Offset, r.Timestamp, hexAny(r.Key), hexAny(r.Value)})
		}
		return out
	}
	sameRows(t, fmt.Sprintf("%s, partition %d offset %d", what, part, point), got.Point, rows(point, point))
	sameRows(t, fmt.Sprintf("%s, partition %d offsets %d-%d", what, part, lo, hi), got.Range, rows(lo, hi))
	if got.PointFiles != 1 || got.RangeFiles != 1 {
		t.Fatalf("%s scanned %d data files for offset %d and %d for offsets %d-%d of partition %d; want the one holding them",
			what, got.PointFiles, point, got.RangeFiles, lo, hi, part)
	}
	if got.PartitionFiles < 2 || got.PartitionFiles >= got.Files {
		t.Fatalf("%s scanned %d of the table's %d data files for partition %d; want its own only", what, got.PartitionFiles, got.Files, part)
	}
	if len(got.Snapshots) != 2 {
		t.Fatalf("%s: snapshots %+v; want one per tiering run", what, got.Snapshots)
	}
	var wantFirst []string
	for i, shard := range []string{"orders-0", "orders-1"} {
		n := len(c.first[shard])
		wantFirst = append(wantFirst, fmt.Sprint([]any{i, n, n - 1}))
		if w := fmt.Sprintf("0-%d", n-1); got.Snapshots[0].Offsets[fmt.Sprintf("strata.offsets.%d", i)] != w {
			t.Fatalf("%s: the first snapshot's offsets %v; want partition %d at %s", what, got.Snapshots[0].Offsets, i, w)
		}
	}
	var gotFirst []string
	for _, r := range got.First {
		gotFirst = append(gotFirst, fmt.Sprint(ints(r)))
	}
	if fmt.Sprint(gotFirst) != fmt.Sprint(wantFirst) {
		t.Fatalf("%s, VERSION AS OF %d (the first run's snapshot): %v; want %v", what, got.Snapshots[0].ID, gotFirst, wantFirst)
	}
}

// pyenv is the Python environment `scripts/pyenv NAME` makes.
func pyenv(t testing.TB, name string) string {
	root, _ := filepath.Abs("..")
	out, err := exec.Command(filepath.Join(root, "scripts", "pyenv"), name).Output()
	if err != nil {
		t.Fatalf("scripts/pyenv %s: %v", name, err)
	}
	return strings.TrimSpace(string(out))
}
