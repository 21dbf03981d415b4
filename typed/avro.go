package typed

import (
	"fmt"
	"math"
	"math/big"
	"reflect"
	"time"

	"github.com/google/uuid"
	"github.com/hamba/avro/v2"
)

// FromAvro maps an Avro schema to a column type (docs/typed.md):
// records to structs, ["null", T] to an optional T, other unions to
// structs of one optional field per branch, enums to strings, arrays to
// lists, maps to maps, and the logical types to Iceberg's. A recursive
// schema has no column type: the error names where it recurses.
func FromAvro(s avro.Schema) (Type, error) {
	return checked(fromAvro(s, "value", newDerivation[string]()))
}

func fromAvro(s avro.Schema, at string, d *derivation[string]) (Type, error) {
	if err := d.grow(at); err != nil {
		return Type{}, err
	}
	switch s := s.(type) {
	case *avro.RefSchema:
		name := s.Schema().FullName()
		if d.expanding[name] {
			return Type{}, unsupported(at, fmt.Sprintf("%s refers to itself (a recursive schema has no column type)", name))
		}
		return fromAvro(s.Schema(), at, d)
	case *avro.RecordSchema:
		d.expanding[s.FullName()] = true
		defer delete(d.expanding, s.FullName())
		t := Type{Kind: Struct}
		for _, f := range s.Fields() {
			ft, err := fromAvro(f.Type(), at+"."+f.Name(), d)
			if err != nil {
				return Type{}, err
			}
			t.Fields = append(t.Fields, Field{Name: f.Name(), Type: ft})
		}
		if len(t.Fields) == 0 {
			return Type{}, unsupported(at, "a record with no fields has no column type")
		}
		return t, nil
	case *avro.UnionSchema:
		return unionType(s, at, d)
	case *avro.EnumSchema:
		return Type{Kind: String}, nil
	case *avro.ArraySchema:
		elem, err := fromAvro(s.Items(), at+"[]", d)
		if err != nil {
			return Type{}, err
		}
		return Type{Kind: List, Elem: &elem}, nil
	case *avro.MapSchema:
		elem, err := fromAvro(s.Values(), at+"{}", d)
		if err != nil {
			return Type{}, err
		}
		return Type{Kind: Map, Key: &Type{Kind: String}, Elem: &elem}, nil
	case *avro.FixedSchema:
		if l := s.Logical(); l != nil {
			switch l.Type() {
			case avro.Decimal:
				d := l.(*avro.DecimalLogicalSchema)
				return Type{Kind: Decimal, Precision: d.Precision(), Scale: d.Scale(), Size: s.Size()}, nil
			case avro.Duration:
				return durationType(), nil
			}
		}
		return Type{Kind: Fixed, Size: s.Size()}, nil
	case *avro.PrimitiveSchema:
		return primitiveType(s, at)
	case *avro.NullSchema:
		return Type{}, unsupported(at, "null alone has no column type")
	}
	return Type{}, unsupported(at, fmt.Sprintf("Avro type %s", s.Type()))
}

func primitiveType(s *avro.PrimitiveSchema, at string) (Type, error) {
	if l := s.Logical(); l != nil {
		switch l.Type() {
		case avro.Decimal:
			d := l.(*avro.DecimalLogicalSchema)
			return Type{Kind: Decimal, Precision: d.Precision(), Scale: d.Scale(), Size: decimalBytes(d.Precision())}, nil
		case avro.UUID:
			return Type{Kind: UUID}, nil
		case avro.Date:
			return Type{Kind: Date}, nil
		case avro.TimeMillis, avro.TimeMicros:
			return Type{Kind: Time}, nil
		case avro.TimestampMillis, avro.TimestampMicros:
			return Type{Kind: Timestamp}, nil
		case avro.LocalTimestampMillis, avro.LocalTimestampMicros:
			return Type{Kind: LocalTimestamp}, nil
		}
	}
	switch s.Type() {
	case avro.Boolean:
		return Type{Kind: Bool}, nil
	case avro.Int:
		return Type{Kind: Int32}, nil
	case avro.Long:
		return Type{Kind: Int64}, nil
	case avro.Float:
		return Type{Kind: Float32}, nil
	case avro.Double:
		return Type{Kind: Float64}, nil
	case avro.String:
		return Type{Kind: String}, nil
	case avro.Bytes:
		return Type{Kind: Binary}, nil
	}
	return Type{}, unsupported(at, fmt.Sprintf("Avro type %s", s.Type()))
}

