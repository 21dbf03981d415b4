package parquet

import (
	"bytes"
	"encoding/binary"
	"fmt"
	"io"
	"reflect"
	"sort"
	"strings"
	"testing"

	"github.com/hamba/avro/v2"
	pq "github.com/parquet-go/parquet-go"
	"github.com/parquet-go/parquet-go/format"

	"strata/engine/record"
	"strata/typed"
)

// eventSchema has a field of every Parquet physical type the typed
// columns write: INT32, INT64, FLOAT, DOUBLE, BOOLEAN, BYTE_ARRAY (string
// and binary), FIXED_LEN_BYTE_ARRAY (uuid), with lists, a map, a list of
// structs and an optional field.
const eventSchema = `{"type": "record", "name": "Event", "fields": [
	{"name": "id", "type": "long"},
	{"name": "n", "type": "int"},
	{"name": "name", "type": "string"},
	{"name": "score", "type": ["null", "double"]},
	{"name": "ratio", "type": "float"},
	{"name": "ok", "type": "boolean"},
	{"name": "tags", "type": {"type": "array", "items": "string"}},
	{"name": "counts", "type": {"type": "map", "values": "long"}},
	{"name": "ref", "type": {"type": "string", "logicalType": "uuid"}},
	{"name": "blob", "type": "bytes"},
	{"name": "lines", "type": {"type": "array", "items": {"type": "record", "name": "Line", "fields": [
		{"name": "sku", "type": "string"}, {"name": "qty", "type": "int"}]}}}]}`

// avroColumn is a typed column of an Avro schema whose values are in the
// wire format, numbered from id.
func avroColumn(t testing.TB, name, schema string, key bool, id int) TypedColumn {
	t.Helper()
	d, err := typed.NewAvroDecoder(avro.MustParse(schema))
	if err != nil {
		t.Fatal(err)
	}
	typ := d.Type()
	typ.ID = id
	next := typed.Number(&typ, id+1)
	return TypedColumn{Name: name, Key: key, Type: typ, ErrorID: next, Decode: func(raw []byte) (any, error) {
		_, payload, err := typed.Header(raw)
		if err != nil {
			return nil, err
		}
		return d.Decode(payload)
	}}
}

func wire(t testing.TB, schema avro.Schema, v any) []byte {
	t.Helper()
	b, err := avro.Marshal(schema, v)
	if err != nil {
		t.Fatal(err)
	}
	return append([]byte{0, 0, 0, 0, 7}, b...)
}

// typedRecords are events, with a tombstone, a value that is not Avro, a
// value cut short, one without the wire header and one with a string that
// is not UTF-8 among them; keys are Avro strings, one of them null, one not
// UTF-8.
func typedRecords(t testing.TB, n int) []record.Record {
	es, ks := avro.MustParse(eventSchema), avro.MustParse(`"string"`)
	recs := make([]record.Record, n)
	for i := range recs {
		tags := []string{}
		for j := range i % 4 {
			tags = append(tags, fmt.Sprintf("t%d", j))
		}
		var score any
		if i%3 != 0 {
			score = float64(i) / 4
		}
		lines := []map[string]any{}
		for j := range i % 3 {
			lines = append(lines, map[string]any{"sku": fmt.Sprintf("sku-%d", j), "qty": int32(j + 1)})
		}
		ev := map[string]any{"id": int64(i) - 300, "n": int32(i * 7 % 100), "name": strings.Repeat("x", i%5) + fmt.Sprint(i),
			"score": score, "ratio": float32(i) / 2, "ok": i%2 == 0, "tags": tags, "counts": map[string]any{"a": int64(i), "b": int64(-i)},
			"ref": fmt.Sprintf("6ba7b810-9dad-11d1-80b4-%012d", i), "blob": []byte{byte(i), 0, 0xff}, "lines": lines}
		recs[i] = record.Record{Offset: uint64(1000 + i), Timestamp: int64(i), Key: wire(t, ks, fmt.Sprint("k", i)), Value: wire(t, es, ev)}
	}
	recs[5].Value = nil
	recs[6].Value = []byte("not avro at all")
	recs[7].Value = recs[8].Value[:12]
	recs[9].Value = recs[9].Value[5:]
	recs[10].Key = nil
	// Avro says strings are UTF-8, and hamba/avro passes any bytes.
	recs[11].Value = bytes.Replace(recs[11].Value, []byte("x11"), []byte("x\xff1"), 1)
	recs[12].Key = wire(t, ks, "k\xfe")
	return recs
}

