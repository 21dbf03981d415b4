package icetable

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"path"
	"path/filepath"
	"testing"

	"github.com/apache/arrow-go/v18/arrow/array"
	"github.com/apache/iceberg-go"
	"github.com/apache/iceberg-go/table"

	"strata/catalog/pebblecat"
	"strata/engine/record"
	"strata/engine/segment"
	"strata/engine/store"
	"strata/engine/store/storetest"
	"strata/parquet"
	"strata/tiering"
	"strata/tiering/objstore"
	"strata/tiering/objstore/local"
)

var quiet = slog.New(slog.NewTextHandler(io.Discard, nil))

// rig is a node's engine, catalog and tiering job over a local cold tier,
// wired as cmd wires them, with the job committing to the topics' tables.
type rig struct {
	engine *segment.Engine
	job    *tiering.Job
	tables *Tables
	bucket objstore.Bucket
	dir    string // the engine's, and the catalog's under it
}

func newRig(t testing.TB, bucket objstore.Bucket, coldDir string, configure ...func(*segment.Config)) *rig {
	return newRigOver(t, bucket, &Tables{Bucket: bucket, Prefix: "data", Location: coldDir, Log: quiet}, configure...)
}

// newRigOver is newRig committing to tables.
func newRigOver(t testing.TB, bucket objstore.Bucket, tables *Tables, configure ...func(*segment.Config)) *rig {
	dir := t.TempDir()
	cat, err := pebblecat.Open(filepath.Join(dir, "catalog"))
	if err != nil {
		t.Fatal(err)
	}
	cfg := segment.Config{Dir: dir, Workers: 2, MaxSegmentBytes: 16 << 10, RollCheckInterval: 10, Logger: quiet,
		Events: tiering.ListenTables(cat, bucket, "data", quiet, tables)}
	for _, c := range configure {
		c(&cfg)
	}
	e, err := segment.Open(cfg)
	if err != nil {
		cat.Close()
		t.Fatal(err)
	}
	t.Cleanup(func() { e.Close(); cat.Close() })
	job := &tiering.Job{Engine: e, Catalog: cat, Bucket: bucket, Prefix: "data", Log: quiet,
		Parquet: parquet.Options{RowGroupBytes: 4 << 10}, Tables: tables}
	return &rig{engine: e, job: job, tables: tables, bucket: bucket, dir: dir}
}

func localBucket(t testing.TB) (objstore.Bucket, string) {
	dir := t.TempDir()
	b, err := local.New(dir)
	if err != nil {
		t.Fatal(err)
	}
	return b, dir
}

// produce appends batches of 20 records to shard and returns them with
// their offsets.
func produce(t testing.TB, e *segment.Engine, shard string, batches, seed int) []record.Record {
	ctx := context.Background()
	if err := e.CreateShard(ctx, shard); err != nil && !errors.Is(err, store.ErrShardExists) {
		t.Fatal(err)
	}
	var all []record.Record
	for i := 0; i < batches; i++ {
		recs := storetest.Records(20, seed+i)
		base, err := e.Append(ctx, shard, append([]record.Record(nil), recs...))
		if err != nil {
			t.Fatal(err)
		}
		for j := range recs {
			recs[j].Offset = base + uint64(j)
		}
		all = append(all, recs...)
	}
	return all
}

// run runs the tiering job and returns, by shard, how many records are
// tiered in all.
func (r *rig) run(t testing.TB, tiered map[string]uint64) {
	t.Helper()
	sum, err := r.job.Run(context.Background())
	if err != nil || len(sum.Errors) > 0 {
		t.Fatalf("tiering run: %v %+v", err, sum.Errors)
	}
	for _, u := range append(sum.Uploaded, sum.Adopted...) {
		tiered[u.Shard] += u.Records
	}
}

type row struct {
	partition       int32
	offset          int64
	timestampMicros int64
	key, value      []byte
	headers         int
}

