package typed

import (
	"encoding/binary"
	"errors"
	"fmt"
	"math"
	"strconv"

	"google.golang.org/protobuf/proto"
	"google.golang.org/protobuf/reflect/protoreflect"
	"google.golang.org/protobuf/types/dynamicpb"
)

// FromProtobuf maps a Protobuf message to a column type (docs/typed.md):
// fields to a struct's, repeated fields to lists, map fields to maps, a
// oneof to a struct of its members, enums to their names, the
// well-known Timestamp to timestamptz, Duration to long nanoseconds and
// the wrappers to optional values. A field has a null only where
// Protobuf tells absence (a message, proto3 optional, proto2). A
// recursive message has no column type: the error names where it
// recurses.
func FromProtobuf(md protoreflect.MessageDescriptor) (Type, error) {
	return checked(protoMessage(md, "value", newDerivation[protoreflect.FullName]()))
}

func protoMessage(md protoreflect.MessageDescriptor, at string, d *derivation[protoreflect.FullName]) (Type, error) {
	if err := d.grow(at); err != nil {
		return Type{}, err
	}
	if d.expanding[md.FullName()] {
		return Type{}, unsupported(at, fmt.Sprintf("%s refers to itself (a recursive message has no column type)", md.FullName()))
	}
	d.expanding[md.FullName()] = true
	defer delete(d.expanding, md.FullName())
	t := Type{Kind: Struct}
	seen := map[protoreflect.FullName]bool{}
	fields := md.Fields()
	for i := range fields.Len() {
		f := fields.Get(i)
		if o := f.ContainingOneof(); o != nil && !o.IsSynthetic() {
			if seen[o.FullName()] {
				continue
			}
			seen[o.FullName()] = true
			ot := Type{Kind: Struct, Optional: true}
			members := o.Fields()
			for j := range members.Len() {
				m := members.Get(j)
				mt, err := protoField(m, at+"."+string(o.Name())+"."+string(m.Name()), d)
				if err != nil {
					return Type{}, err
				}
				mt.Optional = true
				ot.Fields = append(ot.Fields, Field{Name: string(m.Name()), Type: mt})
			}
			t.Fields = append(t.Fields, Field{Name: string(o.Name()), Type: ot})
			continue
		}
		ft, err := protoField(f, at+"."+string(f.Name()), d)
		if err != nil {
			return Type{}, err
		}
		t.Fields = append(t.Fields, Field{Name: string(f.Name()), Type: ft})
	}
	if len(t.Fields) == 0 {
		return Type{}, unsupported(at, fmt.Sprintf("%s has no fields, and a struct with none has no column type", md.FullName()))
	}
	return t, nil
}

func protoField(f protoreflect.FieldDescriptor, at string, d *derivation[protoreflect.FullName]) (Type, error) {
	if f.IsMap() {
		k, err := protoValue(f.MapKey(), at, d)
		if err != nil {
			return Type{}, err
		}
		v, err := protoValue(f.MapValue(), at+"{}", d)
		if err != nil {
			return Type{}, err
		}
		return Type{Kind: Map, Key: &k, Elem: &v}, nil
	}
	v, err := protoValue(f, at, d)
	if err != nil {
		return Type{}, err
	}
	if f.IsList() {
		return Type{Kind: List, Elem: &v}, nil
	}
	v.Optional = v.Optional || f.HasPresence()
	return v, nil
}

