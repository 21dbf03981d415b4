package interop

import (
	"context"
	"fmt"
	"os/exec"
	"testing"
	"time"

	"strata/bench"
)

// Spark's scan of a topic's Iceberg table (through strata's REST catalog)
// beside the same Spark scan of the Hive layout over the same objects
// (spark.read.parquet with partition discovery), every column aggregated
// so neither answers from metadata; and a point query on offset through
// each: the files and bytes it read. The table prunes by the manifests'
// offset bounds to one file; the Hive layout by the partition folder only.
func BenchmarkSparkScan(b *testing.B) {
	dir := b.TempDir()
	token := "bench-s3cret"
	// 1MiB segments: objects of the size tiering makes of a busy topic's.
	srv := serveForExport(b, "cold.local.dir="+dir, "segment.max_bytes=1MiB", "iceberg.enabled=true", "admin_token="+token)
	e := &exporter{srv: srv, token: token}
	recs := e.export(b, 12000) // 288,000 records
	n := len(recs["orders-0"]) + len(recs["orders-1"])
	point := len(recs["orders-1"]) / 2
	const runs = 5
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Minute)
	defer cancel()
	py := pyenv(b, "icespark")
	cmd := exec.CommandContext(ctx, py, "icespark_bench.py", "http://"+srv.Admin+"/iceberg", token, jars(b, "icespark"),
		"file://"+dir, "1", fmt.Sprint(point), fmt.Sprint(runs))
	cmd.Env = append(cmd.Environ(), "PYSPARK_PYTHON="+py, "SPARK_LOCAL_IP=127.0.0.1")
	var got struct {
		Records        int      `json:"records"`
		SameAnswer     bool     `json:"same_answer"`
		IcebergSeconds float64  `json:"iceberg_scan_seconds"`
		HiveSeconds    float64  `json:"hive_scan_seconds"`
		IcebergRows    int      `json:"iceberg_point_rows"`
		HiveRows       int      `json:"hive_point_rows"`
		IcebergFiles   float64  `json:"iceberg_point_files"`
		HiveFiles      float64  `json:"hive_point_files"`
		IcebergBytes   float64  `json:"iceberg_point_bytes"`
		HiveBytes      float64  `json:"hive_point_bytes"`
		IcebergMetrics []string `json:"iceberg_metrics"`
		HiveMetrics    []string `json:"hive_metrics"`
	}
	checkJSON(b, cmd, &got)
	if !got.SameAnswer || got.Records != n || got.IcebergRows != 1 || got.HiveRows != 1 {
		b.Fatalf("the scans disagree: %+v; %d records were tiered", got, n)
	}
	if got.IcebergFiles < 0 || got.HiveFiles < 0 {
		b.Fatalf("the point query's file counts are not in the scans' metrics: Iceberg %v, Hive layout %v", got.IcebergMetrics, got.HiveMetrics)
	}
	const cmdline = "make bench (go test -bench SparkScan ./interop)"
	mrecs := float64(got.Records) / 1e6
	bench.Must(b, cmdline, bench.Figure{Name: "Spark scan of the Iceberg table", Value: mrecs / got.IcebergSeconds, Unit: "Mrec/s",
		Reference: "the same scan of the Hive layout", ReferenceValue: mrecs / got.HiveSeconds, Target: ">= 0.95", Runs: runs})
	bench.Must(b, cmdline, bench.Figure{Name: "Spark point query on offset: files read", Value: got.IcebergFiles, Unit: "files",
		Reference: "the Hive layout's", ReferenceValue: got.HiveFiles, Runs: 1})
	if got.IcebergBytes >= 0 && got.HiveBytes >= 0 {
		bench.Must(b, cmdline, bench.Figure{Name: "Spark point query on offset: bytes of files read", Value: got.IcebergBytes / 1e6, Unit: "MB",
			Reference: "the Hive layout's", ReferenceValue: got.HiveBytes / 1e6, Runs: 1})
	}
}