// Typed columns sit after the lossless ones: the records read back byte
// for byte as from a file without them, the column-wise point read still
// works, and each typed value parquet-go reads back is the one it reads
// back of the decoded value written by its own writer. What did not
// decode is null, with the reason beside it, counted.
func TestTypedColumns(t *testing.T) {
	recs := typedRecords(t, 600)
	cols := []TypedColumn{avroColumn(t, ValueTyped, eventSchema, false, 12), avroColumn(t, KeyTyped, `"string"`, true, 100)}
	data, sum := writeSummary(t, recs, Options{RowGroupBytes: 16 << 10, PageBytes: 2 << 10, Typed: cols})
	if fmt.Sprint(sum.TypedErrors) != "[4 1]" || sum.RowGroups < 3 {
		t.Fatalf("typed errors %v (want [4 1]: not Avro, cut short, no header, not UTF-8; a key not UTF-8), %d row groups", sum.TypedErrors, sum.RowGroups)
	}

	if got := readAll(t, data); !reflect.DeepEqual(got, recs) {
		t.Fatalf("records read back differ from those written")
	}
	f, err := Open(bytes.NewReader(data), int64(len(data)))
	if err != nil {
		t.Fatal(err)
	}
	if f.slow != nil {
		t.Fatalf("a file with typed columns reads row by row only: %v", f.slow)
	}
	g, _ := f.GroupOf(1300)
	from := int64(300) - f.Groups()[g].FirstRow
	spans, err := f.PageSpans(g, from, 2)
	if err != nil {
		t.Fatal(err)
	}
	if got, err := f.DecodeRows(g, from, 2, spanBytes(data, spans)); err != nil || !reflect.DeepEqual(got, recs[300:302]) {
		t.Fatalf("point read of offsets 1300-1301: %v", err)
	}

	pf, err := pq.OpenFile(bytes.NewReader(data), int64(len(data)))
	if err != nil {
		t.Fatal(err)
	}
	var top []string
	for _, fl := range pf.Schema().Fields() {
		top = append(top, fl.Name())
	}
	if want := "[offset timestamp key headers tags protocol_data value value_typed value_typed_error key_typed key_typed_error]"; fmt.Sprint(top) != want {
		t.Fatalf("top-level columns %v, want %s", top, want)
	}
	ids := map[string]int{}
	for _, fl := range pf.Schema().Fields() {
		ids[fl.Name()] = fl.ID()
	}
	if ids["value_typed"] != 12 || ids["value_typed_error"] != cols[0].ErrorID || ids["key_typed"] != 100 || ids["key_typed_error"] != 101 {
		t.Fatalf("field ids %v", ids)
	}

	rows := readTypedRows(t, pf)
	for i, r := range rows {
		var want map[string]any
		var wantErr any
		switch i {
		case 5:
		case 6, 7, 9, 11:
			wantErr = "x"
		default:
			want = roundTrip(t, cols[0], recs[i].Value)
		}
		if got, _ := r["value_typed"].(map[string]any); !reflect.DeepEqual(got, want) {
			t.Fatalf("row %d: value_typed %v, want %v", i, r["value_typed"], want)
		}
		if (r["value_typed_error"] == nil) != (wantErr == nil) {
			t.Fatalf("row %d: value_typed_error %v", i, r["value_typed_error"])
		}
		wantKey := any(fmt.Sprint("k", i))
		if i == 10 || i == 12 {
			wantKey = nil
		}
		if r["key_typed"] != wantKey || (r["key_typed_error"] != nil) != (i == 12) {
			t.Fatalf("row %d: key_typed %v (error %v), want %v", i, r["key_typed"], r["key_typed_error"], wantKey)
		}
	}
	for i, why := range map[int]string{6: "wire format", 7: "no Event", 9: "wire format", 11: "not UTF-8 in value_typed.name"} {
		if msg := fmt.Sprint(rows[i]["value_typed_error"]); !strings.Contains(msg, why) {
			t.Errorf("row %d: value_typed_error %q does not name %q", i, msg, why)
		}
	}
	checkTypedIndex(t, data, pf)
}

