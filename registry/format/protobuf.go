package format

import (
	"context"
	"encoding/base64"
	"fmt"
	"slices"
	"strings"

	"github.com/bufbuild/protocompile"
	"google.golang.org/protobuf/proto"
	"google.golang.org/protobuf/reflect/protodesc"
	"google.golang.org/protobuf/reflect/protoreflect"
	"google.golang.org/protobuf/types/descriptorpb"
)

// protoRoot is the file name the schema itself compiles under; a
// reference may not take it.
const protoRoot = "schema.proto"

// parseProtobuf compiles the schema with its references as the files it
// imports, and the well-known types (google/protobuf/*.proto) as protoc
// has them. Nothing is read from disk. The schema and each reference may
// be .proto text or a FileDescriptorProto, serialized and base64-encoded:
// the form confluent-kafka-python's ProtobufSerializer registers (it has
// a message's descriptor, not its source), as Confluent's registry takes.
func parseProtobuf(text string, refs []Ref) (protoreflect.FileDescriptor, error) {
	srcs := map[string]string{protoRoot: text}
	for _, r := range refs {
		if r.Name == protoRoot {
			return nil, fmt.Errorf("reference name %q is the schema's own file name; name it otherwise", protoRoot)
		}
		srcs[r.Name] = r.Text
	}
	text2source := &protocompile.SourceResolver{Accessor: protocompile.SourceAccessorFromMap(srcs)}
	resolver := protocompile.ResolverFunc(func(path string) (protocompile.SearchResult, error) {
		if fdp, ok := descriptorProto(srcs[path]); ok {
			// Named as the importer names it, whatever name the
			// client's descriptor had.
			fdp.Name = proto.String(path)
			return protocompile.SearchResult{Proto: fdp}, nil
		}
		return text2source.FindFileByPath(path)
	})
	c := protocompile.Compiler{
		Resolver:       protocompile.WithStandardImports(resolver),
		MaxParallelism: 1,
	}
	files, err := c.Compile(context.Background(), protoRoot)
	if err != nil {
		return nil, err
	}
	if files[0].Messages().Len() == 0 {
		return nil, fmt.Errorf("%s: defines no message", protoRoot)
	}
	return files[0], nil
}

// descriptorProto reads text as a base64-encoded FileDescriptorProto. A
// .proto file is never valid base64 (its spaces, quotes and semicolons
// are not in the alphabet), so the two forms cannot be taken for each
// other.
func descriptorProto(text string) (*descriptorpb.FileDescriptorProto, bool) {
	raw, err := base64.StdEncoding.DecodeString(strings.TrimSpace(text))
	if err != nil || len(raw) == 0 {
		return nil, false
	}
	fdp := &descriptorpb.FileDescriptorProto{}
	if err := proto.Unmarshal(raw, fdp); err != nil {
		return nil, false
	}
	// protoc writes every field's json_name into the descriptors it
	// makes; one built otherwise (protobuf's Python API at run time) may
	// leave it out, which the compiler then reads as a custom name "" on
	// every field, all in conflict. Fill in protoc's default.
	for _, m := range fdp.MessageType {
		defaultJSONNames(m)
	}
	for _, f := range fdp.Extension {
		if f.JsonName == nil {
			f.JsonName = proto.String(jsonName(f.GetName()))
		}
	}
	return fdp, true
}

func defaultJSONNames(m *descriptorpb.DescriptorProto) {
	for _, fs := range [][]*descriptorpb.FieldDescriptorProto{m.Field, m.Extension} {
		for _, f := range fs {
			if f.JsonName == nil {
				f.JsonName = proto.String(jsonName(f.GetName()))
			}
		}
	}
	for _, n := range m.NestedType {
		defaultJSONNames(n)
	}
}

// jsonName is protoc's default JSON name of a field: its name with each
// underscore dropped and the letter after it upper-cased.
func jsonName(name string) string {
	var b strings.Builder
	up := false
	for _, r := range name {
		switch {
		case r == '_':
			up = true
		case up && 'a' <= r && r <= 'z':
			b.WriteRune(r - 'a' + 'A')
			up = false
		default:
			b.WriteRune(r)
			up = false
		}
	}
	return b.String()
}

// Serialized is the schema as ?format=serialized asks for it: for
// Protobuf the compiled file's FileDescriptorProto, serialized and
// base64-encoded (what confluent-kafka-python's deserializers parse, and
// what its serializers registered); "" for the other types, whose text is
// their only form.
func (s *Schema) Serialized() (string, error) {
	if s.Type != Protobuf {
		return "", nil
	}
	raw, err := proto.MarshalOptions{Deterministic: true}.Marshal(protodesc.ToFileDescriptorProto(s.proto))
	if err != nil {
		return "", fmt.Errorf("serializing the Protobuf schema's descriptor: %w", err)
	}
	return base64.StdEncoding.EncodeToString(raw), nil
}

// checkProtobuf follows Confluent's Protobuf rules, from what the wire
// carries (field numbers and wire types, not names): a message the writer
// has and the reader does not is unreadable; a field's number reused with
// a type of another wire encoding, a required field added or removed, a
// singular numeric field made repeated or back, a field moved into a oneof
// that already had others, and a changed package break it. Renames, added
// fields and messages, and removed optional fields do not.
func checkProtobuf(reader, writer protoreflect.FileDescriptor) []string {
	var out []string
	if reader.Package() != writer.Package() {
		out = append(out, fmt.Sprintf("package changed from %q to %q", writer.Package(), reader.Package()))
	}
	readers := map[protoreflect.FullName]protoreflect.MessageDescriptor{}
	eachMessage(reader.Messages(), func(m protoreflect.MessageDescriptor) {
		readers[m.FullName()] = m
	})
	eachMessage(writer.Messages(), func(w protoreflect.MessageDescriptor) {
		if w.IsMapEntry() {
			return
		}
		r, ok := readers[w.FullName()]
		if !ok {
			out = append(out, fmt.Sprintf("message %s removed", w.FullName()))
			return
		}
		out = append(out, checkMessage(r, w)...)
	})
	return out
}

