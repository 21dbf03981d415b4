// Package format parses the three schema types the registry keeps (Avro,
// Protobuf, JSON Schema) with the libraries built for them, and says what
// stops data written with one schema from being read with another. It is
// pure: no I/O, so the registry's decisions can be tested without a store.
package format

import (
	"bytes"
	"encoding/json"
	"fmt"
	"strings"

	"github.com/hamba/avro/v2"
	"github.com/santhosh-tekuri/jsonschema/v6"
	"google.golang.org/protobuf/reflect/protoreflect"
)

// Type is a schema's type, as the REST API's schemaType names it.
type Type string

const (
	Avro     Type = "AVRO"
	Protobuf Type = "PROTOBUF"
	JSON     Type = "JSON"
)

// Types are the types served, in the order GET /schemas/types lists them.
var Types = []Type{JSON, Protobuf, Avro}

// ParseType reads a schemaType: absent is Avro, as in Confluent's API.
func ParseType(s string) (Type, error) {
	switch t := Type(strings.ToUpper(s)); t {
	case "":
		return Avro, nil
	case Avro, Protobuf, JSON:
		return t, nil
	}
	return "", fmt.Errorf("unknown schema type %q: want AVRO, PROTOBUF or JSON", s)
}

// Ref is a referenced schema's text under the name the referring schema
// uses for it (an Avro full name, a Protobuf import path, a JSON Schema
// $ref URL).
type Ref struct {
	Name, Text string
}

// Schema is a parsed schema; exactly one of its fields is set, by Type.
type Schema struct {
	Type  Type
	avro  avro.Schema
	proto protoreflect.FileDescriptor
	json  *jsonschema.Schema
}

// MaxNesting is how deeply an Avro or JSON Schema's JSON text may nest.
// No real schema nears it; compiling a JSON Schema nested thousands deep
// took minutes of CPU (cubic in the depth), and no column type is made of
// more than typed.MaxDepth levels anyway.
const MaxNesting = 256

// shallow refuses JSON text nested deeper than MaxNesting, counting the
// brackets outside strings.
func shallow(text string) error {
	depth, in, esc := 0, false, false
	for i := 0; i < len(text); i++ {
		c := text[i]
		switch {
		case in && esc:
			esc = false
		case in && c == '\\':
			esc = true
		case c == '"':
			in = !in
		case in:
		case c == '{' || c == '[':
			if depth++; depth > MaxNesting {
				return fmt.Errorf("the schema nests deeper than %d levels", MaxNesting)
			}
		case c == '}' || c == ']':
			depth--
		}
	}
	return nil
}

// Parse parses text as a schema of type t. refs are every schema it
// references, directly or through another reference, each after the
// ones it references itself. The error names what is wrong.
func Parse(t Type, text string, refs []Ref) (_ *Schema, err error) {
	defer contain(t, "parser", &err)
	s := &Schema{Type: t}
	if t == Avro || t == JSON {
		for _, src := range append([]Ref{{Text: text}}, refs...) {
			if err := shallow(src.Text); err != nil {
				return nil, err
			}
		}
	}
	switch t {
	case Avro:
		s.avro, err = parseAvro(text, refs)
	case Protobuf:
		s.proto, err = parseProtobuf(text, refs)
	case JSON:
		s.json, err = parseJSON(text, refs)
	default:
		err = fmt.Errorf("unknown schema type %q", t)
	}
	if err != nil {
		return nil, err
	}
	return s, nil
}

// Canonical is the text two registrations of one schema share: JSON
// (Avro's and JSON Schema's) without its insignificant whitespace, so the
// same schema sent indented or not gets one id. Protobuf's text is kept as
// sent, trimmed.
func Canonical(t Type, text string) string {
	if t == Protobuf {
		return strings.TrimSpace(text)
	}
	var b bytes.Buffer
	if err := json.Compact(&b, []byte(text)); err != nil {
		return strings.TrimSpace(text)
	}
	return b.String()
}

// Check says why data written with writer cannot be read with reader:
// nothing when it can. BACKWARD compatibility is Check(new, old), FORWARD
// Check(old, new).
func Check(reader, writer *Schema) (why []string) {
	var err error
	defer func() {
		if err != nil {
			why = []string{err.Error()}
		}
	}()
	defer contain(reader.Type, "compatibility check", &err)
	if reader.Type != writer.Type {
		return []string{fmt.Sprintf("the schema type changed from %s to %s", writer.Type, reader.Type)}
	}
	switch reader.Type {
	case Avro:
		return checkAvro(reader.avro, writer.avro)
	case Protobuf:
		return checkProtobuf(reader.proto, writer.proto)
	default:
		return checkJSON(reader.json, writer.json)
	}
}

// contain turns a panic of a library run on a client's schema into an
// error: hamba/avro, for one, indexes an empty union's first type when it
// checks a field's default. The schema is then refused (or found
// incompatible), not the connection dropped.
func contain(t Type, what string, err *error) {
	if r := recover(); r != nil {
		*err = fmt.Errorf("the %s %s failed on this schema: %v", t, what, r)
	}
}

// Avro is the parsed Avro schema (nil unless Type is Avro): what typed
// columns are mapped from.
func (s *Schema) Avro() avro.Schema { return s.avro }

// Protobuf is the parsed Protobuf schema's file (nil unless Type is
// Protobuf): what typed columns are mapped from.
func (s *Schema) Protobuf() protoreflect.FileDescriptor { return s.proto }

// JSON is the compiled JSON Schema (nil unless Type is JSON): what typed
// columns are mapped from.
func (s *Schema) JSON() *jsonschema.Schema { return s.json }
