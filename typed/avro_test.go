package typed

import (
	"bytes"
	"encoding/binary"
	"fmt"
	"math"
	"math/big"
	"reflect"
	"sort"
	"strings"
	"testing"
	"time"

	"github.com/hamba/avro/v2"
	pq "github.com/parquet-go/parquet-go"

	"strata/registry/format"
)

// The mapping table (docs/typed.md), one Avro construct a row.
func TestAvroTypes(t *testing.T) {
	for _, tc := range []struct{ avro, want string }{
		{`"boolean"`, "boolean"},
		{`"int"`, "int"},
		{`"long"`, "long"},
		{`"float"`, "float"},
		{`"double"`, "double"},
		{`"string"`, "string"},
		{`"bytes"`, "binary"},
		{`{"type": "fixed", "name": "F", "size": 4}`, "fixed[4]"},
		{`{"type": "enum", "name": "E", "symbols": ["A", "B"]}`, "string"},
		{`{"type": "array", "items": "int"}`, "list<int>"},
		{`{"type": "map", "values": "long"}`, "map<string, long>"},
		{`["null", "string"]`, "optional string"},
		{`["string", "null"]`, "optional string"},
		{`["int", "string"]`, "struct<int: optional int, string: optional string>"},
		{`["null", "int", {"type": "record", "name": "a.R", "fields": [{"name": "x", "type": "int"}]}]`,
			"optional struct<int: optional int, R: optional struct<x: int>>"},
		{`{"type": "int", "logicalType": "date"}`, "date"},
		{`{"type": "int", "logicalType": "time-millis"}`, "time"},
		{`{"type": "long", "logicalType": "time-micros"}`, "time"},
		{`{"type": "long", "logicalType": "timestamp-millis"}`, "timestamptz"},
		{`{"type": "long", "logicalType": "timestamp-micros"}`, "timestamptz"},
		{`{"type": "long", "logicalType": "local-timestamp-millis"}`, "timestamp"},
		{`{"type": "string", "logicalType": "uuid"}`, "uuid"},
		{`{"type": "bytes", "logicalType": "decimal", "precision": 9, "scale": 2}`, "decimal(9, 2)"},
		{`{"type": "fixed", "name": "D", "size": 16, "logicalType": "decimal", "precision": 38, "scale": 10}`, "decimal(38, 10)"},
		{`{"type": "fixed", "name": "Dur", "size": 12, "logicalType": "duration"}`, "struct<months: long, days: long, milliseconds: long>"},
		{`{"type": "record", "name": "Order", "fields": [
			{"name": "id", "type": "long"},
			{"name": "note", "type": ["null", "string"], "default": null},
			{"name": "lines", "type": {"type": "array", "items": {"type": "record", "name": "Line", "fields": [
				{"name": "sku", "type": "string"}, {"name": "qty", "type": "int"}]}}},
			{"name": "again", "type": "Line"}]}`,
			"struct<id: long, note: optional string, lines: list<struct<sku: string, qty: int>>, again: struct<sku: string, qty: int>>"},
	} {
		t.Run(tc.avro, func(t *testing.T) {
			// As the registry parses what a serializer registers.
			s, err := format.Parse(format.Avro, tc.avro, nil)
			if err != nil {
				t.Fatal(err)
			}
			got, err := FromAvro(s.Avro())
			if err != nil {
				t.Fatal(err)
			}
			if got.String() != tc.want {
				t.Fatalf("FromAvro = %s, want %s", got, tc.want)
			}
		})
	}
}

// What no column type expresses is refused, naming where.
func TestAvroTypesRefused(t *testing.T) {
	for _, tc := range []struct{ avro, want string }{
		{`{"type": "record", "name": "Node", "fields": [{"name": "next", "type": ["null", "Node"]}]}`, "value.next: Node refers to itself"},
		{`"null"`, "null alone"},
		{`{"type": "record", "name": "Empty", "fields": []}`, "no fields"},
	} {
		s, err := avro.Parse(tc.avro)
		if err != nil {
			t.Fatal(err)
		}
		if _, err := FromAvro(s); err == nil || !strings.Contains(err.Error(), tc.want) {
			t.Errorf("FromAvro(%s) = %v, want an error with %q", tc.avro, err, tc.want)
		}
	}
}