// readTypedRows reads every row of pf with parquet-go, as maps.
func readTypedRows(t *testing.T, pf *pq.File) []map[string]any {
	t.Helper()
	var out []map[string]any
	for _, rg := range pf.RowGroups() {
		rr := rg.Rows()
		buf := make([]pq.Row, 64)
		for {
			n, err := rr.ReadRows(buf)
			for _, row := range buf[:n] {
				m := map[string]any{}
				if err := pf.Schema().Reconstruct(&m, row); err != nil {
					t.Fatal(err)
				}
				out = append(out, m)
			}
			if err == io.EOF {
				break
			}
			if err != nil {
				t.Fatal(err)
			}
		}
		rr.Close()
	}
	return out
}

// roundTrip is the value parquet-go reads back of raw's decoded value
// written by its own writer under the column's node.
func roundTrip(t *testing.T, c TypedColumn, raw []byte) map[string]any {
	t.Helper()
	v, err := c.Decode(raw)
	if err != nil {
		t.Fatal(err)
	}
	typ := c.Type
	typ.Optional = true
	schema := pq.NewSchema("one", pq.Group{c.Name: typed.Node(typ)})
	var vals []typed.LeafValue
	if err := typed.Shred(typ, v, func(l typed.LeafValue) { vals = append(vals, l) }); err != nil {
		t.Fatal(err)
	}
	// A row holds its columns one after another.
	sort.SliceStable(vals, func(i, j int) bool { return vals[i].Leaf < vals[j].Leaf })
	var row pq.Row
	for _, l := range vals {
		pv := pq.ValueOf(l.Value)
		if b, ok := l.Value.([]byte); ok && schema.Columns()[l.Leaf][len(schema.Columns()[l.Leaf])-1] == "ref" {
			pv = pq.FixedLenByteArrayValue(b) // the uuid, the one FIXED_LEN_BYTE_ARRAY of eventSchema
		}
		row = append(row, pv.Level(l.Rep, l.Def, l.Leaf))
	}
	var buf bytes.Buffer
	pw := pq.NewWriter(&buf, schema)
	if _, err := pw.WriteRows([]pq.Row{row}); err != nil {
		t.Fatal(err)
	}
	if err := pw.Close(); err != nil {
		t.Fatal(err)
	}
	pf, err := pq.OpenFile(bytes.NewReader(buf.Bytes()), int64(buf.Len()))
	if err != nil {
		t.Fatal(err)
	}
	m := readTypedRows(t, pf)[0][c.Name]
	out, _ := m.(map[string]any)
	return out
}