func eachMessage(ms protoreflect.MessageDescriptors, fn func(protoreflect.MessageDescriptor)) {
	for i := range ms.Len() {
		fn(ms.Get(i))
		eachMessage(ms.Get(i).Messages(), fn)
	}
}

func checkMessage(r, w protoreflect.MessageDescriptor) []string {
	var out []string
	rf, wf := r.Fields(), w.Fields()
	for i := range wf.Len() {
		f := wf.Get(i)
		g := rf.ByNumber(f.Number())
		if g == nil {
			if f.Cardinality() == protoreflect.Required {
				out = append(out, fmt.Sprintf("%s: required field %d (%s) removed", w.FullName(), f.Number(), f.Name()))
			}
			if realOneof(f) != nil {
				out = append(out, fmt.Sprintf("%s: field %d (%s) removed from oneof %s", w.FullName(), f.Number(), f.Name(), realOneof(f).Name()))
			}
			continue
		}
		out = append(out, checkField(r, g, f)...)
	}
	for i := range rf.Len() {
		g := rf.Get(i)
		if wf.ByNumber(g.Number()) == nil && g.Cardinality() == protoreflect.Required {
			out = append(out, fmt.Sprintf("%s: required field %d (%s) added", r.FullName(), g.Number(), g.Name()))
		}
	}
	return out
}

// wireGroups are the scalar kinds that read each other's bytes.
var wireGroups = [][]protoreflect.Kind{
	{protoreflect.Int32Kind, protoreflect.Uint32Kind, protoreflect.Int64Kind, protoreflect.Uint64Kind, protoreflect.BoolKind, protoreflect.EnumKind},
	{protoreflect.Sint32Kind, protoreflect.Sint64Kind},
	{protoreflect.Fixed32Kind, protoreflect.Sfixed32Kind},
	{protoreflect.Fixed64Kind, protoreflect.Sfixed64Kind},
	{protoreflect.StringKind, protoreflect.BytesKind},
}

func sameWire(a, b protoreflect.Kind) bool {
	if a == b {
		return true
	}
	for _, g := range wireGroups {
		if slices.Contains(g, a) && slices.Contains(g, b) {
			return true
		}
	}
	return false
}

func lengthDelimited(k protoreflect.Kind) bool {
	return k == protoreflect.StringKind || k == protoreflect.BytesKind || k == protoreflect.MessageKind
}

func realOneof(f protoreflect.FieldDescriptor) protoreflect.OneofDescriptor {
	if o := f.ContainingOneof(); o != nil && !o.IsSynthetic() {
		return o
	}
	return nil
}

// checkField compares the reader's field g with the writer's f of the same
// number in message r.
func checkField(r protoreflect.MessageDescriptor, g, f protoreflect.FieldDescriptor) []string {
	at := fmt.Sprintf("%s: field %d (%s)", r.FullName(), f.Number(), g.Name())
	var out []string
	switch rk, wk := g.Kind(), f.Kind(); {
	case rk == protoreflect.MessageKind || rk == protoreflect.GroupKind || wk == protoreflect.MessageKind || wk == protoreflect.GroupKind:
		if rk != wk || g.Message().FullName() != f.Message().FullName() {
			out = append(out, fmt.Sprintf("%s changed type from %s to %s", at, typeName(f), typeName(g)))
		}
	case rk == protoreflect.EnumKind && wk == protoreflect.EnumKind:
		if g.Enum().FullName() != f.Enum().FullName() {
			out = append(out, fmt.Sprintf("%s changed type from %s to %s", at, typeName(f), typeName(g)))
		}
	case !sameWire(rk, wk):
		out = append(out, fmt.Sprintf("%s changed type from %s to %s, which the wire does not carry alike", at, typeName(f), typeName(g)))
	}
	if g.IsList() != f.IsList() && !(lengthDelimited(g.Kind()) && lengthDelimited(f.Kind())) {
		out = append(out, fmt.Sprintf("%s changed between singular and repeated", at))
	}
	if g.IsMap() != f.IsMap() {
		out = append(out, fmt.Sprintf("%s changed between a map and not", at))
	}
	if g.Cardinality() == protoreflect.Required && f.Cardinality() != protoreflect.Required {
		out = append(out, fmt.Sprintf("%s became required", at))
	}
	if o := realOneof(g); o != nil && realOneof(f) == nil {
		fields := o.Fields()
		for i := range fields.Len() {
			if other := fields.Get(i); other.Number() != g.Number() && f.ContainingMessage().Fields().ByNumber(other.Number()) != nil {
				out = append(out, fmt.Sprintf("%s moved into oneof %s, which already had field %d", at, o.Name(), other.Number()))
				break
			}
		}
	}
	return out
}

func typeName(f protoreflect.FieldDescriptor) string {
	switch f.Kind() {
	case protoreflect.MessageKind, protoreflect.GroupKind:
		return string(f.Message().FullName())
	case protoreflect.EnumKind:
		return string(f.Enum().FullName())
	}
	return f.Kind().String()
}
