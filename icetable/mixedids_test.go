package icetable

import (
	"bytes"
	"context"
	"encoding/binary"
	"encoding/hex"
	"encoding/json"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
	"time"

	pq "github.com/parquet-go/parquet-go"
	"github.com/parquet-go/parquet-go/encoding/thrift"
	"github.com/parquet-go/parquet-go/format"

	"strata/engine/record"
	"strata/tiering"
)

// stripFieldIDs rewrites a tiered object's footer without field ids, as
// objects tiered before strata wrote them are, keeping its size (the
// shard's manifest and the table's data file give it): a key-value entry
// pads the footer to its old length.
func stripFieldIDs(t *testing.T, path string) {
	t.Helper()
	data, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	n := len(data)
	footerLen := int(binary.LittleEndian.Uint32(data[n-8 : n-4]))
	footer := data[n-8-footerLen : n-8]
	var md format.FileMetaData
	if err := thrift.Unmarshal(&thrift.CompactProtocol{}, footer, &md); err != nil {
		t.Fatal(err)
	}
	ids := 0
	for i := range md.Schema {
		if md.Schema[i].FieldID != 0 {
			ids++
		}
		md.Schema[i].FieldID = 0 // optional: not written
	}
	if ids < 10 {
		t.Fatalf("%s carries %d field ids; want the new objects' ids to strip", path, ids)
	}
	kv := md.KeyValueMetadata
	var out []byte
	for pad := 0; pad < 64; pad++ {
		md.KeyValueMetadata = append(kv[:len(kv):len(kv)], format.KeyValue{Key: "test.pad", Value: strings.Repeat(" ", pad)})
		if out, err = thrift.Marshal(&thrift.CompactProtocol{}, &md); err != nil {
			t.Fatal(err)
		}
		if len(out) == footerLen {
			break
		}
	}
	if len(out) != footerLen {
		t.Fatalf("%s: no padding makes the footer without ids %d bytes long", path, footerLen)
	}
	rewritten := append(append(bytes.Clone(data[:n-8-footerLen]), out...), data[n-8:]...)
	if err := os.WriteFile(path, rewritten, 0o644); err != nil {
		t.Fatal(err)
	}
}

// fieldIDsOf is every field id in an object's Parquet schema, 0 where a
// field has none.
func fieldIDsOf(t *testing.T, path string) []int {
	t.Helper()
	f, err := os.Open(path)
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	st, _ := f.Stat()
	pf, err := pq.OpenFile(f, st.Size())
	if err != nil {
		t.Fatalf("%s: %v", path, err)
	}
	var ids []int
	var walk func(fields []pq.Field)
	walk = func(fields []pq.Field) {
		for _, fl := range fields {
			if fl.Name() != "list" { // Parquet's list level, no id in Iceberg
				ids = append(ids, fl.ID())
			}
			walk(fl.Fields())
		}
	}
	walk(pf.Schema().Fields())
	return ids
}

type readRecord struct {
	Offset      uint64      `json:"offset"`
	TimestampMs int64       `json:"timestamp_ms"`
	Key         *string     `json:"key"`
	Value       *string     `json:"value"`
	Headers     [][]*string `json:"headers"`
}

func hexOf(b []byte) *string {
	if b == nil {
		return nil
	}
	s := hex.EncodeToString(b)
	return &s
}

func sameHex(a, b *string) bool { return (a == nil) == (b == nil) && (a == nil || *a == *b) }

// sameRead fails unless a reader read exactly the records want, in order.
func sameRead(t *testing.T, what string, got []readRecord, want []record.Record) {
	t.Helper()
	if len(got) != len(want) {
		t.Fatalf("%s: %d records read, %d produced and tiered", what, len(got), len(want))
	}
	for i, r := range want {
		g := got[i]
		same := g.Offset == r.Offset && g.TimestampMs == r.Timestamp && sameHex(g.Key, hexOf(r.Key)) &&
			sameHex(g.Value, hexOf(r.Value)) && len(g.Headers) == len(r.Headers)
		for h := 0; same && h < len(r.Headers); h++ {
			same = g.Headers[h][0] != nil && *g.Headers[h][0] == r.Headers[h].Key && sameHex(g.Headers[h][1], hexOf(r.Headers[h].Value))
		}
		if !same {
			t.Fatalf("%s: record %d read as %+v; produced offset %d, timestamp %d, key %x, value %d bytes, %d headers",
				what, i, g, r.Offset, r.Timestamp, r.Key, len(r.Value), len(r.Headers))
		}
	}
}