// checkTypedIndex checks that every typed column chunk with a column
// index bounds each page's values truly, and that the others have none:
// an engine skipping pages by a wrong bound would drop rows.
func checkTypedIndex(t *testing.T, data []byte, pf *pq.File) {
	t.Helper()
	md := footer(t, data)
	cis := pf.ColumnIndexes()
	for gi, rg := range pf.RowGroups() {
		for ci, cc := range rg.ColumnChunks() {
			chunk := md.RowGroups[gi].Columns[ci]
			path := strings.Join(chunk.MetaData.PathInSchema, ".")
			if !strings.HasPrefix(path, "value_typed") && !strings.HasPrefix(path, "key_typed") {
				continue
			}
			typ := chunk.MetaData.Type
			indexed := typ == format.Int32 || typ == format.Int64 || typ == format.ByteArray
			if indexed != (chunk.ColumnIndexLength > 0) {
				t.Fatalf("row group %d %s (%s): column index of %d bytes", gi, path, typ, chunk.ColumnIndexLength)
			}
			if !indexed {
				continue
			}
			idx := cis[gi*len(rg.ColumnChunks())+ci]
			pages := cc.Pages()
			for p := 0; ; p++ {
				page, err := pages.ReadPage()
				if err == io.EOF {
					break
				}
				if err != nil {
					t.Fatal(err)
				}
				vals := make([]pq.Value, page.NumValues())
				n, _ := page.Values().ReadValues(vals)
				nulls := 0
				for _, v := range vals[:n] {
					if v.IsNull() {
						nulls++
						continue
					}
					b := v.Bytes()
					if typ != format.ByteArray {
						b = binary.LittleEndian.AppendUint64(nil, uint64(v.Int64()))
					}
					lo, hi, as := idx.MinValues[p], idx.MaxValues[p], typ
					if typ != format.ByteArray {
						lo, hi, as = widen(lo), widen(hi), format.Int64
					}
					if compareValues(as, b, lo) < 0 || compareValues(as, b, hi) > 0 {
						t.Fatalf("row group %d %s page %d: value %v outside [%v, %v]", gi, path, p, v, idx.MinValues[p], idx.MaxValues[p])
					}
				}
				if idx.NullCounts[p] != int64(nulls) || idx.NullPages[p] != (nulls == n) {
					t.Fatalf("row group %d %s page %d: %d nulls of %d values, index says %d (null page %v)", gi, path, p, nulls, n, idx.NullCounts[p], idx.NullPages[p])
				}
				pq.Release(page)
			}
		}
	}
}

// widen is an INT32 bound as the INT64 it is, sign and all.
func widen(b []byte) []byte {
	if len(b) == 4 {
		return binary.LittleEndian.AppendUint64(nil, uint64(int64(int32(binary.LittleEndian.Uint32(b)))))
	}
	return b
}

// Produced values are untrusted bytes: whatever they hold, a file with
// typed columns opens, gives back every record byte for byte, and
// parquet-go reads its every row; what does not decode is counted.
func FuzzTypedColumns(f *testing.F) {
	cols := []TypedColumn{avroColumn(f, ValueTyped, eventSchema, false, 1000), avroColumn(f, KeyTyped, `"string"`, true, 1_000_000)}
	seed := typedRecords(f, 14)
	for _, r := range seed {
		f.Add(r.Value, r.Key)
	}
	f.Fuzz(func(t *testing.T, value, key []byte) {
		recs := []record.Record{{Offset: 5, Value: value, Key: key}, {Offset: 6, Value: seed[0].Value, Key: value}}
		data, sum := writeSummary(t, recs, Options{Typed: cols})
		if sum.TypedErrors[0] > 1 {
			t.Fatalf("typed errors %v: the second value is a whole Event", sum.TypedErrors)
		}
		for i, r := range readAll(t, data) {
			if !bytes.Equal(r.Value, recs[i].Value) || !bytes.Equal(r.Key, recs[i].Key) || (r.Value == nil) != (recs[i].Value == nil) {
				t.Fatalf("record %d read back as %q/%q, written %q/%q", i, r.Key, r.Value, recs[i].Key, recs[i].Value)
			}
		}
		pf, err := pq.OpenFile(bytes.NewReader(data), int64(len(data)))
		if err != nil {
			t.Fatal(err)
		}
		if rows := readTypedRows(t, pf); len(rows) != 2 || rows[1]["value_typed"] == nil {
			t.Fatalf("parquet-go read %d rows, the second's value_typed %v", len(rows), rows)
		}
	})
}
