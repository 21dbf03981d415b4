package format

import (
	"strings"
	"testing"
)

// Each change between two schemas of a type, read both ways: backward is
// the new schema reading the old one's data, forward the old reading the
// new's.
func TestCheck(t *testing.T) {
	rec := func(fields string) string {
		return `{"type":"record","name":"R","namespace":"acme","fields":[` + fields + `]}`
	}
	proto := func(body string) string { return "syntax = \"proto3\";\npackage acme;\n" + body }
	proto2 := func(body string) string { return "syntax = \"proto2\";\npackage acme;\n" + body }
	for _, tc := range []struct {
		name                string
		typ                 Type
		old, new            string
		backward, forward   bool
		backwardWhy, fwdWhy string // words the first reason has, when refused
	}{
		{"avro: field added with a default", Avro, rec(`{"name":"a","type":"int"}`), rec(`{"name":"a","type":"int"},{"name":"b","type":"string","default":""}`), true, true, "", ""},
		{"avro: field added without a default", Avro, rec(`{"name":"a","type":"int"}`), rec(`{"name":"a","type":"int"},{"name":"b","type":"string"}`), false, true, "field b", ""},
		{"avro: field removed that had no default", Avro, rec(`{"name":"a","type":"int"},{"name":"b","type":"string"}`), rec(`{"name":"a","type":"int"}`), true, false, "", "field b"},
		{"avro: int widened to long", Avro, rec(`{"name":"a","type":"int"}`), rec(`{"name":"a","type":"long"}`), true, false, "", "long"},
		{"avro: record renamed", Avro, rec(`{"name":"a","type":"int"}`), `{"type":"record","name":"S","namespace":"acme","fields":[{"name":"a","type":"int"}]}`, false, false, "name", "name"},
		{"avro: enum symbol added", Avro, `{"type":"enum","name":"E","symbols":["A"]}`, `{"type":"enum","name":"E","symbols":["A","B"]}`, true, false, "", "B"},

		{"protobuf: field added", Protobuf, proto("message M { int32 a = 1; }"), proto("message M { int32 a = 1; string b = 2; }"), true, true, "", ""},
		{"protobuf: field renamed", Protobuf, proto("message M { int32 a = 1; }"), proto("message M { int32 b = 1; }"), true, true, "", ""},
		{"protobuf: int32 to int64, the same varint", Protobuf, proto("message M { int32 a = 1; }"), proto("message M { int64 a = 1; }"), true, true, "", ""},
		{"protobuf: field number reused as a string", Protobuf, proto("message M { int32 a = 1; }"), proto("message M { string a = 1; }"), false, false, "wire", "wire"},
		{"protobuf: message type of a field changed", Protobuf, proto("message A {} message B {} message M { A a = 1; }"), proto("message A {} message B {} message M { B a = 1; }"), false, false, "acme.B", "acme.A"},
		{"protobuf: message removed", Protobuf, proto("message M { int32 a = 1; } message N {}"), proto("message M { int32 a = 1; }"), false, true, "acme.N removed", ""},
		{"protobuf: package changed", Protobuf, proto("message M {}"), "syntax = \"proto3\";\npackage other;\nmessage M {}", false, false, "package", "package"},
		{"protobuf: numeric field made repeated", Protobuf, proto("message M { int32 a = 1; }"), proto("message M { repeated int32 a = 1; }"), false, false, "repeated", "repeated"},
		{"protobuf: string field made repeated", Protobuf, proto("message M { string a = 1; }"), proto("message M { repeated string a = 1; }"), true, true, "", ""},
		{"protobuf: field moved into a oneof with another", Protobuf, proto("message M { int32 a = 1; int32 b = 2; }"), proto("message M { oneof o { int32 a = 1; int32 b = 2; } }"), false, true, "oneof", ""},
		{"protobuf: field removed from a oneof", Protobuf, proto("message M { oneof o { int32 a = 1; string b = 2; } }"), proto("message M { oneof o { int32 a = 1; } }"), false, true, "removed from oneof o", ""},
		{"protobuf: nested message removed", Protobuf, proto("message M { message N {} N n = 1; }"), proto("message M {}"), false, true, "acme.M.N removed", ""},
		{"protobuf: enum field read as int32", Protobuf, proto("enum E { A = 0; } message M { E e = 1; }"), proto("enum E { A = 0; } message M { int32 e = 1; }"), true, true, "", ""},
		{"protobuf: map made a plain message field", Protobuf, proto("message V {} message M { map<string, V> m = 1; }"), proto("message V {} message M { V m = 1; }"), false, false, "changed type", "changed type"},
		{"protobuf: required field added", Protobuf, proto2("message M { optional int32 a = 1; }"), proto2("message M { optional int32 a = 1; required int32 b = 2; }"), false, false, "required", "required"},

		{"json: property added to a closed model", JSON, `{"type":"object","properties":{"a":{"type":"string"}},"additionalProperties":false}`,
			`{"type":"object","properties":{"a":{"type":"string"},"b":{"type":"integer"}},"additionalProperties":false}`, true, false, "", "closed"},
		{"json: property added to an open model", JSON, `{"type":"object","properties":{"a":{"type":"string"}}}`,
			`{"type":"object","properties":{"a":{"type":"string"},"b":{"type":"integer"}}}`, false, true, "open", ""},
		{"json: property's type changed", JSON, `{"type":"object","properties":{"a":{"type":"string"}}}`, `{"type":"object","properties":{"a":{"type":"integer"}}}`, false, false, "type", "type"},
		{"json: integer widened to number", JSON, `{"type":"integer"}`, `{"type":"number"}`, true, false, "", "type"},
		{"json: property made required", JSON, `{"type":"object","properties":{"a":{"type":"string"}}}`, `{"type":"object","properties":{"a":{"type":"string"}},"required":["a"]}`, false, true, "required", ""},
		{"json: content model closed", JSON, `{"type":"object","properties":{"a":{"type":"string"}}}`, `{"type":"object","properties":{"a":{"type":"string"}},"additionalProperties":false}`, false, true, "additionalProperties", ""},
		{"json: enum value removed", JSON, `{"enum":["a","b"]}`, `{"enum":["a"]}`, false, true, "removed", ""},
		{"json: minimum raised", JSON, `{"type":"integer","minimum":0}`, `{"type":"integer","minimum":1}`, false, true, "minimum raised to 1", ""},
		{"json: maxLength lowered", JSON, `{"type":"string","maxLength":10}`, `{"type":"string","maxLength":5}`, false, true, "maxLength lowered to 5", ""},
		{"json: minItems added", JSON, `{"type":"array"}`, `{"type":"array","minItems":2}`, false, true, "minItems raised to 2", ""},
		{"json: pattern added", JSON, `{"type":"string"}`, `{"type":"string","pattern":"^a"}`, false, true, "pattern", ""},
		{"json: const changed", JSON, `{"const":"a"}`, `{"const":"b"}`, false, false, "const b", "const a"},
		{"json: multipleOf widened", JSON, `{"type":"integer","multipleOf":4}`, `{"type":"integer","multipleOf":2}`, true, false, "", "multipleOf 4"},
		{"json: through a $ref", JSON, `{"$defs":{"s":{"type":"string"}},"type":"object","properties":{"a":{"$ref":"#/$defs/s"}}}`,
			`{"$defs":{"s":{"type":"integer"}},"type":"object","properties":{"a":{"$ref":"#/$defs/s"}}}`, false, false, "type", "type"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			old, err := Parse(tc.typ, tc.old, nil)
			if err != nil {
				t.Fatalf("old: %v", err)
			}
			new, err := Parse(tc.typ, tc.new, nil)
			if err != nil {
				t.Fatalf("new: %v", err)
			}
			for _, dir := range []struct {
				name           string
				reader, writer *Schema
				ok             bool
				why            string
			}{{"backward", new, old, tc.backward, tc.backwardWhy}, {"forward", old, new, tc.forward, tc.fwdWhy}} {
				why := Check(dir.reader, dir.writer)
				if (len(why) == 0) != dir.ok {
					t.Errorf("%s: %q, want compatible %t", dir.name, why, dir.ok)
				}
				if !dir.ok && len(why) > 0 && !strings.Contains(why[0], dir.why) {
					t.Errorf("%s: %q does not name %q", dir.name, why[0], dir.why)
				}
			}
		})
	}
}