// durationType is Avro's duration (a fixed of three little-endian
// unsigned ints): Iceberg has no interval type, so its parts.
func durationType() Type {
	return Type{Kind: Struct, Fields: []Field{
		{Name: "months", Type: Type{Kind: Int64}},
		{Name: "days", Type: Type{Kind: Int64}},
		{Name: "milliseconds", Type: Type{Kind: Int64}},
	}}
}

// DecimalSize is the fewest bytes that hold every unscaled value of
// precision digits, in two's complement: a decimal's beyond 18 digits.
func DecimalSize(precision int) int { return decimalBytes(precision) }

func decimalBytes(precision int) int {
	max := new(big.Int).Exp(big.NewInt(10), big.NewInt(int64(precision)), nil)
	return (max.BitLen() + 1 + 7) / 8 // a sign bit
}

// unionType: ["null", T] is an optional T; any other union a struct of
// one optional field per branch but null, named by the branch (a named
// type's name without its namespace), which is optional if null is a
// branch.
func unionType(s *avro.UnionSchema, at string, d *derivation[string]) (Type, error) {
	var branches []avro.Schema
	nullable := false
	for _, b := range s.Types() {
		if b.Type() == avro.Null {
			nullable = true
			continue
		}
		branches = append(branches, b)
	}
	if len(branches) == 0 {
		return Type{}, unsupported(at, "a union of null alone has no column type")
	}
	if len(branches) == 1 {
		t, err := fromAvro(branches[0], at, d)
		t.Optional = t.Optional || nullable
		return t, err
	}
	t := Type{Kind: Struct, Optional: nullable}
	for _, b := range branches {
		name := branchName(b)
		bt, err := fromAvro(b, at+"."+name, d)
		if err != nil {
			return Type{}, err
		}
		bt.Optional = true
		t.Fields = append(t.Fields, Field{Name: name, Type: bt})
	}
	return t, nil
}

// branchName is a union branch's field name: its type's name, a named
// type's without the namespace.
func branchName(s avro.Schema) string {
	if n, ok := s.(avro.NamedSchema); ok {
		return n.Name()
	}
	if r, ok := s.(*avro.RefSchema); ok {
		return r.Schema().Name()
	}
	return string(s.Type())
}

// AvroDecoder decodes Avro payloads (the wire format's, after its header)
// of one schema.
type AvroDecoder struct {
	schema avro.Schema
	typ    Type
}

// NewAvroDecoder is FromAvro's type with a decoder for it.
func NewAvroDecoder(s avro.Schema) (*AvroDecoder, error) {
	t, err := FromAvro(s)
	if err != nil {
		return nil, err
	}
	return &AvroDecoder{schema: s, typ: t}, nil
}

func (d *AvroDecoder) Type() Type { return d.typ }

// Decode decodes one payload with hamba/avro, then shapes its value as
// the column type takes it. Bytes left after the value are an error: the
// payload is not of this schema.
func (d *AvroDecoder) Decode(payload []byte) (v any, err error) {
	defer func() {
		// The decoder is handed untrusted bytes: a panic in it is one bad
		// record, not a failed run.
		if p := recover(); p != nil {
			v, err = nil, fmt.Errorf("avro: decoding: %v", p)
		}
	}()
	r := avro.NewReader(nil, 0, avro.WithReaderConfig(avroLimits)).Reset(payload)
	var raw any
	r.ReadVal(d.schema, &raw)
	if r.Error != nil {
		return nil, fmt.Errorf("avro: the payload is no %s: %w", avroName(d.schema), r.Error)
	}
	if r.Peek(); r.Error == nil {
		return nil, fmt.Errorf("avro: bytes left after the value: the payload is no %s", avroName(d.schema))
	}
	return shapeAvro(d.schema, d.typ, raw, "value")
}

// avroName is what an error calls a value of s: a named type's full
// name, else the type's.
func avroName(s avro.Schema) string {
	if n, ok := s.(avro.NamedSchema); ok {
		return n.FullName()
	}
	return string(s.Type())
}

// avroLimits bounds what one payload makes hamba/avro allocate: an
// array's block count is the payload's word, and an untrusted one of
// billions ran the process out of memory (FuzzAvroDecode found it). More
// items than maxAvroItems in one array is an error (the record keeps its
// bytes); strings and bytes keep hamba/avro's bound, 1 MiB each.
var avroLimits = avro.Config{MaxSliceAllocSize: maxAvroItems}.Freeze()

const maxAvroItems = 1 << 20