const orderSchema = `{"type": "record", "name": "Order", "namespace": "shop", "fields": [
	{"name": "id", "type": "long"},
	{"name": "note", "type": ["null", "string"], "default": null},
	{"name": "status", "type": {"type": "enum", "name": "Status", "symbols": ["NEW", "PAID"]}},
	{"name": "placed", "type": {"type": "long", "logicalType": "timestamp-millis"}},
	{"name": "day", "type": {"type": "int", "logicalType": "date"}},
	{"name": "price", "type": {"type": "bytes", "logicalType": "decimal", "precision": 9, "scale": 2}},
	{"name": "big", "type": {"type": "fixed", "name": "Big", "size": 16, "logicalType": "decimal", "precision": 38, "scale": 0}},
	{"name": "ref", "type": {"type": "string", "logicalType": "uuid"}},
	{"name": "lines", "type": {"type": "array", "items": {"type": "record", "name": "Line", "fields": [
		{"name": "sku", "type": "string"}, {"name": "qty", "type": "int"}]}}},
	{"name": "attrs", "type": {"type": "map", "values": "string"}},
	{"name": "either", "type": ["null", "int", "string"]},
	{"name": "hash", "type": {"type": "fixed", "name": "Hash", "size": 4}},
	{"name": "took", "type": {"type": "fixed", "name": "Took", "size": 12, "logicalType": "duration"}},
	{"name": "at", "type": {"type": "int", "logicalType": "time-millis"}},
	{"name": "local", "type": {"type": "long", "logicalType": "local-timestamp-micros"}}]}`

// A payload decodes to the column type's shape, which parquet-go writes
// and reads back as the same values: every logical type converted to the
// physical value Iceberg stores.
func TestAvroValuesWriteToParquet(t *testing.T) {
	s := avro.MustParse(orderSchema)
	d, err := NewAvroDecoder(s)
	if err != nil {
		t.Fatal(err)
	}
	placed := time.Date(2026, 12, 3, 10, 30, 0, 123e6, time.UTC)
	in := map[string]any{
		"id": int64(42), "note": "gift", "status": "PAID", "placed": placed,
		"day": time.Date(2026, 12, 3, 0, 0, 0, 0, time.UTC), "price": big.NewRat(1999, 100),
		"big": new(big.Rat).SetInt(big.NewInt(-5)), "ref": "6ba7b810-9dad-11d1-80b4-00c04fd430c8",
		"lines":  []any{map[string]any{"sku": "a", "qty": 2}, map[string]any{"sku": "b", "qty": 1}},
		"attrs":  map[string]any{"k": "v"},
		"either": map[string]any{"string": "s"},
		"hash":   [4]byte{1, 2, 3, 4},
		"took":   avro.LogicalDuration{Months: 1, Days: 2, Milliseconds: 3},
		"at":     90 * time.Minute,
		"local":  placed,
	}
	payload, err := avro.Marshal(s, in)
	if err != nil {
		t.Fatal(err)
	}
	got, err := d.Decode(payload)
	if err != nil {
		t.Fatal(err)
	}
	want := map[string]any{
		"id": int64(42), "note": "gift", "status": "PAID", "placed": placed.UnixMicro(),
		"day": int32(placed.Unix() / 86400), "price": int32(1999),
		"big": append(bytes.Repeat([]byte{0xff}, 15), 0xfb), "ref": []byte{0x6b, 0xa7, 0xb8, 0x10, 0x9d, 0xad, 0x11, 0xd1, 0x80, 0xb4, 0x00, 0xc0, 0x4f, 0xd4, 0x30, 0xc8},
		"lines":  []any{map[string]any{"sku": "a", "qty": int32(2)}, map[string]any{"sku": "b", "qty": int32(1)}},
		"attrs":  Entries{{"k", "v"}},
		"either": map[string]any{"string": "s"},
		"hash":   []byte{1, 2, 3, 4},
		"took":   map[string]any{"months": int64(1), "days": int64(2), "milliseconds": int64(3)},
		"at":     (90 * time.Minute).Microseconds(),
		"local":  placed.UnixMicro(),
	}
	if !reflect.DeepEqual(got, want) {
		t.Fatalf("decoded\n%#v\nwant\n%#v", got, want)
	}

	typ := d.Type()
	if next := Number(&typ, 100); next <= 100 {
		t.Fatalf("Number gave no ids")
	}
	schema := pq.NewSchema("row", pq.Group{"value": Node(typ)})
	back := writeAndRead(t, schema, typ, got)["value"].(map[string]any)
	// As parquet-go's reader gives them back: its decimals are scaled.
	sameFields(t, "read back", back, map[string]string{
		"id": "42", "note": "gift", "status": "PAID", "placed": fmt.Sprint(placed.UnixMicro()), "day": "20790",
		"price": "19.99", "big": "-5", "lines": "[map[qty:2 sku:a] map[qty:1 sku:b]]", "attrs": "map[k:[118]]",
		"either": "map[int:<nil> string:s]", "hash": "[1 2 3 4]",
		"ref":  "[107 167 184 16 157 173 17 209 128 180 0 192 79 212 48 200]",
		"took": "map[days:2 milliseconds:3 months:1]", "at": "5400000000", "local": fmt.Sprint(placed.UnixMicro()),
	})
}