// A schema that does not parse is refused with what is wrong in it.
func TestParseRefusesInvalidSchemas(t *testing.T) {
	for _, tc := range []struct {
		name string
		typ  Type
		text string
		want string
	}{
		{"avro: not JSON nor a type name", Avro, `{"type":`, "avro"},
		{"avro: record without a name", Avro, `{"type":"record","fields":[]}`, "name"},
		{"avro: unknown type", Avro, `{"type":"record","name":"R","fields":[{"name":"a","type":"integr"}]}`, "integr"},
		{"avro: a default for an empty union, which panics hamba/avro", Avro, `{"type":"record","name":"A","fields":[{"name":"a","type":[],"default":{}}]}`, "parser failed"},
		{"protobuf: syntax error", Protobuf, "syntax = \"proto3\";\nmessage M { int32 a = ; }", "schema.proto:2"},
		{"protobuf: unknown type", Protobuf, "syntax = \"proto3\";\nmessage M { Nope a = 1; }", "Nope"},
		{"protobuf: import of a file not referenced", Protobuf, "syntax = \"proto3\";\nimport \"other.proto\";\nmessage M {}", "other.proto"},
		{"protobuf: no message", Protobuf, "syntax = \"proto3\";\nenum E { A = 0; }", "no message"},
		{"json: not JSON", JSON, `{"type":`, "EOF"},
		{"json: type not a type", JSON, `{"type":"strin"}`, "strin"},
		{"json: a $ref outside the schema and its references", JSON, `{"$ref":"file:///etc/passwd"}`, "file:///etc/passwd"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			_, err := Parse(tc.typ, tc.text, nil)
			if err == nil || !strings.Contains(err.Error(), tc.want) {
				t.Fatalf("Parse: %v, want an error naming %q", err, tc.want)
			}
		})
	}
}

