// Package typed maps a record's value to typed columns: a registered
// schema becomes a column type (Type), and a payload in the Schema
// Registry's wire format decodes to a value of that type, shaped for a
// Parquet writer (parquet-go's Schema.Deconstruct). It is pure: the schema
// comes from the registry, the bytes from a segment, and nothing here
// does I/O. docs/typed.md has the mapping table.
package typed

import (
	"bytes"
	"cmp"
	"encoding/binary"
	"errors"
	"fmt"
	"maps"
	"slices"
	"strings"
	"unicode"

	pq "github.com/parquet-go/parquet-go"
)

// Kind is a column type's kind: Iceberg's primitive types, and its three
// nested ones.
type Kind int

const (
	Bool Kind = iota
	Int32
	Int64
	Float32
	Float64
	String
	Binary
	Fixed     // Size bytes
	Decimal   // Precision, Scale: int32 to 9 digits, int64 to 18, else Size bytes
	Date      // days since 1970-01-01, int32
	Time      // microseconds since midnight, int64
	Timestamp // microseconds since 1970-01-01 UTC, int64
	// LocalTimestamp is microseconds since 1970-01-01 on a clock of no
	// zone (Iceberg's timestamp, Parquet's isAdjustedToUTC false).
	LocalTimestamp
	UUID // 16 bytes
	Struct
	List
	Map // Key to Elem
)

// Type is one column's type, nested ones with their parts. ID is the
// Iceberg field id of the column, of a list's element or of a map's key
// or value (Number assigns them).
type Type struct {
	Kind     Kind
	Optional bool
	ID       int
	// Fields of a Struct, in order.
	Fields []Field
	// Elem is a List's element or a Map's value; Key a Map's key (a
	// required primitive).
	Elem, Key *Type
	// Size is a Fixed's bytes, and a Decimal's beyond 18 digits.
	Size             int
	Precision, Scale int
	// json marks a String that holds a value's JSON text: what a JSON
	// Schema without one type allows.
	json bool
}

// Field is a named part of a Struct.
type Field struct {
	Name string
	Type Type
}

// Number gives every column of t an Iceberg field id, from next on, in
// the order a reader walks the schema (a struct's fields, then each
// field's parts), and returns the next free id.
func Number(t *Type, next int) int {
	switch t.Kind {
	case Struct:
		for i := range t.Fields {
			t.Fields[i].Type.ID = next
			next++
		}
		for i := range t.Fields {
			next = Number(&t.Fields[i].Type, next)
		}
	case List:
		t.Elem.ID = next
		next = Number(t.Elem, next+1)
	case Map:
		t.Key.ID, t.Elem.ID = next, next+1
		next = Number(t.Elem, next+2)
	}
	return next
}

// Node is t as a Parquet schema node, with its field ids.
func Node(t Type) pq.Node {
	var n pq.Node
	switch t.Kind {
	case Bool:
		n = pq.Leaf(pq.BooleanType)
	case Int32:
		n = pq.Int(32)
	case Int64:
		n = pq.Int(64)
	case Float32:
		n = pq.Leaf(pq.FloatType)
	case Float64:
		n = pq.Leaf(pq.DoubleType)
	case String:
		n = pq.String()
	case Binary:
		n = pq.Leaf(pq.ByteArrayType)
	case Fixed:
		n = pq.Leaf(pq.FixedLenByteArrayType(t.Size))
	case Decimal:
		n = pq.Decimal(t.Scale, t.Precision, decimalPhysical(t))
	case Date:
		n = pq.Date()
	case Time:
		n = pq.Time(pq.Microsecond)
	case Timestamp:
		n = pq.Timestamp(pq.Microsecond)
	case LocalTimestamp:
		n = pq.TimestampAdjusted(pq.Microsecond, false)
	case UUID:
		n = pq.UUID()
	case Struct:
		g := pq.Group{}
		for _, f := range t.Fields {
			g[f.Name] = Node(f.Type)
		}
		// parquet-go orders a group's columns by name; readers find
		// them by field id (Iceberg) or name, and the table's schema
		// keeps the declared order.
		n = g
	case List:
		n = pq.List(Node(*t.Elem))
	case Map:
		n = pq.Map(Node(*t.Key), Node(*t.Elem))
	}
	if t.Optional {
		n = pq.Optional(n)
	} else {
		n = pq.Required(n)
	}
	if t.ID > 0 {
		n = pq.FieldID(n, t.ID)
	}
	return n
}

// decimalPhysical is the Parquet type a decimal of t's precision is
// stored as, the one Iceberg's spec names for it.
func decimalPhysical(t Type) pq.Type {
	switch {
	case t.Precision <= 9:
		return pq.Int32Type
	case t.Precision <= 18:
		return pq.Int64Type
	}
	return pq.FixedLenByteArrayType(t.Size)
}

// Confluent's wire format: a zero byte, the schema's id (4 bytes, big
// endian), the payload (for Protobuf, message indexes first).
const headerLen = 5

// ErrNoHeader says a value does not start with the wire format's header.
var ErrNoHeader = errors.New("not in the Schema Registry's wire format (a zero byte, then a 4-byte schema id)")

// Header splits a value in the wire format into its schema id and payload.
func Header(v []byte) (id int32, payload []byte, err error) {
	if len(v) < headerLen || v[0] != 0 {
		return 0, nil, ErrNoHeader
	}
	return int32(binary.BigEndian.Uint32(v[1:headerLen])), v[headerLen:], nil
}