// shapeAvro turns hamba/avro's generic value of schema s into t's shape.
func shapeAvro(s avro.Schema, t Type, raw any, at string) (any, error) {
	if r, ok := s.(*avro.RefSchema); ok {
		s = r.Schema()
	}
	if u, ok := s.(*avro.UnionSchema); ok {
		return shapeUnion(u, t, raw, at)
	}
	if raw == nil {
		return nil, nil
	}
	bad := func() (any, error) {
		return nil, fmt.Errorf("%s: %T is not a %s", at, raw, s.Type())
	}
	switch s := s.(type) {
	case *avro.RecordSchema:
		m, ok := raw.(map[string]any)
		if !ok {
			return bad()
		}
		out := make(map[string]any, len(t.Fields))
		for i, f := range s.Fields() {
			v, err := shapeAvro(f.Type(), t.Fields[i].Type, m[f.Name()], at+"."+f.Name())
			if err != nil {
				return nil, err
			}
			out[f.Name()] = v
		}
		return out, nil
	case *avro.ArraySchema:
		a, ok := raw.([]any)
		if !ok {
			return bad()
		}
		out := make([]any, len(a))
		for i, e := range a {
			v, err := shapeAvro(s.Items(), *t.Elem, e, fmt.Sprintf("%s[%d]", at, i))
			if err != nil {
				return nil, err
			}
			out[i] = v
		}
		return out, nil
	case *avro.MapSchema:
		m, ok := raw.(map[string]any)
		if !ok {
			return bad()
		}
		out := stringMap(m)
		for i, e := range out {
			v, err := shapeAvro(s.Values(), *t.Elem, e.Value, at+"{"+e.Key.(string)+"}")
			if err != nil {
				return nil, err
			}
			out[i].Value = v
		}
		return out, nil
	}
	return shapePrimitive(t, raw, at)
}

// shapeUnion: hamba/avro gives a union's value as its Go value when it
// knows the branch's Go type (the primitives), else as a one-entry map
// from the branch's name (a named type's full name) to its value. A
// union of one type besides null is that type; others are a struct with
// the chosen branch's field set.
func shapeUnion(u *avro.UnionSchema, t Type, raw any, at string) (any, error) {
	if raw == nil {
		return nil, nil
	}
	if !isBranchStruct(u) {
		for _, b := range u.Types() {
			if b.Type() != avro.Null {
				return shapeAvro(b, t, raw, at)
			}
		}
	}
	if m, ok := raw.(map[string]any); ok && len(m) == 1 {
		for name, v := range m {
			if i, b := branchOf(u, name); b != nil {
				f := t.Fields[i]
				shaped, err := shapeAvro(b, f.Type, v, at+"."+f.Name)
				if err != nil {
					return nil, err
				}
				return map[string]any{f.Name: shaped}, nil
			}
		}
	}
	i := 0
	for _, b := range u.Types() {
		if b.Type() == avro.Null {
			continue
		}
		f := t.Fields[i]
		i++
		if shaped, err := shapeAvro(b, f.Type, raw, at+"."+f.Name); err == nil {
			return map[string]any{f.Name: shaped}, nil
		}
	}
	return nil, fmt.Errorf("%s: a union's value %T is none of its branches", at, raw)
}

// isBranchStruct says whether u maps to a struct of its branches (two or
// more besides null).
func isBranchStruct(u *avro.UnionSchema) bool {
	n := 0
	for _, b := range u.Types() {
		if b.Type() != avro.Null {
			n++
		}
	}
	return n > 1
}

// branchOf finds the branch hamba/avro names name (a named type's full
// name, else the type's), with its index among the non-null branches.
func branchOf(u *avro.UnionSchema, name string) (int, avro.Schema) {
	i := 0
	for _, b := range u.Types() {
		if b.Type() == avro.Null {
			continue
		}
		full := string(b.Type())
		if n, ok := b.(avro.NamedSchema); ok {
			full = n.FullName()
		} else if r, ok := b.(*avro.RefSchema); ok {
			full = r.Schema().FullName()
		}
		if l, ok := b.(avro.LogicalTypeSchema); ok && l.Logical() != nil {
			if alt := string(b.Type()) + "." + string(l.Logical().Type()); name == alt {
				return i, b
			}
		}
		if full == name {
			return i, b
		}
		i++
	}
	return 0, nil
}