// One table over objects with Iceberg field ids and objects without
// (tiered before strata wrote them; the table's name mapping maps their
// column names to the same ids), in one partition and across partitions:
// pyiceberg and DuckDB's iceberg extension read exactly the records
// produced, each from whichever kind of object holds it, and their
// filters on partition, offset and time find the same records in both.
func TestReadersMixObjectsWithAndWithoutFieldIDs(t *testing.T) {
	ctx := context.Background()
	raw, dir := localBucket(t)
	r := newRig(t, raw, dir)
	r.job.Tables = nil // tiered before the tables: ids stripped below
	produced := map[string][]record.Record{
		"orders-0": produce(t, r.engine, "orders-0", 20, 0),
		"orders-1": produce(t, r.engine, "orders-1", 20, 100),
	}
	r.run(t, map[string]uint64{})
	var without []string
	var boundary uint64 // partition 0's first offset in an object with ids
	for _, shard := range []string{"orders-0", "orders-1"} {
		loc, _ := tiering.LocationOf(shard)
		m, err := tiering.ReadManifest(ctx, raw, loc.ManifestKey("data"))
		if err != nil || len(m.Objects) == 0 {
			t.Fatalf("%s's manifest: %v, %d objects", shard, err, len(m.Objects))
		}
		for _, o := range m.Objects {
			stripFieldIDs(t, filepath.Join(dir, o.Key))
			without = append(without, o.Key)
			if shard == "orders-0" {
				boundary = o.EndOffset + 1
			}
		}
	}
	// Then strata writes ids: the next objects carry them.
	produced["orders-0"] = append(produced["orders-0"], produce(t, r.engine, "orders-0", 20, 200)...)
	produced["orders-1"] = append(produced["orders-1"], produce(t, r.engine, "orders-1", 20, 300)...)
	r.job.Tables = r.tables
	tiered := map[string]uint64{}
	r.run(t, tiered) // the objects before, and the new ones, in one table
	files := liveFiles(t, r.tables, "orders")
	withIDs, withoutIDs := 0, 0
	for f := range files {
		ids := fieldIDsOf(t, strings.TrimPrefix(f, "file://"))
		none, all := true, true
		for _, id := range ids {
			none, all = none && id == 0, all && id != 0
		}
		switch {
		case all:
			withIDs++
		case none:
			withoutIDs++
		default:
			t.Fatalf("%s has some field ids and not others: %v", f, ids)
		}
	}
	if withIDs < 2 || withoutIDs != len(without) {
		t.Fatalf("the table names %d objects with field ids and %d without (%d stripped); want both kinds", withIDs, withoutIDs, len(without))
	}
	tbl, _, err := r.tables.load(ctx, "orders")
	if err != nil {
		t.Fatal(err)
	}
	if tbl.Properties().Get("schema.name-mapping.default", "") == "" {
		t.Fatal("the table has no name mapping")
	}
	// Every record is tiered but the active segments': what the readers get.
	want := map[string][]record.Record{}
	for _, shard := range []string{"orders-0", "orders-1"} {
		m, err := tiering.ReadManifest(ctx, raw, fmt.Sprintf("data/topic=orders/partition=%s/_strata_manifest.json", shard[len(shard)-1:]))
		if err != nil {
			t.Fatal(err)
		}
		last := m.Objects[len(m.Objects)-1].EndOffset
		want[shard] = produced[shard][:last+1]
	}

	// Partition 0's offsets across its last object without ids and its
	// first with them.
	lo, hi := boundary-5, boundary+5
	from, to := want["orders-0"][len(want["orders-0"])/4].Timestamp, want["orders-0"][3*len(want["orders-0"])/4].Timestamp

	root, _ := filepath.Abs("..")
	out, err := exec.Command(filepath.Join(root, "scripts", "pyenv"), "iceberg").Output()
	if err != nil {
		t.Fatalf("scripts/pyenv iceberg: %v", err)
	}
	runCtx, cancel := context.WithTimeout(ctx, 5*time.Minute)
	defer cancel()
	cmd := exec.CommandContext(runCtx, strings.TrimSpace(string(out)), filepath.Join(root, "interop", "iceberg_check.py"), "local",
		filepath.Join(dir, r.tables.Dir("orders")), "0", fmt.Sprint(lo), fmt.Sprint(hi), fmt.Sprint(from), fmt.Sprint(to))
	var stderr bytes.Buffer
	cmd.Stderr = &stderr
	raw2, err := cmd.Output()
	if err != nil {
		t.Fatalf("iceberg_check.py: %v\n%s", err, stderr.String())
	}
	var got struct {
		PyIceberg      map[string][]readRecord `json:"pyiceberg"`
		PyIcebergRange [][]uint64              `json:"pyiceberg_range"`
		DuckDB         map[string][]readRecord `json:"duckdb"`
		DuckDBRange    [][]int64               `json:"duckdb_range"`
	}
	lines := strings.Split(strings.TrimSpace(string(raw2)), "\n")
	if err := json.Unmarshal([]byte(lines[len(lines)-1]), &got); err != nil {
		t.Fatalf("iceberg_check.py output: %v\n%s", err, raw2)
	}
	for tool, recs := range map[string]map[string][]readRecord{"pyiceberg": got.PyIceberg, "DuckDB iceberg_scan": got.DuckDB} {
		if len(recs) != 2 {
			t.Fatalf("%s read partitions %v; want 2", tool, len(recs))
		}
		for shard, w := range want {
			sameRead(t, tool+", "+shard, recs[shard], w)
		}
	}
	var wantRange [][]uint64
	for o := lo; o <= hi; o++ {
		wantRange = append(wantRange, []uint64{0, o})
	}
	if fmt.Sprint(got.PyIcebergRange) != fmt.Sprint(wantRange) {
		t.Fatalf("pyiceberg, partition 0 offsets %d-%d across objects without and with ids: %v, want %v", lo, hi, got.PyIcebergRange, wantRange)
	}
	var inTime [][]int64
	for p, shard := range []string{"orders-0", "orders-1"} {
		for _, rec := range want[shard] {
			if from <= rec.Timestamp && rec.Timestamp <= to {
				inTime = append(inTime, []int64{int64(p), int64(rec.Offset), rec.Timestamp})
			}
		}
	}
	if len(inTime) < 20 || fmt.Sprint(got.DuckDBRange) != fmt.Sprint(inTime) {
		t.Fatalf("DuckDB, timestamps %d-%d: %d rows %v; want %d %v", from, to, len(got.DuckDBRange), got.DuckDBRange, len(inTime), inTime)
	}
}