// scan reads the topic's current table with iceberg-go's own reader (the
// name mapping), one partition at a time: a filter on partition, which
// prunes data files by their partition values. It returns the rows by
// partition, in offset order. (iceberg-go v0.7 does not fill a column
// missing from the files from an identity partition's value, as the spec
// asks and pyiceberg, DuckDB and Spark do, so partition is not selected.)
func scan(t *testing.T, tables *Tables, topic string, partitions ...int32) (map[int32][]row, *table.Table) {
	t.Helper()
	ctx := context.Background()
	tbl, _, err := tables.load(ctx, topic)
	if err != nil {
		t.Fatal(err)
	}
	out := map[int32][]row{}
	for _, p := range partitions {
		scanPartition(t, tbl, p, out)
	}
	return out, tbl
}

func scanPartition(t *testing.T, tbl *table.Table, p int32, out map[int32][]row) {
	ctx := context.Background()
	sc := tbl.Scan(table.WithRowFilter(iceberg.EqualTo(iceberg.Reference(ColPartition), p)),
		table.WithSelectedFields(ColOffset, ColTimestamp, ColKey, ColHeaders, ColValue))
	tasks, err := sc.PlanFiles(ctx)
	if err != nil {
		t.Fatal(err)
	}
	for _, task := range tasks {
		if got := task.File.Partition()[1000]; got != p {
			t.Fatalf("a scan of partition %d planned %s, of partition %v", p, task.File.FilePath(), got)
		}
	}
	at, err := sc.ToArrowTable(ctx)
	if err != nil {
		t.Fatalf("scanning %s: %v", tbl.MetadataLocation(), err)
	}
	defer at.Release()
	tr := array.NewTableReader(at, 1024)
	defer tr.Release()
	for tr.Next() {
		rec := tr.RecordBatch()
		col := func(name string) int {
			idx := rec.Schema().FieldIndices(name)
			if len(idx) != 1 {
				t.Fatalf("the scan has no column %q: %v", name, rec.Schema())
			}
			return idx[0]
		}
		offs := rec.Column(col(ColOffset)).(*array.Int64)
		ts := rec.Column(col(ColTimestamp)).(*array.Timestamp)
		keys := rec.Column(col(ColKey)).(*array.Binary)
		vals := rec.Column(col(ColValue)).(*array.Binary)
		hdrs := rec.Column(col(ColHeaders)).(*array.List)
		for i := 0; i < int(rec.NumRows()); i++ {
			r := row{partition: p, offset: offs.Value(i), timestampMicros: int64(ts.Value(i))}
			if !keys.IsNull(i) {
				r.key = bytes.Clone(keys.Value(i))
			}
			if !vals.IsNull(i) {
				r.value = bytes.Clone(vals.Value(i))
			}
			s, e := hdrs.ValueOffsets(i)
			r.headers = int(e - s)
			out[r.partition] = append(out[r.partition], r)
		}
	}
	sortRows(out[p]) // files come back in no set order
}

func sortRows(rows []row) {
	for i := 1; i < len(rows); i++ {
		for j := i; j > 0 && rows[j].offset < rows[j-1].offset; j-- {
			rows[j], rows[j-1] = rows[j-1], rows[j]
		}
	}
}

// sameRecords fails unless the table's rows of a partition are exactly
// the records tiered: each offset once, none missing, the same bytes.
func sameRecords(t *testing.T, what string, got []row, want []record.Record) {
	t.Helper()
	if len(got) != len(want) {
		t.Fatalf("%s: the table has %d rows, %d records were tiered", what, len(got), len(want))
	}
	for i, r := range want {
		g := got[i]
		if g.offset != int64(r.Offset) || g.timestampMicros != r.Timestamp*1000 || !bytes.Equal(g.key, r.Key) ||
			(g.key == nil) != (r.Key == nil) || !bytes.Equal(g.value, r.Value) || (g.value == nil) != (r.Value == nil) ||
			g.headers != len(r.Headers) {
			t.Fatalf("%s: row %d is offset %d (ts %d, key %x, value %d bytes, %d headers); the record at offset %d has ts %d, key %x, value %d bytes, %d headers",
				what, i, g.offset, g.timestampMicros, g.key, len(g.value), g.headers, r.Offset, r.Timestamp*1000, r.Key, len(r.Value), len(r.Headers))
		}
	}
}

