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
// schemas, subjects to their latest id.
type schemaMap struct {
	byID   map[int]*format.Schema
	latest map[string]int
}

func (m schemaMap) ByID(id int) (*format.Schema, error) {
	if s, ok := m.byID[id]; ok {
		return s, nil
	}
	return nil, fmt.Errorf("schema %d not found", id)
}

func (m schemaMap) Latest(subject string) (int, *format.Schema, error) {
	id, ok := m.latest[subject]
	if !ok {
		return 0, nil, fmt.Errorf("subject %s not found", subject)
	}
	return id, m.byID[id], nil
}

func withHeader(id byte, payload []byte) []byte { return append([]byte{0, 0, 0, 0, id}, payload...) }

// A column takes its columns from a subject's latest version and decodes
// each value by the schema its header names; a value it cannot decode,
// or of a schema with other columns, is an error naming why.
func TestColumnDecodesBySchemaID(t *testing.T) {
	v1 := `{"type": "record", "name": "Click", "fields": [{"name": "url", "type": "string"}]}`
	v2 := `{"type": "record", "name": "Click", "fields": [{"name": "url", "type": "string"}, {"name": "ms", "type": "long", "default": 0}]}`
	parse := func(typ format.Type, text string) *format.Schema {
		s, err := format.Parse(typ, text, nil)
		if err != nil {
			t.Fatal(err)
		}
		return s
	}
	schemas := schemaMap{
		byID:   map[int]*format.Schema{1: parse(format.Avro, v1), 2: parse(format.Avro, v2), 3: parse(format.Protobuf, shopProto)},
		latest: map[string]int{"clicks-value": 1, "orders-value": 3},
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
		{"schema_id", "clicks-value", withHeader(2, two), "", "schema id 2 has other columns than the table's (schema id 1)"},
		{"schema_id", "clicks-value", withHeader(9, one), "", "schema id 9: schema 9 not found"},
		{"schema_id", "clicks-value", one, "", "not in the Schema Registry's wire format"},
		{"schema_id", "clicks-value", withHeader(1, one[:1]), "", "the payload is no Click"},
		{"subject:clicks-value", "other-value", one, "map[url:/a]", ""},
		{"subject:clicks-value", "other-value", withHeader(1, one), "map[url:/a]", ""},
		{"schema_id", "orders-value", withHeader(3, order), "42", ""},
		{"schema_id", "orders-value", withHeader(3, []byte{0x7f}), "", "schema id 3"},
	} {
		c, err := NewColumn(tc.source, tc.subject, schemas, 1000)
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

	c, err := NewColumn("schema_id", "clicks-value", schemas, 1000)
	if err != nil {
		t.Fatal(err)
	}
	if c.Type.ID != 1000 || c.Type.Fields[0].Type.ID != 1001 || c.ID != 1 {
		t.Errorf("column %s: id %d, url's %d, schema id %d", c.Type, c.Type.ID, c.Type.Fields[0].Type.ID, c.ID)
	}
	for _, src := range []string{"latest", "subject:nope"} {
		if _, err := NewColumn(src, "clicks-value", schemas, 1000); err == nil {
			t.Errorf("NewColumn(%q) made a column", src)
		}
	}
}