// A payload that is not of the schema is an error naming why, never a
// wrong value: short, with bytes left over, or with a bad UUID.
func TestAvroDecodeErrors(t *testing.T) {
	s := avro.MustParse(`{"type": "record", "name": "R", "fields": [{"name": "id", "type": "long"},
		{"name": "ref", "type": {"type": "string", "logicalType": "uuid"}}]}`)
	d, err := NewAvroDecoder(s)
	if err != nil {
		t.Fatal(err)
	}
	good, err := avro.Marshal(s, map[string]any{"id": int64(7), "ref": "6ba7b810-9dad-11d1-80b4-00c04fd430c8"})
	if err != nil {
		t.Fatal(err)
	}
	badUUID, _ := avro.Marshal(s, map[string]any{"id": int64(7), "ref": "not-a-uuid"})
	for _, tc := range []struct {
		name    string
		payload []byte
		want    string
	}{
		{"empty", nil, "avro"},
		{"cut short", good[:3], "avro"},
		{"bytes left over", append(append([]byte{}, good...), 0), "bytes left after the value"},
		{"a string that is no UUID", badUUID, `value.ref: "not-a-uuid" is not a UUID`},
	} {
		if _, err := d.Decode(tc.payload); err == nil || !strings.Contains(err.Error(), tc.want) {
			t.Errorf("%s: %v, want an error with %q", tc.name, err, tc.want)
		}
	}
}

// An array's block count is the payload's word: one of a trillion items
// in a few bytes is an error, not an allocation that runs the process out
// of memory.
func TestAvroArrayCountIsBounded(t *testing.T) {
	d, err := NewAvroDecoder(avro.MustParse(`{"type": "array", "items": "long"}`))
	if err != nil {
		t.Fatal(err)
	}
	payload := binary.AppendVarint(nil, 1<<40) // Avro's longs are zigzag varints, as Go's
	if _, err := d.Decode(payload); err == nil || !strings.Contains(err.Error(), "MaxSliceAllocSize") {
		t.Fatalf("an array of 2^40 items in %d bytes: %v, want an error", len(payload), err)
	}
}

func TestHeader(t *testing.T) {
	id, payload, err := Header([]byte{0, 0, 0, 1, 2, 9, 9})
	if err != nil || id != 258 || !bytes.Equal(payload, []byte{9, 9}) {
		t.Fatalf("Header = %d %v %v", id, payload, err)
	}
	for _, v := range [][]byte{nil, {0, 0, 0, 1}, {1, 0, 0, 0, 1}} {
		if _, _, err := Header(v); err != ErrNoHeader {
			t.Errorf("Header(%v) = %v, want ErrNoHeader", v, err)
		}
	}
}

// writeAndRead writes v, shredded, as the one row of a Parquet file of
// schema, and reads it back with parquet-go.
func writeAndRead(t *testing.T, schema *pq.Schema, typ Type, v any) map[string]any {
	t.Helper()
	back := map[string]any{}
	if err := schema.Reconstruct(&back, writeRow(t, schema, typ, v)); err != nil {
		t.Fatal(err)
	}
	return back
}

// readInt64s writes v as writeAndRead does and returns the int64 values of one
// leaf column parquet-go reads back.
func readInt64s(t *testing.T, schema *pq.Schema, typ Type, v any, path ...string) []any {
	t.Helper()
	leaf, ok := schema.Lookup(path...)
	if !ok {
		t.Fatalf("no column %v", path)
	}
	var out []any
	for _, pv := range writeRow(t, schema, typ, v) {
		if pv.Column() == leaf.ColumnIndex && !pv.IsNull() {
			out = append(out, pv.Int64())
		}
	}
	return out
}

