// Package interop proves that what strata exports is read, exactly, by the
// tools analysts run: pyarrow (Arrow C++) and DuckDB from a local folder and
// MinIO, Spark and a Hive table from a local folder, HDFS and MinIO over
// s3a://; and Spark's Kafka source reads the same records through the
// Kafka API, hot and cold offsets in one query. The data goes the way a
// user's does: franz-go produces to `strata serve`, whose tiering job
// writes the cold tier.
package interop

import (
	"bytes"
	"context"
	"encoding/hex"
	"encoding/json"
	"fmt"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"strata/engine/record"
	"strata/engine/store/storetest"
	"strata/internal/testsvc"
	"strata/tiering"

	"github.com/twmb/franz-go/pkg/kgo"
)

type exported struct {
	Offset      uint64      `json:"offset"`
	TimestampMs int64       `json:"timestamp_ms"`
	Key         *string     `json:"key"`
	Value       *string     `json:"value"`
	Headers     [][]*string `json:"headers"`
}

type report struct {
	Files       int                   `json:"files"`
	PyArrow     map[string][]exported `json:"pyarrow"`
	DuckDB      [][]any               `json:"duckdb"`
	DuckDBRange [][]any               `json:"duckdb_range"`
}

func python(t *testing.T) string {
	root, _ := filepath.Abs("..")
	out, err := exec.Command(filepath.Join(root, "scripts", "pyenv")).Output()
	if err != nil {
		t.Fatalf("scripts/pyenv: %v", err)
	}
	return strings.TrimSpace(string(out))
}

// jars resolves scripts/NAME/pom.xml with Maven and returns its jars,
// comma-separated, the way spark.jars wants them.
func jars(t testing.TB, name string) string {
	root, _ := filepath.Abs("..")
	ctx, cancel := context.WithTimeout(context.Background(), 15*time.Minute) // the first run downloads the AWS SDK
	defer cancel()
	cmd := exec.CommandContext(ctx, filepath.Join(root, "scripts", "jars"), name)
	var stderr bytes.Buffer
	cmd.Stderr = &stderr
	out, err := cmd.Output()
	if err != nil {
		t.Fatalf("scripts/jars %s: %v\n%s", name, err, stderr.String())
	}
	return strings.ReplaceAll(strings.TrimSpace(string(out)), ":", ",")
}

var strataBin string

// TestMain builds the strata binary once: every export goes through the
// service a user runs.
func TestMain(m *testing.M) { os.Exit(testsvc.RunWithStrata(m, &strataBin)) }

// export serves strata on the cold tier given, produces two partitions of
// topic orders with franz-go (keys, null keys and values, headers,
// timestamps), and runs tiering through the admin API. It returns what was
// produced and exported, by shard: everything up to the active segment.
func export(t *testing.T, cold ...string) map[string][]record.Record {
	return exportRounds(t, 25, cold...)
}

// exportRounds is export producing the rounds given (12 records to each
// partition a round); settings in cold override export's.
func exportRounds(t *testing.T, rounds int, cold ...string) map[string][]record.Record {
	return (&exporter{srv: serveForExport(t, cold...)}).export(t, rounds)
}

// exportServed is exportRounds, also returning the service (still up
// until the test ends).
func exportServed(t *testing.T, rounds int, cold ...string) (map[string][]record.Record, testsvc.Strata) {
	e := &exporter{srv: serveForExport(t, cold...)}
	return e.export(t, rounds), e.srv
}

// serveForExport serves strata as export does, with settings in cold over
// its own.
func serveForExport(t testing.TB, cold ...string) testsvc.Strata {
	return testsvc.ServeStrata(t, strataBin, append([]string{"kafka.default_partitions=2",
		"segment.max_bytes=8KiB", "segment.roll_check_interval=10",
		"tiering.schedule=@every 1h", "tiering.min_sealed_age=0s"}, cold...)...)
}

// exporter produces to a strata serve and tiers, round after round.
type exporter struct {
	srv   testsvc.Strata
	token string // the admin token, if set
	// rounds produced so far; what, by shard; how many records tiered
	rounds   int
	produced map[string][]record.Record
	tiered   map[string]uint64
}