// A tiering run commits every tiered object to its topic's table, once: a
// run with nothing new adds no snapshot, the next run's objects come in a
// snapshot of their own, and iceberg-go's reader gets exactly the records
// tiered, partition from the data files' partition values.
func TestTieringCommitsToTheTopicsTable(t *testing.T) {
	bucket, dir := localBucket(t)
	r := newRig(t, bucket, dir)
	produced := map[string][]record.Record{
		"orders-0": produce(t, r.engine, "orders-0", 12, 0),
		"orders-1": produce(t, r.engine, "orders-1", 14, 100),
	}
	tiered := map[string]uint64{}
	r.run(t, tiered)
	check := func(snapshots int) {
		t.Helper()
		rows, tbl := scan(t, r.tables, "orders", 0, 1)
		for p, shard := range []string{"orders-0", "orders-1"} {
			if tiered[shard] == 0 || tiered[shard] >= uint64(len(produced[shard])) {
				t.Fatalf("%s: %d of %d records tiered; want all but the active segment", shard, tiered[shard], len(produced[shard]))
			}
			sameRecords(t, shard, rows[int32(p)], produced[shard][:tiered[shard]])
		}
		if n := len(tbl.Metadata().Snapshots()); n != snapshots {
			t.Fatalf("the table has %d snapshots, want %d", n, snapshots)
		}
		got, err := Committed(tbl.CurrentSnapshot().Summary.Properties)
		want := map[int32]Range{0: {0, tiered["orders-0"] - 1}, 1: {0, tiered["orders-1"] - 1}}
		if err != nil || fmt.Sprint(got) != fmt.Sprint(want) {
			t.Fatalf("the current snapshot's summary says %v (%v), want %v", got, err, want)
		}
	}
	check(1)
	r.run(t, tiered) // nothing new sealed
	check(1)
	produced["orders-1"] = append(produced["orders-1"], produce(t, r.engine, "orders-1", 14, 200)...)
	r.run(t, tiered)
	check(2)
}

// A run whose table commit fails still tiers its segments; the failure is
// the run's error at step "table", and the next run commits what the
// manifests list, whatever run tiered it.
func TestAFailedTableCommitIsTheNextRunsToDo(t *testing.T) {
	bucket, dir := localBucket(t)
	r := newRig(t, bucket, dir)
	produced := produce(t, r.engine, "orders-0", 14, 0)
	r.job.Tables = &Tables{Bucket: &dieAt{Bucket: bucket, op: objstore.OpUpload, step: func(b string) bool { return b != "" && path.Ext(b) == ".avro" }},
		Prefix: "data", Location: dir, Log: quiet}
	sum, err := r.job.Run(context.Background())
	if err != nil || len(sum.Uploaded) == 0 {
		t.Fatalf("run: %v, uploaded %v", err, sum.Uploaded)
	}
	if len(sum.Errors) != 1 || sum.Errors[0].Step != tiering.StepTable || !errors.Is(sum.Errors[0], errKilled) {
		t.Fatalf("the run's errors: %+v; want the table commit's", sum.Errors)
	}
	var tiered uint64
	for _, u := range sum.Uploaded {
		tiered += u.Records
	}
	r.job.Tables = r.tables
	r.run(t, map[string]uint64{})
	rows, _ := scan(t, r.tables, "orders", 0)
	sameRecords(t, "orders-0", rows[0], produced[:tiered])
}