// Decoder decodes payloads of one schema to values of its Type.
type Decoder interface {
	Type() Type
	// Decode returns the payload's value, shaped as Node(Type()) takes
	// it: a Struct a map[string]any by field name, a List a []any, a Map
	// its Entries in key order, every primitive its Parquet physical value
	// (int32, int64, float32, float64, bool, string, []byte), nil for
	// null. The error names what could not be decoded.
	Decode(payload []byte) (any, error)
}

// Entries is a Map's value: its entries, in key order.
type Entries []Entry

// Entry is one key and value of a Map.
type Entry struct{ Key, Value any }

// stringMap is m's entries in key order.
func stringMap(m map[string]any) Entries {
	out := make(Entries, 0, len(m))
	for _, k := range slices.Sorted(maps.Keys(m)) {
		out = append(out, Entry{k, m[k]})
	}
	return out
}

// MaxParts is how many parts (fields, elements, values, at every level)
// a column type may have. A schema that names a type twice expands it
// twice: twenty lines of Avro expand to millions of columns, which took a
// tiering run minutes and then more columns than a Parquet file holds.
const MaxParts = 10_000

// derivation is a column type being made from a schema: the named types
// it is inside of (a recursive schema has no column type), and the parts
// made so far.
type derivation[K comparable] struct {
	expanding map[K]bool
	parts     int
}

func newDerivation[K comparable]() *derivation[K] { return &derivation[K]{expanding: map[K]bool{}} }

// grow counts one more part, at at.
func (d *derivation[K]) grow(at string) error {
	if d.parts++; d.parts > MaxParts {
		return unsupported(at, fmt.Sprintf("more than %d parts (fields, elements, values) in all", MaxParts))
	}
	return nil
}

// MaxDepth is how deeply a column type nests (structs, lists, maps): no
// real schema nears it, and past a few thousand levels the table's
// metadata is more JSON nesting than encoding/json writes.
const MaxDepth = 64

// Check refuses a column type no table can hold: nested deeper than
// MaxDepth, a field with an empty name, or two fields of a struct whose
// names differ only in case (Spark and DuckDB find fields without regard
// to case, and would read one for the other).
func Check(t Type) error {
	if n := Leaves(t); n > MaxParts {
		return unsupported("value", fmt.Sprintf("%d columns, more than %d", n, MaxParts))
	}
	return check(t, "value", 0)
}

func check(t Type, at string, depth int) error {
	if depth > MaxDepth {
		return unsupported(at, fmt.Sprintf("nested deeper than %d levels", MaxDepth))
	}
	switch t.Kind {
	case Struct:
		seen := map[string]string{}
		for _, f := range t.Fields {
			if f.Name == "" {
				return unsupported(at, "a field with an empty name")
			}
			if strings.IndexFunc(f.Name, unicode.IsControl) >= 0 {
				return unsupported(at, fmt.Sprintf("a field name with a control character, %q, which DuckDB reads otherwise", f.Name))
			}
			if prev, ok := seen[strings.ToLower(f.Name)]; ok && prev == f.Name {
				return unsupported(at, fmt.Sprintf("two fields named %q", f.Name))
			} else if ok {
				return unsupported(at, fmt.Sprintf("fields %q and %q, whose names differ only in case, which Spark and DuckDB do not tell apart", prev, f.Name))
			}
			seen[strings.ToLower(f.Name)] = f.Name
			if err := check(f.Type, at+"."+f.Name, depth+1); err != nil {
				return err
			}
		}
	case List:
		return check(*t.Elem, at+"[]", depth+1)
	case Map:
		return check(*t.Elem, at+"{}", depth+1)
	}
	return nil
}

func checked(t Type, err error) (Type, error) {
	if err == nil {
		err = Check(t)
	}
	return t, err
}

// unsupported says a schema has a part no column type expresses.
func unsupported(at, why string) error {
	return fmt.Errorf("%s: %s", at, why)
}

// String is t as Iceberg writes types (struct<name: type, ...>, list<...>,
// map<string, ...>, decimal(P, S), fixed[N]), optional parts marked so.
func (t Type) String() string {
	var s string
	switch t.Kind {
	case Struct:
		parts := make([]string, len(t.Fields))
		for i, f := range t.Fields {
			parts[i] = f.Name + ": " + f.Type.String()
		}
		s = "struct<" + strings.Join(parts, ", ") + ">"
	case List:
		s = "list<" + t.Elem.String() + ">"
	case Map:
		s = "map<" + t.Key.String() + ", " + t.Elem.String() + ">"
	case Fixed:
		s = fmt.Sprintf("fixed[%d]", t.Size)
	case Decimal:
		s = fmt.Sprintf("decimal(%d, %d)", t.Precision, t.Scale)
	default:
		s = kindName(t.Kind)
	}
	if t.Optional {
		return "optional " + s
	}
	return s
}

// sortEntries orders a map's entries by key (strings, integers, booleans
// or a uint64's decimal bytes: the keys Protobuf allows).
func sortEntries(e Entries) {
	slices.SortFunc(e, func(a, b Entry) int {
		switch ka := a.Key.(type) {
		case string:
			return strings.Compare(ka, b.Key.(string))
		case int32:
			return cmp.Compare(ka, b.Key.(int32))
		case int64:
			return cmp.Compare(ka, b.Key.(int64))
		case []byte:
			return bytes.Compare(ka, b.Key.([]byte))
		case bool:
			return cmp.Compare(boolInt(ka), boolInt(b.Key.(bool)))
		}
		return 0
	})
}

func boolInt(b bool) int {
	if b {
		return 1
	}
	return 0
}