// export produces the rounds given after those of earlier calls and runs
// tiering through the admin API. It returns every record tiered so far, by
// shard: all but the active segment.
func (e *exporter) export(t testing.TB, rounds int) map[string][]record.Record {
	if e.produced == nil {
		e.produced, e.tiered = map[string][]record.Record{}, map[string]uint64{}
	}
	srv, token, first, produced := e.srv, e.token, e.rounds, e.produced
	e.rounds += rounds
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Minute)
	defer cancel()
	c, err := kgo.NewClient(kgo.SeedBrokers(srv.Kafka), kgo.AllowAutoTopicCreation(),
		kgo.RecordPartitioner(kgo.ManualPartitioner()), kgo.RequiredAcks(kgo.AllISRAcks()))
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	for round := first; round < first+rounds; round++ { // one batch per round and partition: segments roll between them
		for p := int32(0); p < 2; p++ {
			recs := storetest.Records(12, round*2+int(p))
			var batch []*kgo.Record
			for _, r := range recs {
				kr := &kgo.Record{Topic: "orders", Partition: p, Key: r.Key, Value: r.Value, Timestamp: time.UnixMilli(r.Timestamp)}
				for _, h := range r.Headers {
					kr.Headers = append(kr.Headers, kgo.RecordHeader{Key: h.Key, Value: h.Value})
				}
				batch = append(batch, kr)
			}
			if err := c.ProduceSync(ctx, batch...).FirstErr(); err != nil {
				t.Fatalf("produce to orders-%d: %v", p, err)
			}
			shard := fmt.Sprintf("orders-%d", p)
			for i, kr := range batch {
				r := recs[i]
				r.Offset, r.Tags, r.ProtocolData = uint64(kr.Offset), nil, nil
				produced[shard] = append(produced[shard], r)
			}
		}
	}
	req, _ := http.NewRequestWithContext(ctx, http.MethodPost, "http://"+srv.Admin+"/v1/tiering/run", nil)
	if token != "" {
		req.Header.Set("Authorization", "Bearer "+token)
	}
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	var sum tiering.RunSummary
	if err := json.NewDecoder(resp.Body).Decode(&sum); err != nil || resp.StatusCode != http.StatusOK || len(sum.Errors) > 0 {
		t.Fatalf("POST /v1/tiering/run: %d %v %+v", resp.StatusCode, err, sum)
	}
	for _, u := range sum.Uploaded {
		e.tiered[u.Shard] += u.Records
	}
	out := map[string][]record.Record{}
	for shard, recs := range produced {
		n := e.tiered[shard]
		if n == 0 || n >= uint64(len(recs)) {
			t.Fatalf("tiering exported %d of the %d records of %s; want all but the active segment", n, len(recs), shard)
		}
		out[shard] = recs[:n]
	}
	return out
}

// minioCold is the service's cold-tier settings for a MinIO bucket.
func minioCold(m testsvc.MinIO, bucket, prefix string) []string {
	return []string{"cold.backend=s3", "cold.s3.endpoint=" + m.Endpoint, "cold.s3.bucket=" + bucket,
		"cold.s3.prefix=" + prefix, "cold.s3.access_key=" + m.AccessKey, "cold.s3.secret_key=" + m.SecretKey,
		"cold.s3.tls=false", "cold.s3.addressing=path"}
}

func hexOrNil(b []byte) *string {
	if b == nil {
		return nil
	}
	s := hex.EncodeToString(b)
	return &s
}

func compare(t *testing.T, tool string, got map[string][]exported, want map[string][]record.Record) {
	for shard, recs := range want {
		g := got[shard]
		if len(g) != len(recs) {
			t.Fatalf("%s read %d records of %s, %d were exported", tool, len(g), shard, len(recs))
		}
		for i, r := range recs {
			e := g[i]
			same := e.Offset == r.Offset && e.TimestampMs == r.Timestamp &&
				eq(e.Key, hexOrNil(r.Key)) && eq(e.Value, hexOrNil(r.Value)) &&
				len(e.Headers) == len(r.Headers)
			for h := 0; same && h < len(r.Headers); h++ {
				same = *e.Headers[h][0] == r.Headers[h].Key && eq(e.Headers[h][1], hexOrNil(r.Headers[h].Value))
			}
			if !same {
				t.Fatalf("%s: %s offset %d differs from what was produced:\n read %+v\n made %+v", tool, shard, r.Offset, e, r)
			}
		}
	}
}

// hexAny is b as the scripts print it: hex, or null.
func hexAny(b []byte) any {
	if b == nil {
		return nil
	}
	return hex.EncodeToString(b)
}

func eq(a, b *string) bool { return (a == nil) == (b == nil) && (a == nil || *a == *b) }

func run(t *testing.T, args ...string) report {
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Minute)
	defer cancel()
	var rep report
	checkJSON(t, exec.CommandContext(ctx, python(t), append([]string{"check.py"}, args...)...), &rep)
	return rep
}