// protoValue is the type of one value of f (an element, for a repeated
// field).
func protoValue(f protoreflect.FieldDescriptor, at string, d *derivation[protoreflect.FullName]) (Type, error) {
	if err := d.grow(at); err != nil {
		return Type{}, err
	}
	switch f.Kind() {
	case protoreflect.BoolKind:
		return Type{Kind: Bool}, nil
	case protoreflect.Int32Kind, protoreflect.Sint32Kind, protoreflect.Sfixed32Kind:
		return Type{Kind: Int32}, nil
	case protoreflect.Uint32Kind, protoreflect.Fixed32Kind,
		protoreflect.Int64Kind, protoreflect.Sint64Kind, protoreflect.Sfixed64Kind:
		return Type{Kind: Int64}, nil // a uint32 fits a long; Iceberg has no unsigned type
	case protoreflect.Uint64Kind, protoreflect.Fixed64Kind:
		return Type{Kind: Decimal, Precision: 20, Size: decimalBytes(20)}, nil // every uint64
	case protoreflect.FloatKind:
		return Type{Kind: Float32}, nil
	case protoreflect.DoubleKind:
		return Type{Kind: Float64}, nil
	case protoreflect.StringKind, protoreflect.EnumKind:
		return Type{Kind: String}, nil
	case protoreflect.BytesKind:
		return Type{Kind: Binary}, nil
	case protoreflect.MessageKind, protoreflect.GroupKind:
		if t, ok := wellKnown(f.Message()); ok {
			return t, nil
		}
		return protoMessage(f.Message(), at, d)
	}
	return Type{}, unsupported(at, fmt.Sprintf("Protobuf kind %s", f.Kind()))
}

// wellKnown maps the well-known types a column type expresses better
// than their fields.
func wellKnown(md protoreflect.MessageDescriptor) (Type, bool) {
	switch md.FullName() {
	case "google.protobuf.Timestamp":
		return Type{Kind: Timestamp}, true
	case "google.protobuf.Duration":
		return Type{Kind: Int64}, true // nanoseconds: ±292 years
	case "google.protobuf.BoolValue":
		return Type{Kind: Bool, Optional: true}, true
	case "google.protobuf.Int32Value":
		return Type{Kind: Int32, Optional: true}, true
	case "google.protobuf.UInt32Value", "google.protobuf.Int64Value":
		return Type{Kind: Int64, Optional: true}, true
	case "google.protobuf.UInt64Value":
		return Type{Kind: Decimal, Precision: 20, Size: decimalBytes(20), Optional: true}, true
	case "google.protobuf.FloatValue":
		return Type{Kind: Float32, Optional: true}, true
	case "google.protobuf.DoubleValue":
		return Type{Kind: Float64, Optional: true}, true
	case "google.protobuf.StringValue":
		return Type{Kind: String, Optional: true}, true
	case "google.protobuf.BytesValue":
		return Type{Kind: Binary, Optional: true}, true
	}
	return Type{}, false
}

// MessageIndexes reads the message indexes the wire format puts before a
// Protobuf payload (a count, then each index, as zigzag varints; a lone
// 0 is [0], the file's first message) and returns the message of fd they
// name, with the payload after them.
func MessageIndexes(fd protoreflect.FileDescriptor, b []byte) (protoreflect.MessageDescriptor, []byte, error) {
	next := func() (int64, error) {
		v, n := binary.Varint(b)
		if n <= 0 {
			return 0, errors.New("protobuf: the message indexes are cut short")
		}
		b = b[n:]
		return v, nil
	}
	count, err := next()
	if err != nil {
		return nil, nil, err
	}
	if count < 0 || count > 100 {
		return nil, nil, fmt.Errorf("protobuf: %d message indexes", count)
	}
	indexes := []int64{0}
	if count > 0 {
		indexes = indexes[:0]
	}
	for range count {
		i, err := next()
		if err != nil {
			return nil, nil, err
		}
		indexes = append(indexes, i)
	}
	msgs := fd.Messages()
	var md protoreflect.MessageDescriptor
	for _, i := range indexes {
		if i < 0 || i >= int64(msgs.Len()) {
			return nil, nil, fmt.Errorf("protobuf: message index %d of %v: %s has %d there", i, indexes, fd.Path(), msgs.Len())
		}
		md = msgs.Get(int(i))
		msgs = md.Messages()
	}
	return md, b, nil
}

