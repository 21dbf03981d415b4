// Package interop proves that what strata exports is read, exactly, by the
// tools analysts run: pyarrow (Arrow C++) and DuckDB from a local folder and
// MinIO, Spark and a Hive table from a local folder and HDFS.
package interop

import (
	"bytes"
	"context"
	"encoding/hex"
	"encoding/json"
	"fmt"
	"io"
	"log/slog"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"strata/engine/record"
	"strata/engine/segment"
	"strata/engine/store/storetest"
	"strata/internal/testsvc"
	"strata/parquet"
	"strata/tiering"
	"strata/tiering/objstore"
	"strata/tiering/objstore/hdfs"
	"strata/tiering/objstore/local"
	"strata/tiering/objstore/s3"
)

type exported struct {
	Offset      uint64      `json:"offset"`
	TimestampMs int64       `json:"timestamp_ms"`
	Key         *string     `json:"key"`
	Value       *string     `json:"value"`
	Headers     [][]*string `json:"headers"`
}

type report struct {
	Files   int                   `json:"files"`
	PyArrow map[string][]exported `json:"pyarrow"`
	DuckDB  [][]any               `json:"duckdb"`
}

func python(t *testing.T) string {
	root, _ := filepath.Abs("..")
	out, err := exec.Command(filepath.Join(root, "scripts", "pyenv")).Output()
	if err != nil {
		t.Fatalf("scripts/pyenv: %v", err)
	}
	return strings.TrimSpace(string(out))
}

// export produces two partitions through the engine and tiers every sealed
// segment into bucket, the way the service does. It returns what is in the
// bucket, by shard.
func export(t *testing.T, bucket objstore.Bucket) map[string][]record.Record {
	ctx := context.Background()
	e, err := segment.Open(segment.Config{Dir: t.TempDir(), Workers: 2, MaxSegmentBytes: 8 << 10, RollCheckInterval: 10,
		Logger: slog.New(slog.NewTextHandler(io.Discard, nil))})
	if err != nil {
		t.Fatal(err)
	}
	defer e.Close()
	want := map[string][]record.Record{}
	for _, shard := range []string{"orders-0", "orders-1"} {
		e.CreateShard(ctx, shard)
		for i := 0; i < 25; i++ {
			recs := storetest.Records(12, i)
			base, err := e.Append(ctx, shard, append([]record.Record(nil), recs...))
			if err != nil {
				t.Fatal(err)
			}
			for j := range recs {
				recs[j].Offset = base + uint64(j)
			}
			want[shard] = append(want[shard], recs...)
		}
	}
	job := &tiering.Job{Engine: e, Catalog: e.Catalog(), Bucket: bucket, Prefix: "export",
		Parquet: parquet.Options{RowGroupBytes: 4 << 10}, Log: slog.New(slog.NewTextHandler(io.Discard, nil))}
	if sum, err := job.Run(ctx); err != nil || len(sum.Errors) > 0 || len(sum.Uploaded) == 0 {
		t.Fatalf("tiering: %v %v", err, sum)
	}
	for shard := range want { // only sealed segments were exported
		segs, _ := e.Catalog().Segments(shard)
		want[shard] = want[shard][:segs[len(segs)-1].StartOffset]
	}
	return want
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

func eq(a, b *string) bool { return (a == nil) == (b == nil) && (a == nil || *a == *b) }

func run(t *testing.T, args ...string) report {
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Minute)
	defer cancel()
	cmd := exec.CommandContext(ctx, python(t), append([]string{"check.py"}, args...)...)
	var stderr bytes.Buffer
	cmd.Stderr = &stderr
	out, err := cmd.Output()
	if err != nil {
		t.Fatalf("check.py %s: %v\n%s", args[0], err, stderr.String())
	}
	var rep report
	if err := json.Unmarshal(out, &rep); err != nil {
		t.Fatalf("check.py output: %v\n%s", err, out)
	}
	return rep
}

func TestPyArrowAndDuckDBReadTheLocalExport(t *testing.T) {
	dir := t.TempDir()
	b, err := local.New(dir)
	if err != nil {
		t.Fatal(err)
	}
	want := export(t, b)
	rep := run(t, "local", filepath.Join(dir, "export"))
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
}

func TestPyArrowReadsTheMinIOExport(t *testing.T) {
	m := testsvc.StartMinIO(t)
	bucket := m.Bucket(t, "strata-interop")
	prefix := testsvc.UniquePrefix(t)
	b, err := s3.New(s3.Config{Endpoint: m.Endpoint, Bucket: bucket, Prefix: prefix, AccessKey: m.AccessKey, SecretKey: m.SecretKey})
	if err != nil {
		t.Fatal(err)
	}
	want := export(t, b)
	rep := run(t, "s3", m.Endpoint, m.AccessKey, m.SecretKey, bucket+"/"+prefix+"/export")
	compare(t, "pyarrow over S3", rep.PyArrow, want)
}

// Spark (local mode, Java 17) reads the export from a local folder and from
// HDFS, finds topic and partition in the path, and answers an aggregate; the
// Hive DDL strata prints makes a table MSCK REPAIR TABLE fills.
func TestSparkAndHiveReadTheExport(t *testing.T) {
	for _, backend := range []string{"local", "hdfs"} {
		t.Run(backend, func(t *testing.T) {
			var b objstore.Bucket
			var root string
			switch backend {
			case "local":
				dir := t.TempDir()
				lb, err := local.New(dir)
				if err != nil {
					t.Fatal(err)
				}
				b, root = lb, "file://"+filepath.Join(dir, "export")
			case "hdfs":
				nn := testsvc.StartHDFS(t)
				prefix := "/" + testsvc.UniquePrefix(t)
				hb, err := hdfs.New(hdfs.Config{NameNodes: []string{nn}, Root: prefix})
				if err != nil {
					t.Fatal(err)
				}
				b, root = hb, "hdfs://"+nn+prefix+"/export"
			}
			want := export(t, b)
			work := t.TempDir()
			ddl := filepath.Join(work, "orders.sql")
			os.WriteFile(ddl, []byte(parquet.HiveDDL("orders", root+"/topic=orders")), 0o644)
			ctx, cancel := context.WithTimeout(context.Background(), 5*time.Minute)
			defer cancel()
			cmd := exec.CommandContext(ctx, python(t), "spark_check.py", root, root+"/topic=orders", ddl, work)
			cmd.Env = append(os.Environ(), "PYSPARK_PYTHON="+python(t), "SPARK_LOCAL_IP=127.0.0.1")
			var stderr bytes.Buffer
			cmd.Stderr = &stderr
			out, err := cmd.Output()
			if err != nil {
				t.Fatalf("spark: %v\n%s", err, stderr.String())
			}
			lines := strings.Split(strings.TrimSpace(string(out)), "\n")
			var got struct {
				Columns []string `json:"columns"`
				Scan    [][]any  `json:"scan"`
				Hive    [][]any  `json:"hive"`
			}
			if err := json.Unmarshal([]byte(lines[len(lines)-1]), &got); err != nil {
				t.Fatalf("spark output: %v\n%s", err, out)
			}
			if strings.Join(got.Columns, ",") != "offset,timestamp,key,value,headers,tags,protocol_data,topic,partition" {
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
