package typed

import (
	"testing"

	"github.com/hamba/avro/v2"

	"strata/registry/format"
)

// Decoding untrusted bytes never panics, and what it returns either is an
// error or has the column type's shape.
func FuzzAvroDecode(f *testing.F) {
	s := avro.MustParse(orderSchema)
	d, err := NewAvroDecoder(s)
	if err != nil {
		f.Fatal(err)
	}
	f.Add([]byte{})
	f.Add([]byte{0x54, 0x00, 0x02})
	f.Add([]byte{0xff, 0xff, 0xff, 0xff, 0x0f})
	f.Fuzz(func(t *testing.T, payload []byte) {
		checkDecoded(t, d, payload)
	})
}

// The wire format's message indexes and a Protobuf payload, from
// untrusted bytes: never a panic, and what decodes has the message's
// shape.
func FuzzProtobufDecode(f *testing.F) {
	s, err := format.Parse(format.Protobuf, shopProto, nil)
	if err != nil {
		f.Fatal(err)
	}
	fd := s.Protobuf()
	f.Add([]byte{0, 0x08, 0x2a})
	f.Add([]byte{4, 0, 4, 0x0a, 0x01, 'a'})
	f.Add([]byte{2, 4})
	f.Fuzz(func(t *testing.T, b []byte) {
		md, payload, err := MessageIndexes(fd, b)
		if err != nil {
			return
		}
		d, err := NewProtobufDecoder(md)
		if err != nil {
			return // a message no column type expresses (shop.Node)
		}
		checkDecoded(t, d, payload)
	})
}

// A JSON payload from untrusted bytes: never a panic, and what decodes has
// the schema's shape and stripes.
func FuzzJSONDecode(f *testing.F) {
	s, err := format.Parse(format.JSON, eventSchema, nil)
	if err != nil {
		f.Fatal(err)
	}
	d, err := NewJSONDecoder(s.JSON())
	if err != nil {
		f.Fatal(err)
	}
	f.Add([]byte(`{"id": 1, "at": "2026-12-03T10:30:00Z", "tags": ["a"], "counts": {"x": 1}, "extra": [1, {"k": null}]}`))
	f.Add([]byte(`{"id": 1e400}`))
	f.Add([]byte(`[]`))
	f.Fuzz(func(t *testing.T, payload []byte) {
		checkDecoded(t, d, payload)
	})
}

// checkDecoded fails when a payload decodes to something that is not a
// struct value or does not stripe into the type's columns.
func checkDecoded(t *testing.T, d Decoder, payload []byte) {
	v, err := d.Decode(payload)
	if err != nil {
		return
	}
	if _, ok := v.(map[string]any); !ok {
		t.Fatalf("a struct decoded to %T", v)
	}
	if err := Shred(d.Type(), v, func(LeafValue) {}); err != nil {
		t.Fatalf("a decoded value does not stripe: %v", err)
	}
}