// ProtobufDecoder decodes Protobuf payloads (after the wire format's
// header and message indexes) of one message.
type ProtobufDecoder struct {
	md  protoreflect.MessageDescriptor
	typ Type
	// presence is HasPresence of every field of md and the messages under
	// it: asked per field of every value, and costly to work out
	// (protocompile resolves editions features at each call).
	presence map[protoreflect.FieldDescriptor]bool
}

// NewProtobufDecoder is FromProtobuf's type with a decoder for it.
func NewProtobufDecoder(md protoreflect.MessageDescriptor) (*ProtobufDecoder, error) {
	t, err := FromProtobuf(md)
	if err != nil {
		return nil, err
	}
	d := &ProtobufDecoder{md: md, typ: t, presence: map[protoreflect.FieldDescriptor]bool{}}
	d.note(md)
	return d, nil
}

func (d *ProtobufDecoder) note(md protoreflect.MessageDescriptor) {
	fields := md.Fields()
	for i := range fields.Len() {
		f := fields.Get(i)
		if _, ok := d.presence[f]; ok {
			continue
		}
		d.presence[f] = f.HasPresence()
		if f.IsMap() {
			f = f.MapValue()
		}
		if m := f.Message(); m != nil {
			d.note(m)
		}
	}
}

func (d *ProtobufDecoder) Type() Type { return d.typ }

// Decode parses the payload with protobuf-go (dynamicpb: the message is
// known from its descriptor only) and shapes it as the column type takes
// it. Unknown fields (a newer writer's) are dropped from the typed value;
// the raw bytes keep them.
func (d *ProtobufDecoder) Decode(payload []byte) (any, error) {
	m := dynamicpb.NewMessage(d.md)
	// AllowPartial: a proto2 required field left out is the typed
	// column's concern (a null in a required column), not a reason to
	// walk the whole message twice.
	if err := (proto.UnmarshalOptions{AllowPartial: true}).Unmarshal(payload, m); err != nil {
		return nil, fmt.Errorf("protobuf: %s: %w", d.md.FullName(), err)
	}
	v, err := d.shapeMessage(m, d.typ)
	if err != nil {
		return nil, rooted(err)
	}
	return v, nil
}

func (d *ProtobufDecoder) shapeMessage(m protoreflect.Message, t Type) (map[string]any, error) {
	out := make(map[string]any, len(t.Fields))
	fields := m.Descriptor().Fields()
	i := 0
	var seen map[protoreflect.FullName]bool
	for j := range fields.Len() {
		f := fields.Get(j)
		if o := f.ContainingOneof(); o != nil && !o.IsSynthetic() {
			if seen[o.FullName()] {
				continue
			}
			if seen == nil {
				seen = map[protoreflect.FullName]bool{}
			}
			seen[o.FullName()] = true
			ot := t.Fields[i].Type
			i++
			set := m.WhichOneof(o)
			if set == nil {
				out[string(o.Name())] = nil
				continue
			}
			members := map[string]any{}
			for k, mf := range ot.Fields {
				members[mf.Name] = nil
				if mf.Name == string(set.Name()) {
					v, err := d.shapeField(m, set, ot.Fields[k].Type)
					if err != nil {
						return nil, within(err, "."+string(o.Name())+"."+mf.Name)
					}
					members[mf.Name] = v
				}
			}
			out[string(o.Name())] = members
			continue
		}
		v, err := d.shapeField(m, f, t.Fields[i].Type)
		if err != nil {
			return nil, within(err, "."+string(f.Name()))
		}
		out[string(f.Name())] = v
		i++
	}
	return out, nil
}

