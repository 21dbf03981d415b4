package typed

import (
	"fmt"
	"strings"
	"testing"

	"github.com/hamba/avro/v2"
	"google.golang.org/protobuf/encoding/protowire"

	"strata/registry/format"
)

// schemaMap is a registry's answers as a typed column asks them: ids to
// schemas, subjects to their versions' ids.
type schemaMap struct {
	byID     map[int]*format.Schema
	versions map[string][]int
}

func (m schemaMap) Versions(subject string) ([]Version, error) {
	ids, ok := m.versions[subject]
	if !ok {
		return nil, fmt.Errorf("subject %s not found", subject)
	}
	var out []Version
	for _, id := range ids {
		out = append(out, Version{id, m.byID[id]})
	}
	return out, nil
}

func (m schemaMap) ByID(id int) (*format.Schema, error) {
	if s, ok := m.byID[id]; ok {
		return s, nil
	}
	return nil, fmt.Errorf("schema %d not found", id)
}

func (m schemaMap) Latest(subject string) (int, *format.Schema, error) {
	ids, ok := m.versions[subject]
	if !ok {
		return 0, nil, fmt.Errorf("subject %s not found", subject)
	}
	return ids[len(ids)-1], m.byID[ids[len(ids)-1]], nil
}

func withHeader(id byte, payload []byte) []byte { return append([]byte{0, 0, 0, 0, id}, payload...) }