// checkJSON runs a reader's check script and decodes the last line it
// prints (readers such as Spark may print their own lines before it) into
// got; a failed run fails the test with the script's stderr.
func checkJSON(t testing.TB, cmd *exec.Cmd, got any) {
	t.Helper()
	var stderr bytes.Buffer
	cmd.Stderr = &stderr
	out, err := cmd.Output()
	if err != nil {
		t.Fatalf("%s: %v\n%s", filepath.Base(cmd.Args[1]), err, stderr.String())
	}
	lines := strings.Split(strings.TrimSpace(string(out)), "\n")
	if err := json.Unmarshal([]byte(lines[len(lines)-1]), got); err != nil {
		t.Fatalf("%s output: %v\n%s", filepath.Base(cmd.Args[1]), err, out)
	}
}

// smallPages makes every column chunk of the export several pages (the
// smallest page the config allows), so that readers filtering by the
// column and offset index skip some.
const smallPages = "tiering.page_bytes=1KiB"

// pyarrow reads every record of the local export back, and DuckDB answers
// an aggregate and a range filter on timestamp (which skips row groups by
// their statistics) with exactly the records produced.
func TestPyArrowAndDuckDBReadTheLocalExport(t *testing.T) {
	dir := t.TempDir()
	want := export(t, "cold.local.dir="+dir, smallPages)
	// A timestamp range over a third of orders-0's rounds, which the
	// rounds of orders-1 interleave with.
	recs0 := want["orders-0"]
	from, to := recs0[len(recs0)/3].Timestamp, recs0[len(recs0)/2].Timestamp
	rep := run(t, "local", dir, fmt.Sprint(from), fmt.Sprint(to))
	compare(t, "pyarrow", rep.PyArrow, want)
	if len(rep.DuckDB) != 2 {
		t.Fatalf("DuckDB found %d topic-partitions: %v", len(rep.DuckDB), rep.DuckDB)
	}
	for i, shard := range []string{"orders-0", "orders-1"} {
		row, recs := rep.DuckDB[i], want[shard]
		minTS, maxTS := recs[0].Timestamp, recs[0].Timestamp
		for _, r := range recs {
			minTS, maxTS = min(minTS, r.Timestamp), max(maxTS, r.Timestamp)
		}
		for j, v := range row { // JSON numbers arrive as float64; these are integers
			if f, ok := v.(float64); ok {
				row[j] = int64(f)
			}
		}
		wantRow := fmt.Sprint([]any{"orders", i, len(recs), 0, len(recs) - 1, minTS, maxTS})
		if fmt.Sprint(row) != wantRow {
			t.Fatalf("DuckDB with hive_partitioning: %v, want %v", row, wantRow)
		}
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
	sameRows(t, fmt.Sprintf("DuckDB, timestamp %d-%d", from, to), rep.DuckDBRange, inRange)
}

// sameRows compares rows a script printed as JSON with those expected.
func sameRows(t *testing.T, what string, got, want [][]any) {
	t.Helper()
	for i := 0; i < max(len(got), len(want)); i++ {
		var g, w string
		if i < len(got) {
			g = fmt.Sprint(ints(got[i]))
		}
		if i < len(want) {
			w = fmt.Sprint(want[i])
		}
		if g != w {
			t.Fatalf("%s: %d rows, want %d; row %d is %s, want %s", what, len(got), len(want), i, g, w)
		}
	}
}

func TestPyArrowReadsTheMinIOExport(t *testing.T) {
	m := testsvc.StartMinIO(t)
	bucket := m.Bucket(t, "strata-interop")
	prefix := testsvc.UniquePrefix(t)
	want := export(t, minioCold(m, bucket, prefix)...)
	rep := run(t, "s3", m.Endpoint, m.AccessKey, m.SecretKey, bucket+"/"+prefix)
	compare(t, "pyarrow over S3", rep.PyArrow, want)
}

// Spark (local mode, Java 17) reads the export from a local folder, from
// HDFS and from MinIO over s3a://, finds topic and partition in the path,
// answers an aggregate, and returns exactly the records of a point and a
// range filter on offset, which skip row groups and pages by the
// statistics and page index; the Hive DDL strata prints makes a table
// MSCK REPAIR TABLE fills.
func TestSparkAndHiveReadTheExport(t *testing.T) {
	for _, backend := range []string{"local", "hdfs", "s3a"} {
		t.Run(backend, func(t *testing.T) {
			var cold []string
			var root string
			env := append(os.Environ(), "PYSPARK_PYTHON="+python(t), "SPARK_LOCAL_IP=127.0.0.1")
			switch backend {
			case "local":
				dir := t.TempDir()
				cold, root = []string{"cold.local.dir=" + dir}, "file://"+dir
			case "hdfs":
				nn := testsvc.StartHDFS(t)
				prefix := "/" + testsvc.UniquePrefix(t)
				cold = []string{"cold.backend=hdfs", "cold.hdfs.namenodes=[" + nn + "]", "cold.hdfs.root=" + prefix}
				root = "hdfs://" + nn + prefix
			case "s3a":
				m := testsvc.StartMinIO(t)
				bucket := m.Bucket(t, "strata-interop")
				prefix := testsvc.UniquePrefix(t)
				cold, root = minioCold(m, bucket, prefix), "s3a://"+bucket+"/"+prefix
				env = append(env, "S3A_JARS="+jars(t, "s3a"), "S3_ENDPOINT="+m.Endpoint,
					"S3_ACCESS_KEY="+m.AccessKey, "S3_SECRET_KEY="+m.SecretKey)
			}
			// Segments (so objects) of about 400 records, 1 KiB pages: the
			// offset column of an object is several pages, so parquet-mr's
			// column index filter skips pages of it, and reads of the other
			// columns' pages by the offset index.
			want := exportRounds(t, 100, append(cold, smallPages, "segment.max_bytes=40KiB")...)
			// A point and a range of offsets, the range across pages.
			n := min(len(want["orders-0"]), len(want["orders-1"]))
			point, lo, hi := n/2, n/4, min(n/4+70, n-1)
			work := t.TempDir()
			// The table statement comes from the command a user runs.
			ddl, err := exec.Command(strataBin, "catalog", "ddl", "--topic", "orders", "--location", root+"/topic=orders").Output()
			if err != nil {
				t.Fatalf("strata catalog ddl: %v", err)
			}
			ddlFile := filepath.Join(work, "orders.sql")
			os.WriteFile(ddlFile, ddl, 0o644)
			ctx, cancel := context.WithTimeout(context.Background(), 5*time.Minute)
			defer cancel()
			cmd := exec.CommandContext(ctx, python(t), "spark_check.py", root, root+"/topic=orders", ddlFile, work,
				fmt.Sprint(point), fmt.Sprint(lo), fmt.Sprint(hi))
			cmd.Env = env
			var got struct {
				Columns []string `json:"columns"`
				Scan    [][]any  `json:"scan"`
				Hive    [][]any  `json:"hive"`
				Point   [][]any  `json:"point"`
				Range   [][]any  `json:"range"`
			}
			checkJSON(t, cmd, &got)
			if strings.Join(got.Columns, ",") != "offset,timestamp,key,headers,tags,protocol_data,value,topic,partition" { // format 2: value last
				t.Fatalf("Spark's columns: %v", got.Columns)
			}
			for i, shard := range []string{"orders-0", "orders-1"} {
				recs := want[shard]
				valueBytes := 0
				for _, r := range recs {
					valueBytes += len(r.Value)
				}
				wantScan := fmt.Sprint([]any{"orders", i, len(recs), 0, len(recs) - 1, valueBytes})
				if g := fmt.Sprint(ints(got.Scan[i])); g != wantScan {
					t.Fatalf("Spark aggregate for %s: %v, want %v", shard, g, wantScan)
				}
				wantHive := fmt.Sprint([]any{i, len(recs), len(recs) - 1})
				if g := fmt.Sprint(ints(got.Hive[i])); g != wantHive {
					t.Fatalf("Hive table for %s: %v, want %v", shard, g, wantHive)
				}
			}
			// Offsets start at 0 in each partition: the rows at [lo, hi] are
			// the records of those indexes.
			rows := func(from, to int) [][]any {
				var out [][]any
				for i, shard := range []string{"orders-0", "orders-1"} {
					for _, r := range want[shard][from : to+1] {
						out = append(out, []any{i, r.Offset, r.Timestamp, hexAny(r.Key), hexAny(r.Value)})
					}
				}
				return out
			}
			sameRows(t, fmt.Sprintf("Spark, offset = %d", point), got.Point, rows(point, point))
			sameRows(t, fmt.Sprintf("Spark, offset %d-%d", lo, hi), got.Range, rows(lo, hi))
		})
	}
}

// ints turns JSON numbers (float64) into integers for comparison.
func ints(row []any) []any {
	out := make([]any, len(row))
	for i, v := range row {
		if f, ok := v.(float64); ok {
			v = int64(f)
		}
		out[i] = v
	}
	return out
}