// References are parsed first, under the names the schema uses: Avro's
// named types, Protobuf's imports, JSON Schema's $ref URLs.
func TestParseWithReferences(t *testing.T) {
	for _, tc := range []struct {
		name string
		typ  Type
		text string
		refs []Ref
	}{
		{"avro", Avro, `{"type":"record","name":"Person","namespace":"acme","fields":[{"name":"home","type":"acme.Address"}]}`,
			[]Ref{{"acme.Address", `{"type":"record","name":"Address","namespace":"acme","fields":[{"name":"street","type":"string"}]}`}}},
		{"protobuf", Protobuf, "syntax = \"proto3\";\npackage acme;\nimport \"address.proto\";\nimport \"google/protobuf/timestamp.proto\";\nmessage Person { Address home = 1; google.protobuf.Timestamp born = 2; }",
			[]Ref{{"address.proto", "syntax = \"proto3\";\npackage acme;\nmessage Address { string street = 1; }"}}},
		{"json", JSON, `{"type":"object","properties":{"home":{"$ref":"address.json"}}}`,
			[]Ref{{"address.json", `{"type":"object","properties":{"street":{"type":"string"}}}`}}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			if _, err := Parse(tc.typ, tc.text, tc.refs); err != nil {
				t.Fatalf("with its reference: %v", err)
			}
			if _, err := Parse(tc.typ, tc.text, nil); err == nil {
				t.Fatal("without its reference: parsed")
			}
		})
	}
}

// One schema sent indented or not is one schema.
func TestCanonical(t *testing.T) {
	a := Canonical(Avro, `{"type": "record", "name": "R",
		"fields": []}`)
	if b := Canonical(Avro, `{"type":"record","name":"R","fields":[]}`); a != b {
		t.Fatalf("%q and %q differ", a, b)
	}
	if got := Canonical(Protobuf, "\n message M {}\n"); got != "message M {}" {
		t.Fatalf("protobuf: %q", got)
	}
}

// A schema nested past MaxNesting is refused at once, not compiled for
// minutes.
func TestDeepSchemasAreRefused(t *testing.T) {
	deep := `{"type": "string"}`
	for range MaxNesting {
		deep = `{"type": "object", "properties": {"a": ` + deep + `}}`
	}
	if _, err := Parse(JSON, deep, nil); err == nil || !strings.Contains(err.Error(), "nests deeper than 256 levels") {
		t.Errorf("a JSON Schema nested %d deep: %v", MaxNesting+1, err)
	}
	// Brackets inside strings are not nesting.
	doc := `{"type": "record", "name": "R", "doc": "` + strings.Repeat("[{", 300) + `", "fields": [{"name": "a", "type": "int"}]}`
	if _, err := Parse(Avro, doc, nil); err != nil {
		t.Errorf("an Avro schema with brackets in its doc: %v", err)
	}
}
