package typed

import (
	"strings"
	"testing"

	pq "github.com/parquet-go/parquet-go"

	"strata/registry/format"
)

func jsonSchema(t *testing.T, text string) Type {
	t.Helper()
	s, err := format.Parse(format.JSON, text, nil)
	if err != nil {
		t.Fatal(err)
	}
	typ, err := FromJSONSchema(s.JSON())
	if err != nil {
		t.Fatal(err)
	}
	return typ
}

// The JSON Schema rows of docs/typed.md's mapping table.
func TestJSONSchemaTypes(t *testing.T) {
	for _, tc := range []struct {
		schema, want string
		json         bool // the value's JSON text
	}{
		{`{"type": "boolean"}`, "boolean", false},
		{`{"type": "integer"}`, "long", false},
		{`{"type": "number"}`, "double", false},
		{`{"type": "string"}`, "string", false},
		{`{"type": "string", "format": "date-time"}`, "timestamptz", false},
		{`{"type": "string", "format": "date"}`, "date", false},
		{`{"type": "string", "format": "time"}`, "time", false},
		{`{"type": "string", "format": "uuid"}`, "uuid", false},
		{`{"type": "string", "enum": ["A", "B"]}`, "string", false},
		{`{"type": ["string", "null"]}`, "optional string", false},
		{`{"type": "array", "items": {"type": "integer"}}`, "list<long>", false},
		{`{"type": "object", "additionalProperties": {"type": "number"}}`, "map<string, double>", false},
		{`{"type": "object", "properties": {"b": {"type": "string"}, "a": {"type": "integer"}}, "required": ["a"]}`,
			"struct<a: long, b: optional string>", false},
		{`{"type": "object", "properties": {"x": {"$ref": "#/$defs/p"}}, "$defs": {"p": {"type": "object", "properties": {"y": {"type": "number"}}}}}`,
			"struct<x: optional struct<y: optional double>>", false},
		{`{"type": ["string", "integer"]}`, "optional string", true},
		{`{"oneOf": [{"type": "string"}, {"type": "integer"}]}`, "optional string", true},
		{`{"type": "object"}`, "string", true},
		{`{"type": "array"}`, "string", true},
		{`{}`, "optional string", true},
	} {
		got := jsonSchema(t, tc.schema)
		if got.String() != tc.want || got.json != tc.json {
			t.Errorf("FromJSONSchema(%s) = %s (JSON text %v), want %s (%v)", tc.schema, got, got.json, tc.want, tc.json)
		}
	}
	s, err := format.Parse(format.JSON, `{"$ref": "#/$defs/n", "$defs": {"n": {"type": "object", "properties": {"next": {"$ref": "#/$defs/n"}}}}}`, nil)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := FromJSONSchema(s.JSON()); err == nil || !strings.Contains(err.Error(), "value.next: the schema refers to itself") {
		t.Errorf("a recursive schema: %v", err)
	}
}

const eventSchema = `{"type": "object", "required": ["id", "at"], "properties": {
	"id": {"type": "integer"},
	"at": {"type": "string", "format": "date-time"},
	"day": {"type": "string", "format": "date"},
	"ref": {"type": "string", "format": "uuid"},
	"score": {"type": "number"},
	"tags": {"type": "array", "items": {"type": "string"}},
	"counts": {"type": "object", "additionalProperties": {"type": "integer"}},
	"user": {"type": "object", "properties": {"name": {"type": "string"}, "admin": {"type": "boolean"}}},
	"extra": {}}}`

// eventDecoder is the decoder of eventSchema.
func eventDecoder(t *testing.T) *JSONDecoder {
	t.Helper()
	s, err := format.Parse(format.JSON, eventSchema, nil)
	if err != nil {
		t.Fatal(err)
	}
	d, err := NewJSONDecoder(s.JSON())
	if err != nil {
		t.Fatal(err)
	}
	return d
}

// A JSON value decodes to the column type's shape, striped, written and
// read back by parquet-go; what has no one type keeps its JSON text.
func TestJSONValuesWriteToParquet(t *testing.T) {
	d := eventDecoder(t)
	got, err := d.Decode([]byte(`{"id": 9007199254740993, "at": "2026-12-03T10:30:00.123456Z", "day": "2026-12-03",
		"ref": "6ba7b810-9dad-11d1-80b4-00c04fd430c8", "score": 1.5, "tags": ["a", "b"], "counts": {"y": 2, "x": 1},
		"user": {"name": "ann"}, "extra": {"k": [1, 2]}}`))
	if err != nil {
		t.Fatal(err)
	}
	v := got.(map[string]any)
	sameFields(t, "decoded", v, map[string]string{
		"id": "9007199254740993", "at": "1796293800123456", "day": "20790", "score": "1.5", "tags": "[a b]",
		"counts": "[{x 1} {y 2}]", "user": "map[admin:<nil> name:ann]", "extra": `{"k":[1,2]}`,
	})
	typ := d.Type()
	Number(&typ, 1)
	schema := pq.NewSchema("row", pq.Group{"value": Node(typ)})
	back := writeAndRead(t, schema, typ, got)["value"].(map[string]any)
	sameFields(t, "read back", back, map[string]string{
		"id": "9007199254740993", "tags": "[a b]", "counts": "map[x:1 y:2]", "user": "map[admin:<nil> name:ann]", "extra": `{"k":[1,2]}`,
	})
}

// A value of another shape is an error naming where, never a wrong value.
func TestJSONDecodeErrors(t *testing.T) {
	d := eventDecoder(t)
	for _, tc := range []struct{ payload, want string }{
		{`{"at": "2026-12-03T10:30:00Z"}`, "value.id: null or absent, and the schema requires it"},
		{`{"id": 1.5, "at": "2026-12-03T10:30:00Z"}`, "value.id: 1.5 is not a 64-bit integer"},
		{`{"id": 1e999999999, "at": "2026-12-03T10:30:00Z"}`, "value.id: 1e999999999 is not a 64-bit integer"},
		{"{\"id\": 1, \"at\": \"2026-12-03T10:30:00Z\", \"tags\": [\"\xff\"]}", "json: the value is not UTF-8"},
		{`{"id": 1, "at": "yesterday"}`, `value.at: "yesterday" is not a date-time`},
		{`{"id": 1, "at": "2026-12-03T10:30:00Z", "tags": "a"}`, "value.tags: a string is not a list"},
		{`{"id": 1, "at": "2026-12-03T10:30:00Z"} {}`, "more after the value"},
		{`{"id": 1,`, "json"},
	} {
		if _, err := d.Decode([]byte(tc.payload)); err == nil || !strings.Contains(err.Error(), tc.want) {
			t.Errorf("Decode(%s) = %v, want an error with %q", tc.payload, err, tc.want)
		}
	}
}

// JSON Schema's integers include 1.0 and 1e2, read exactly.
func TestJSONIntegralNumbers(t *testing.T) {
	d := eventDecoder(t)
	for text, want := range map[string]int64{"1.0": 1, "1e2": 100, "9007199254740993.0": 9007199254740993, "-2E3": -2000} {
		v, err := d.Decode([]byte(`{"id": ` + text + `, "at": "2026-12-03T10:30:00Z"}`))
		if err != nil {
			t.Fatalf("%s: %v", text, err)
		}
		if got := v.(map[string]any)["id"]; got != want {
			t.Errorf("%s reads as %v, want %d", text, got, want)
		}
	}
}
