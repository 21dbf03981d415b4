package format

import (
	"encoding/base64"
	"strings"
	"testing"

	"google.golang.org/protobuf/proto"
	"google.golang.org/protobuf/reflect/protodesc"
	"google.golang.org/protobuf/types/descriptorpb"
)

// descriptorText is a schema as confluent-kafka-python registers it: the
// compiled file's descriptor, base64-encoded, its json_names left out as
// protobuf's Python API leaves them in a descriptor built at run time.
func descriptorText(t *testing.T, text string, refs []Ref, name string) string {
	t.Helper()
	fd, err := parseProtobuf(text, refs)
	if err != nil {
		t.Fatal(err)
	}
	fdp := protodesc.ToFileDescriptorProto(fd)
	fdp.Name = proto.String(name)
	for _, m := range fdp.MessageType {
		for _, f := range m.Field {
			f.JsonName = nil
		}
	}
	raw, err := proto.Marshal(fdp)
	if err != nil {
		t.Fatal(err)
	}
	return base64.StdEncoding.EncodeToString(raw)
}

// A Protobuf schema given as a base64 FileDescriptorProto is the same
// schema as its .proto text: it parses (also as a reference, and
// referring to a well-known type), checks against the text form both
// ways, and ?format=serialized gives back a descriptor that parses again.
func TestProtobufDescriptorForm(t *testing.T) {
	const dep = "syntax = \"proto3\";\npackage acme;\nmessage Item { string sku_code = 1; }"
	const root = "syntax = \"proto3\";\npackage acme;\nimport \"item.proto\";\nimport \"google/protobuf/timestamp.proto\";\n" +
		"message Order { int64 order_id = 1; repeated Item items = 2; google.protobuf.Timestamp at = 3; }"
	depRefs := []Ref{{Name: "item.proto", Text: dep}}
	for _, tc := range []struct {
		name string
		text func() string
		refs []Ref
	}{
		{"text", func() string { return root }, depRefs},
		{"descriptor", func() string { return descriptorText(t, root, depRefs, "order.proto") }, depRefs},
		{"descriptor, its reference a descriptor too", func() string { return descriptorText(t, root, depRefs, "order.proto") },
			[]Ref{{Name: "item.proto", Text: descriptorText(t, dep, nil, "whatever.proto")}}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			s, err := Parse(Protobuf, tc.text(), tc.refs)
			if err != nil {
				t.Fatal(err)
			}
			text, err := Parse(Protobuf, root, depRefs)
			if err != nil {
				t.Fatal(err)
			}
			if why := Check(s, text); len(why) != 0 {
				t.Errorf("the text form does not read this one's data: %v", why)
			}
			if why := Check(text, s); len(why) != 0 {
				t.Errorf("this form does not read the text form's data: %v", why)
			}
			ser, err := s.Serialized()
			if err != nil {
				t.Fatal(err)
			}
			again, err := Parse(Protobuf, ser, tc.refs)
			if err != nil {
				t.Fatalf("the serialized form does not parse: %v", err)
			}
			if got := again.proto.Messages().ByName("Order").Fields().ByName("order_id").JSONName(); got != "orderId" {
				t.Errorf("order_id's JSON name: %q, want orderId", got)
			}
		})
	}
	// Base64 that is not a descriptor, and a descriptor of no message.
	empty, _ := proto.Marshal(&descriptorpb.FileDescriptorProto{Name: proto.String("x.proto"), Syntax: proto.String("proto3")})
	for _, bad := range []string{base64.StdEncoding.EncodeToString([]byte{0xff, 0xff, 0xff}), base64.StdEncoding.EncodeToString(empty)} {
		if _, err := Parse(Protobuf, bad, nil); err == nil {
			t.Errorf("%q parsed", bad)
		}
	}
	// Avro and JSON have no other form.
	if s, err := Parse(JSON, `{"type":"string"}`, nil); err != nil {
		t.Fatal(err)
	} else if ser, err := s.Serialized(); err != nil || ser != "" {
		t.Errorf("JSON's serialized form: %q, %v; want none", ser, err)
	}
	if !strings.Contains(jsonName("a_b_c"), "aBC") {
		t.Errorf("jsonName(a_b_c) = %q", jsonName("a_b_c"))
	}
}