func (d *ProtobufDecoder) shapeField(m protoreflect.Message, f protoreflect.FieldDescriptor, t Type) (any, error) {
	presence, ok := d.presence[f]
	if !ok {
		presence = f.HasPresence()
	}
	if presence && !m.Has(f) {
		return nil, nil
	}
	v := m.Get(f)
	switch {
	case f.IsMap():
		mv := v.Map()
		out := make(Entries, 0, mv.Len())
		var err error
		mv.Range(func(k protoreflect.MapKey, e protoreflect.Value) bool {
			var key, val any
			if key, err = d.shapeValue(f.MapKey(), *t.Key, k.Value()); err != nil {
				return false
			}
			if val, err = d.shapeValue(f.MapValue(), *t.Elem, e); err != nil {
				err = within(err, fmt.Sprintf("{%v}", k.Interface()))
				return false
			}
			out = append(out, Entry{key, val})
			return true
		})
		if err != nil {
			return nil, err
		}
		sortEntries(out)
		return out, nil
	case f.IsList():
		l := v.List()
		out := make([]any, l.Len())
		for i := range l.Len() {
			e, err := d.shapeValue(f, *t.Elem, l.Get(i))
			if err != nil {
				return nil, within(err, fmt.Sprintf("[%d]", i))
			}
			out[i] = e
		}
		return out, nil
	}
	return d.shapeValue(f, t, v)
}

// shapeValue is one value of f (an element, for a repeated field) as t's
// physical value.
func (d *ProtobufDecoder) shapeValue(f protoreflect.FieldDescriptor, t Type, v protoreflect.Value) (any, error) {
	switch f.Kind() {
	case protoreflect.BoolKind:
		return v.Bool(), nil
	case protoreflect.Int32Kind, protoreflect.Sint32Kind, protoreflect.Sfixed32Kind:
		return int32(v.Int()), nil
	case protoreflect.Int64Kind, protoreflect.Sint64Kind, protoreflect.Sfixed64Kind:
		return v.Int(), nil
	case protoreflect.Uint32Kind, protoreflect.Fixed32Kind:
		return int64(v.Uint()), nil
	case protoreflect.Uint64Kind, protoreflect.Fixed64Kind:
		return uint64Decimal(v.Uint()), nil
	case protoreflect.FloatKind:
		return float32(v.Float()), nil
	case protoreflect.DoubleKind:
		return v.Float(), nil
	case protoreflect.StringKind:
		return v.String(), nil
	case protoreflect.BytesKind:
		return v.Bytes(), nil
	case protoreflect.EnumKind:
		if ev := f.Enum().Values().ByNumber(v.Enum()); ev != nil {
			return string(ev.Name()), nil
		}
		return strconv.Itoa(int(v.Enum())), nil // a newer writer's value
	case protoreflect.MessageKind, protoreflect.GroupKind:
		return d.shapeWellKnown(v.Message(), t)
	}
	return nil, failf("Protobuf kind %s", f.Kind())
}

func (d *ProtobufDecoder) shapeWellKnown(m protoreflect.Message, t Type) (any, error) {
	fields := m.Descriptor().Fields()
	switch m.Descriptor().FullName() {
	case "google.protobuf.Timestamp":
		secs, nanos := m.Get(fields.ByName("seconds")).Int(), m.Get(fields.ByName("nanos")).Int()
		if secs > math.MaxInt64/1_000_000-1 || secs < math.MinInt64/1_000_000+1 {
			return nil, failf("%d seconds is past what microseconds hold", secs)
		}
		return secs*1_000_000 + nanos/1_000, nil
	case "google.protobuf.Duration":
		secs, nanos := m.Get(fields.ByName("seconds")).Int(), m.Get(fields.ByName("nanos")).Int()
		if secs > math.MaxInt64/1_000_000_000-1 || secs < math.MinInt64/1_000_000_000+1 {
			return nil, failf("%d seconds is past what nanoseconds hold", secs)
		}
		return secs*1_000_000_000 + nanos, nil
	}
	if _, ok := wellKnown(m.Descriptor()); ok { // a wrapper: its value
		f := fields.ByName("value")
		return d.shapeValue(f, t, m.Get(f))
	}
	return d.shapeMessage(m, t)
}

// uint64Decimal is a uint64 as decimal(20, 0)'s unscaled bytes.
func uint64Decimal(u uint64) []byte {
	out := make([]byte, decimalBytes(20))
	binary.BigEndian.PutUint64(out[len(out)-8:], u)
	return out
}
