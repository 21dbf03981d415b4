package typed

import (
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"math"
	"math/big"
	"slices"
	"strconv"
	"strings"
	"time"
	"unicode/utf8"

	"github.com/google/uuid"
	"github.com/santhosh-tekuri/jsonschema/v6"
)

// FromJSONSchema maps a JSON Schema to a column type (docs/typed.md): an
// object with properties to a struct (its properties in name order, the
// required ones required), one with only additionalProperties to a map,
// an array with items to a list, the scalar types to theirs (with the
// date-time, date, time and uuid formats to Iceberg's), a type with
// "null" among two to an optional one. What has no one type (several
// types, oneOf, anyOf, an object or array of any shape) is its JSON text,
// a string: lossless, and SQL engines' JSON functions read it.
func FromJSONSchema(s *jsonschema.Schema) (Type, error) {
	return checked(fromJSON(s, "value", newDerivation[*jsonschema.Schema]()))
}

// deref follows $ref: what the compiler resolved.
func deref(s *jsonschema.Schema) *jsonschema.Schema {
	for i := 0; s != nil && s.Ref != nil && i < 32; i++ {
		s = s.Ref
	}
	return s
}

func fromJSON(s *jsonschema.Schema, at string, d *derivation[*jsonschema.Schema]) (Type, error) {
	if err := d.grow(at); err != nil {
		return Type{}, err
	}
	s = deref(s)
	if s == nil || (s.Bool != nil && *s.Bool) {
		return Type{Kind: String, Optional: true, json: true}, nil // anything: its text
	}
	if s.Bool != nil {
		return Type{}, unsupported(at, "the schema false accepts no value")
	}
	if d.expanding[s] {
		return Type{}, unsupported(at, "the schema refers to itself (a recursive schema has no column type)")
	}
	d.expanding[s] = true
	defer delete(d.expanding, s)
	types := []string{}
	if s.Types != nil {
		types = s.Types.ToStrings()
	}
	nullable := slices.Contains(types, "null")
	types = slices.DeleteFunc(types, func(t string) bool { return t == "null" })
	if len(types) != 1 || len(s.OneOf) > 0 || len(s.AnyOf) > 0 {
		if len(types) == 0 && nullable {
			return Type{}, unsupported(at, "null alone has no column type")
		}
		return Type{Kind: String, Optional: true, json: true}, nil
	}
	t, err := jsonType(s, types[0], at, d)
	t.Optional = t.Optional || nullable
	return t, err
}

func jsonType(s *jsonschema.Schema, typ, at string, d *derivation[*jsonschema.Schema]) (Type, error) {
	switch typ {
	case "boolean":
		return Type{Kind: Bool}, nil
	case "integer":
		return Type{Kind: Int64}, nil
	case "number":
		return Type{Kind: Float64}, nil
	case "string":
		if s.Format != nil {
			switch s.Format.Name {
			case "date-time":
				return Type{Kind: Timestamp}, nil
			case "date":
				return Type{Kind: Date}, nil
			case "time":
				return Type{Kind: Time}, nil
			case "uuid":
				return Type{Kind: UUID}, nil
			}
		}
		return Type{Kind: String}, nil
	case "array":
		items, _ := s.Items.(*jsonschema.Schema)
		if s.Items2020 != nil {
			items = s.Items2020
		}
		if items == nil || len(s.PrefixItems) > 0 {
			return Type{Kind: String, json: true}, nil
		}
		elem, err := fromJSON(items, at+"[]", d)
		if err != nil {
			return Type{}, err
		}
		return Type{Kind: List, Elem: &elem}, nil
	case "object":
		if len(s.Properties) == 0 {
			if extra, ok := s.AdditionalProperties.(*jsonschema.Schema); ok {
				elem, err := fromJSON(extra, at+"{}", d)
				if err != nil {
					return Type{}, err
				}
				return Type{Kind: Map, Key: &Type{Kind: String}, Elem: &elem}, nil
			}
			return Type{Kind: String, json: true}, nil
		}
		t := Type{Kind: Struct}
		for _, name := range slices.Sorted(func(yield func(string) bool) {
			for k := range s.Properties {
				if !yield(k) {
					return
				}
			}
		}) {
			ft, err := fromJSON(s.Properties[name], at+"."+name, d)
			if err != nil {
				return Type{}, err
			}
			if !slices.Contains(s.Required, name) {
				ft.Optional = true
			}
			t.Fields = append(t.Fields, Field{Name: name, Type: ft})
		}
		return t, nil
	}
	return Type{}, unsupported(at, fmt.Sprintf("JSON type %q", typ))
}

// JSONDecoder decodes JSON payloads (after the wire format's header) of
// one schema.
type JSONDecoder struct{ typ Type }

// NewJSONDecoder is FromJSONSchema's type with a decoder for it.
func NewJSONDecoder(s *jsonschema.Schema) (*JSONDecoder, error) {
	t, err := FromJSONSchema(s)
	if err != nil {
		return nil, err
	}
	return &JSONDecoder{typ: t}, nil
}

func (d *JSONDecoder) Type() Type { return d.typ }