// shapePrimitive converts hamba/avro's Go value of a primitive or logical
// type to t's Parquet physical value.
func shapePrimitive(t Type, raw any, at string) (any, error) {
	bad := func() (any, error) {
		return nil, fmt.Errorf("%s: %T is not a %s", at, raw, kindName(t.Kind))
	}
	switch t.Kind {
	case Bool:
		if b, ok := raw.(bool); ok {
			return b, nil
		}
	case Int32:
		if n, ok := raw.(int); ok {
			return int32(n), nil
		}
	case Int64:
		if n, ok := raw.(int64); ok {
			return n, nil
		}
	case Float32:
		if f, ok := raw.(float32); ok {
			return f, nil
		}
	case Float64:
		if f, ok := raw.(float64); ok {
			return f, nil
		}
	case String:
		if s, ok := raw.(string); ok {
			return s, nil
		}
	case Binary:
		if b, ok := raw.([]byte); ok {
			return b, nil
		}
	case Fixed:
		return fixedBytes(raw, t.Size, at)
	case UUID:
		s, ok := raw.(string)
		if !ok {
			return bad()
		}
		u, err := uuid.Parse(s)
		if err != nil {
			return nil, fmt.Errorf("%s: %q is not a UUID", at, s)
		}
		return u[:], nil
	case Date:
		if d, ok := raw.(time.Time); ok {
			return int32(d.Unix() / 86400), nil
		}
	case Time:
		if d, ok := raw.(time.Duration); ok {
			return d.Microseconds(), nil
		}
	case Timestamp, LocalTimestamp:
		if ts, ok := raw.(time.Time); ok {
			// A timestamp-millis past ±292,000 years has no microseconds.
			if sec := ts.Unix(); sec > math.MaxInt64/1_000_000-1 || sec < math.MinInt64/1_000_000+1 {
				return nil, fmt.Errorf("%s: %d seconds since 1970 is past what microseconds hold", at, sec)
			}
			return ts.UnixMicro(), nil
		}
	case Decimal:
		r, ok := raw.(*big.Rat)
		if !ok {
			return bad()
		}
		return decimalValue(t, r, at)
	case Struct: // Avro's duration
		if d, ok := raw.(avro.LogicalDuration); ok {
			return map[string]any{"months": int64(d.Months), "days": int64(d.Days), "milliseconds": int64(d.Milliseconds)}, nil
		}
	}
	return bad()
}

func fixedBytes(raw any, size int, at string) (any, error) {
	// hamba/avro gives a fixed as a [size]byte array.
	if v := reflect.ValueOf(raw); v.Kind() == reflect.Array && v.Type().Elem().Kind() == reflect.Uint8 && v.Len() == size {
		out := make([]byte, size)
		reflect.Copy(reflect.ValueOf(out), v)
		return out, nil
	}
	return nil, fmt.Errorf("%s: %T is not a fixed of %d bytes", at, raw, size)
}

// decimalValue is a decimal's unscaled value as t stores it: int32 or
// int64 to 18 digits, else big-endian two's complement in t.Size bytes.
func decimalValue(t Type, r *big.Rat, at string) (any, error) {
	scaled := new(big.Rat).Mul(r, new(big.Rat).SetInt(new(big.Int).Exp(big.NewInt(10), big.NewInt(int64(t.Scale)), nil)))
	if !scaled.IsInt() {
		return nil, fmt.Errorf("%s: %s has more than %d decimal places", at, r.FloatString(t.Scale+2), t.Scale)
	}
	n := scaled.Num()
	limit := new(big.Int).Exp(big.NewInt(10), big.NewInt(int64(t.Precision)), nil)
	if new(big.Int).Abs(n).Cmp(limit) >= 0 {
		return nil, fmt.Errorf("%s: %s has more than %d digits", at, r.FloatString(t.Scale), t.Precision)
	}
	switch {
	case t.Precision <= 9:
		return int32(n.Int64()), nil
	case t.Precision <= 18:
		return n.Int64(), nil
	}
	return twosComplement(n, t.Size), nil
}

// twosComplement is n big-endian in size bytes, sign-extended.
func twosComplement(n *big.Int, size int) []byte {
	out := make([]byte, size)
	if n.Sign() >= 0 {
		n.FillBytes(out)
		return out
	}
	// -n = ^(n-1)... as 2^(8*size) + n.
	mod := new(big.Int).Lsh(big.NewInt(1), uint(8*size))
	new(big.Int).Add(mod, n).FillBytes(out)
	return out
}

func kindName(k Kind) string {
	return [...]string{"boolean", "int", "long", "float", "double", "string", "binary", "fixed", "decimal",
		"date", "time", "timestamptz", "timestamp", "uuid", "struct", "list", "map"}[k]
}