// writeRow writes v, shredded, as the one row of a Parquet file and
// returns the row parquet-go reads back.
func writeRow(t *testing.T, schema *pq.Schema, typ Type, v any) pq.Row {
	t.Helper()
	cols := schema.Columns()
	var values []LeafValue
	if err := Shred(typ, v, func(lv LeafValue) { values = append(values, lv) }); err != nil {
		t.Fatal(err)
	}
	// A row holds its columns one after another; Shred gives a list's
	// elements' columns in turn.
	sort.SliceStable(values, func(i, j int) bool { return values[i].Leaf < values[j].Leaf })
	var row pq.Row
	for _, lv := range values {
		leaf, _ := schema.Lookup(cols[lv.Leaf]...)
		var pv pq.Value
		switch x := lv.Value.(type) {
		case nil:
			pv = pq.NullValue()
		case bool:
			pv = pq.BooleanValue(x)
		case int32:
			pv = pq.Int32Value(x)
		case int64:
			pv = pq.Int64Value(x)
		case float32:
			pv = pq.FloatValue(x)
		case float64:
			pv = pq.DoubleValue(x)
		case string:
			pv = pq.ByteArrayValue([]byte(x))
		case []byte:
			if leaf.Node.Type().Kind() == pq.FixedLenByteArray {
				pv = pq.FixedLenByteArrayValue(x)
			} else {
				pv = pq.ByteArrayValue(x)
			}
		default:
			t.Fatalf("leaf %v: a %T", cols[lv.Leaf], x)
		}
		row = append(row, pv.Level(lv.Rep, lv.Def, lv.Leaf))
	}
	var buf bytes.Buffer
	w := pq.NewWriter(&buf, schema)
	if _, err := w.WriteRows([]pq.Row{row}); err != nil {
		t.Fatal(err)
	}
	if err := w.Close(); err != nil {
		t.Fatal(err)
	}
	r := pq.NewReader(bytes.NewReader(buf.Bytes()), schema)
	rows := make([]pq.Row, 1)
	if n, _ := r.ReadRows(rows); n != 1 {
		t.Fatalf("read %d rows", n)
	}
	return rows[0]
}

// sameFields checks each named field of a struct value as fmt prints it.
func sameFields(t *testing.T, what string, got map[string]any, want map[string]string) {
	t.Helper()
	for field, w := range want {
		if g := fmt.Sprint(got[field]); g != w {
			t.Errorf("%s %s = %s, want %s", what, field, g, w)
		}
	}
}

// What the adversarial pass found: a timestamp-millis past what
// microseconds hold is an error, not a wrapped value; a schema nested past
// MaxDepth, with fields whose names differ only in case, or a union of two
// records of one name (two fields of one name) has no column type.
func TestAvroEdgesFound(t *testing.T) {
	s := avro.MustParse(`{"type": "record", "name": "R", "fields": [{"name": "at", "type": {"type": "long", "logicalType": "timestamp-millis"}}]}`)
	d, err := NewAvroDecoder(s)
	if err != nil {
		t.Fatal(err)
	}
	for _, ms := range []int64{math.MaxInt64, 1e16, -1e16} {
		payload, err := avro.Marshal(s, map[string]any{"at": time.UnixMilli(ms)})
		if err != nil {
			t.Fatal(err)
		}
		if v, err := d.Decode(payload); err == nil || !strings.Contains(err.Error(), "past what microseconds hold") {
			t.Errorf("timestamp-millis %d: %v, %v; want an error", ms, v, err)
		}
	}
	deep := `"int"`
	for range MaxDepth + 1 {
		deep = `{"type": "array", "items": ` + deep + `}`
	}
	// Each record names the one below twice: 2^20 columns from 20 lines.
	wide := `{"type": "record", "name": "R0", "fields": [{"name": "x", "type": "int"}]}`
	for k := 1; k <= 20; k++ {
		wide = fmt.Sprintf(`{"type": "record", "name": "R%d", "fields": [{"name": "a", "type": %s}, {"name": "b", "type": "R%d"}]}`, k, wide, k-1)
	}
	for _, tc := range []struct{ schema, want string }{
		{`{"type": "record", "name": "R", "fields": [{"name": "d", "type": ` + deep + `}]}`, "nested deeper than 64 levels"},
		{`{"type": "record", "name": "R", "fields": [{"name": "A", "type": "int"}, {"name": "a", "type": "int"}]}`, `fields "A" and "a"`},
		{wide, "more than 10000 parts"},
		{`{"type": "record", "name": "R", "fields": [{"name": "u", "type": ["null",
			{"type": "record", "name": "X", "namespace": "a", "fields": [{"name": "f", "type": "int"}]},
			{"type": "record", "name": "X", "namespace": "b", "fields": [{"name": "g", "type": "string"}]}]}]}`, `two fields named "X"`},
	} {
		if _, err := NewAvroDecoder(avro.MustParse(tc.schema)); err == nil || !strings.Contains(err.Error(), tc.want) {
			t.Errorf("%.60s…: %v, want an error naming %q", tc.schema, err, tc.want)
		}
	}
}