// Decode parses the payload (numbers kept exact) and shapes it as the
// column type takes it. The schema is not validated here (the producer's
// serializer did, and strata.value.schema.validation can): a value of
// another shape is an error naming where.
func (d *JSONDecoder) Decode(payload []byte) (any, error) {
	if !utf8.Valid(payload) {
		// encoding/json would put U+FFFD for the bad bytes, silently.
		return nil, errors.New("json: the value is not UTF-8")
	}
	dec := json.NewDecoder(bytes.NewReader(payload))
	dec.UseNumber()
	var v any
	if err := dec.Decode(&v); err != nil {
		return nil, fmt.Errorf("json: %w", err)
	}
	if dec.More() {
		return nil, errors.New("json: more after the value")
	}
	return shapeJSON(d.typ, v, "value")
}

func shapeJSON(t Type, v any, at string) (any, error) {
	if v == nil {
		if !t.Optional {
			return nil, fmt.Errorf("%s: null or absent, and the schema requires it", at)
		}
		return nil, nil
	}
	if t.json {
		b, err := json.Marshal(v)
		return string(b), err
	}
	bad := func() (any, error) { return nil, fmt.Errorf("%s: %s is not a %s", at, jsonKind(v), kindName(t.Kind)) }
	switch t.Kind {
	case Bool:
		if b, ok := v.(bool); ok {
			return b, nil
		}
	case Int64:
		if n, ok := v.(json.Number); ok {
			if i, err := n.Int64(); err == nil {
				return i, nil
			}
			// JSON Schema counts 1.0 and 1e2 as integers: exact, no float,
			// and no exponent that would have big.Rat make a huge number.
			text, exp := n.String(), 0
			if i := strings.IndexAny(text, "eE"); i >= 0 {
				exp, _ = strconv.Atoi(text[i+1:])
			}
			r, ok := new(big.Rat), false
			if exp > -40 && exp < 40 {
				_, ok = r.SetString(text)
			}
			if !ok || !r.IsInt() || !r.Num().IsInt64() {
				return nil, fmt.Errorf("%s: %s is not a 64-bit integer", at, n)
			}
			return r.Num().Int64(), nil
		}
	case Float64:
		if n, ok := v.(json.Number); ok {
			f, err := n.Float64()
			if err != nil || math.IsInf(f, 0) {
				return nil, fmt.Errorf("%s: %s is not a double", at, n)
			}
			return f, nil
		}
	case String, Timestamp, Date, Time, UUID:
		s, ok := v.(string)
		if !ok {
			return bad()
		}
		return jsonString(t.Kind, s, at)
	case List:
		l, ok := v.([]any)
		if !ok {
			return bad()
		}
		out := make([]any, len(l))
		for i, e := range l {
			var err error
			if out[i], err = shapeJSON(*t.Elem, e, fmt.Sprintf("%s[%d]", at, i)); err != nil {
				return nil, err
			}
		}
		return out, nil
	case Map:
		m, ok := v.(map[string]any)
		if !ok {
			return bad()
		}
		out := stringMap(m)
		for i, e := range out {
			var err error
			if out[i].Value, err = shapeJSON(*t.Elem, e.Value, at+"{"+e.Key.(string)+"}"); err != nil {
				return nil, err
			}
		}
		return out, nil
	case Struct:
		m, ok := v.(map[string]any)
		if !ok {
			return bad()
		}
		out := make(map[string]any, len(t.Fields))
		for _, f := range t.Fields {
			var err error
			if out[f.Name], err = shapeJSON(f.Type, m[f.Name], at+"."+f.Name); err != nil {
				return nil, err
			}
		}
		return out, nil
	}
	return bad()
}

// jsonString is a string of a format as its column's physical value.
func jsonString(k Kind, s, at string) (any, error) {
	switch k {
	case Timestamp:
		ts, err := time.Parse(time.RFC3339Nano, s)
		if err != nil {
			return nil, fmt.Errorf("%s: %q is not a date-time (RFC 3339)", at, s)
		}
		return ts.UnixMicro(), nil
	case Date:
		d, err := time.Parse(time.DateOnly, s)
		if err != nil {
			return nil, fmt.Errorf("%s: %q is not a date", at, s)
		}
		return int32(d.Unix() / 86400), nil
	case Time:
		for _, layout := range []string{"15:04:05.999999999Z07:00", "15:04:05.999999999"} {
			if tm, err := time.Parse(layout, s); err == nil {
				h, m, sec := tm.Clock()
				return (int64(h)*3600+int64(m)*60+int64(sec))*1_000_000 + int64(tm.Nanosecond()/1000), nil
			}
		}
		return nil, fmt.Errorf("%s: %q is not a time", at, s)
	case UUID:
		u, err := uuid.Parse(s)
		if err != nil {
			return nil, fmt.Errorf("%s: %q is not a UUID", at, s)
		}
		return u[:], nil
	}
	return s, nil
}

func jsonKind(v any) string {
	switch v.(type) {
	case bool:
		return "a boolean"
	case json.Number:
		return "a number"
	case string:
		return "a string"
	case []any:
		return "an array"
	case map[string]any:
		return "an object"
	}
	return fmt.Sprintf("a %T", v)
}