// A column's type is evolved over its subject's versions, and each value
// decodes by the schema its header names; a value it cannot decode, or of
// a version the column could not evolve to, is an error naming why.
func TestColumnDecodesBySchemaID(t *testing.T) {
	v1 := `{"type": "record", "name": "Click", "fields": [{"name": "url", "type": "string"}]}`
	v2 := `{"type": "record", "name": "Click", "fields": [{"name": "url", "type": "string"}, {"name": "ms", "type": "long", "default": 0}]}`
	bad := `{"type": "record", "name": "Click", "fields": [{"name": "url", "type": "int"}]}`
	upper := `{"type": "record", "name": "Click", "fields": [{"name": "URL", "type": "string"}]}`
	parse := func(typ format.Type, text string) *format.Schema {
		s, err := format.Parse(typ, text, nil)
		if err != nil {
			t.Fatal(err)
		}
		return s
	}
	schemas := schemaMap{
		byID: map[int]*format.Schema{1: parse(format.Avro, v1), 2: parse(format.Avro, v2), 3: parse(format.Protobuf, shopProto),
			4: parse(format.Avro, bad), 5: parse(format.Avro, upper)},
		versions: map[string][]int{"clicks-value": {1, 2}, "first-value": {1}, "orders-value": {3}, "bad-value": {1, 4}, "case-value": {1, 5}},
	}
	one, _ := avro.Marshal(avro.MustParse(v1), map[string]any{"url": "/a"})
	two, _ := avro.Marshal(avro.MustParse(v2), map[string]any{"url": "/b", "ms": int64(5)})
	// Protobuf: the message indexes (0: the file's first message, Order),
	// then the payload: id = 42.
	order := protowire.AppendVarint(protowire.AppendTag([]byte{0}, 1, protowire.VarintType), 42)

	for _, tc := range []struct {
		source, subject string
		raw             []byte
		want, err       string
	}{
		{"schema_id", "clicks-value", withHeader(1, one), "map[url:/a]", ""},
		{"schema_id", "clicks-value", withHeader(2, two), "map[ms:5 url:/b]", ""},
		{"schema_id", "first-value", withHeader(2, two), "", "schema id 2 is not a version the column was evolved to: its columns"},
		{"schema_id", "bad-value", withHeader(1, one), "map[url:/a]", ""},
		{"schema_id", "bad-value", withHeader(4, one), "", "schema id 4 (subject bad-value): url is int in the schema and string in the table"},
		// A version whose evolution would give the column two fields of
		// one name but for case is left out; the others decode.
		{"schema_id", "case-value", withHeader(1, one), "map[url:/a]", ""},
		{"schema_id", "case-value", withHeader(5, one), "", `schema id 5 (subject case-value): value: fields "url" and "URL"`},
		{"schema_id", "clicks-value", withHeader(9, one), "", "schema id 9: schema 9 not found"},
		{"schema_id", "clicks-value", one, "", "not in the Schema Registry's wire format"},
		{"schema_id", "clicks-value", withHeader(1, one[:1]), "", "the payload is no Click"},
		{"subject:first-value", "other-value", one, "map[url:/a]", ""},
		{"subject:clicks-value", "other-value", one, "", "the payload is no Click"},
		{"subject:clicks-value", "other-value", withHeader(1, one), "map[url:/a]", ""},
		{"schema_id", "orders-value", withHeader(3, order), "42", ""},
		{"schema_id", "orders-value", withHeader(3, []byte{0x7f}), "", "schema id 3"},
	} {
		c, err := NewColumn(tc.source, tc.subject, schemas, Start{ID: 1000})
		if err != nil {
			t.Fatalf("%s: %v", tc.source, err)
		}
		v, err := c.Decode(tc.raw)
		if tc.err != "" {
			if err == nil || !strings.Contains(err.Error(), tc.err) {
				t.Errorf("%s %x: error %v, want one naming %q", tc.source, tc.raw, err, tc.err)
			}
			continue
		}
		if err != nil {
			t.Fatalf("%s %x: %v", tc.source, tc.raw, err)
		}
		got := fmt.Sprint(v)
		if m, ok := v.(map[string]any); ok && tc.subject == "orders-value" {
			got = fmt.Sprint(m["id"])
		}
		if got != tc.want {
			t.Errorf("%s %x: %s, want %s", tc.source, tc.raw, got, tc.want)
		}
	}

	// Fresh ids: the column's, its first version's parts, the error
	// column's; a later version's fields after them.
	c, err := NewColumn("schema_id", "clicks-value", schemas, Start{ID: 1000})
	if err != nil {
		t.Fatal(err)
	}
	if got := c.Type.String(); got != "optional struct<url: string, ms: optional long>" {
		t.Errorf("column %s", got)
	}
	if c.Type.ID != 1000 || c.Type.Fields[0].Type.ID != 1001 || c.ErrorID != 1002 || c.Type.Fields[1].Type.ID != 1003 || c.Next != 1004 {
		t.Errorf("column %s: id %d, url's %d, error's %d, ms's %d, next %d", c.Type, c.Type.ID,
			c.Type.Fields[0].Type.ID, c.ErrorID, c.Type.Fields[1].Type.ID, c.Next)
	}
	// From the table's column: its ids stay, what it lacks is added from
	// the table's next id, and one the table already has is unchanged.
	first, err := NewColumn("schema_id", "first-value", schemas, Start{ID: 1000})
	if err != nil {
		t.Fatal(err)
	}
	evolved, err := NewColumn("schema_id", "clicks-value", schemas, Start{Type: &first.Type, ErrorID: first.ErrorID, Next: 2000})
	if err != nil {
		t.Fatal(err)
	}
	if evolved.Type.Fields[0].Type.ID != 1001 || evolved.Type.Fields[1].Type.ID != 2000 || evolved.ErrorID != 1002 || evolved.Next != 2001 {
		t.Errorf("evolved %s: url's id %d, ms's %d, error's %d, next %d", evolved.Type, evolved.Type.Fields[0].Type.ID,
			evolved.Type.Fields[1].Type.ID, evolved.ErrorID, evolved.Next)
	}
	again, err := NewColumn("schema_id", "clicks-value", schemas, Start{Type: &evolved.Type, ErrorID: evolved.ErrorID, Next: evolved.Next})
	if err != nil || !Same(evolved.Type, again.Type) || again.Next != evolved.Next {
		t.Errorf("a column the table already holds changed: %v, %v", again, err)
	}
	for _, src := range []string{"latest", "subject:nope"} {
		if _, err := NewColumn(src, "clicks-value", schemas, Start{ID: 1000}); err == nil {
			t.Errorf("NewColumn(%q) made a column", src)
		}
	}
}
