package typed

import (
	"fmt"
	"strings"
	"testing"
	"time"

	"google.golang.org/protobuf/proto"
	"google.golang.org/protobuf/reflect/protoreflect"
	"google.golang.org/protobuf/types/dynamicpb"

	pq "github.com/parquet-go/parquet-go"

	"strata/registry/format"
)

const shopProto = `syntax = "proto3";
package shop;
import "google/protobuf/timestamp.proto";
import "google/protobuf/duration.proto";
import "google/protobuf/wrappers.proto";

message Order {
  int64 id = 1;
  optional string note = 2;
  Status status = 3;
  google.protobuf.Timestamp placed = 4;
  google.protobuf.Duration took = 5;
  google.protobuf.Int32Value maybe = 6;
  repeated Line lines = 7;
  map<string, int32> counts = 8;
  map<int64, string> names = 9;
  oneof pay {
    string card = 10;
    int64 voucher = 11;
  }
  uint64 big = 12;
  bytes raw = 13;
  uint32 small = 14;
  enum Status { NEW = 0; PAID = 1; }
  message Line { string sku = 1; int32 qty = 2; }
}
message Node { Node next = 1; }
message Empty {}
`

// shop is shopProto as the registry parses what a serializer registers.
func shop(t *testing.T) protoreflect.FileDescriptor {
	t.Helper()
	s, err := format.Parse(format.Protobuf, shopProto, nil)
	if err != nil {
		t.Fatal(err)
	}
	return s.Protobuf()
}

// The Protobuf rows of docs/typed.md's mapping table, in one message.
func TestProtobufTypes(t *testing.T) {
	got, err := FromProtobuf(shop(t).Messages().ByName("Order"))
	if err != nil {
		t.Fatal(err)
	}
	want := "struct<id: long, note: optional string, status: string, placed: optional timestamptz, took: optional long, " +
		"maybe: optional int, lines: list<struct<sku: string, qty: int>>, counts: map<string, int>, names: map<long, string>, " +
		"pay: optional struct<card: optional string, voucher: optional long>, big: decimal(20, 0), raw: binary, small: long>"
	if got.String() != want {
		t.Fatalf("FromProtobuf(Order) =\n%s\nwant\n%s", got, want)
	}
	for name, refusal := range map[protoreflect.Name]string{"Node": "value.next: shop.Node refers to itself", "Empty": "has no fields"} {
		if _, err := FromProtobuf(shop(t).Messages().ByName(name)); err == nil || !strings.Contains(err.Error(), refusal) {
			t.Errorf("FromProtobuf(%s) = %v, want an error with %q", name, err, refusal)
		}
	}
}

// The wire format's message indexes pick a message of the file, nested
// ones too; a lone 0 is the first.
func TestMessageIndexes(t *testing.T) {
	fd := shop(t)
	for _, tc := range []struct {
		b    []byte
		want protoreflect.FullName
	}{
		{[]byte{0, 9}, "shop.Order"},
		{[]byte{2, 4, 9}, "shop.Empty"}, // [2]
		// [0, 2]: protoc puts a map field's entry message among the
		// nested ones, where the field is declared.
		{[]byte{4, 0, 4, 9}, "shop.Order.Line"},
	} {
		md, rest, err := MessageIndexes(fd, tc.b)
		if err != nil || md.FullName() != tc.want || len(rest) != 1 || rest[0] != 9 {
			t.Errorf("MessageIndexes(%v) = %v, %v, %v; want %s and the payload", tc.b, md, rest, err, tc.want)
		}
	}
	for _, b := range [][]byte{nil, {2}, {2, 10}, {0x7f}} {
		if _, _, err := MessageIndexes(fd, b); err == nil {
			t.Errorf("MessageIndexes(%v): no error", b)
		}
	}
}

// A message decodes to the column type's shape, which strata's striping
// writes and parquet-go reads back.
func TestProtobufValuesWriteToParquet(t *testing.T) {
	md := shop(t).Messages().ByName("Order")
	d, err := NewProtobufDecoder(md)
	if err != nil {
		t.Fatal(err)
	}
	m := dynamicpb.NewMessage(md)
	f := md.Fields().ByName
	m.Set(f("id"), protoreflect.ValueOfInt64(42))
	m.Set(f("status"), protoreflect.ValueOfEnum(1))
	placed := time.Date(2026, 12, 3, 10, 30, 0, 123456000, time.UTC)
	ts := dynamicpb.NewMessage(f("placed").Message())
	ts.Set(ts.Descriptor().Fields().ByName("seconds"), protoreflect.ValueOfInt64(placed.Unix()))
	ts.Set(ts.Descriptor().Fields().ByName("nanos"), protoreflect.ValueOfInt32(int32(placed.Nanosecond())))
	m.Set(f("placed"), protoreflect.ValueOfMessage(ts))
	line := dynamicpb.NewMessage(f("lines").Message())
	line.Set(line.Descriptor().Fields().ByName("sku"), protoreflect.ValueOfString("a"))
	line.Set(line.Descriptor().Fields().ByName("qty"), protoreflect.ValueOfInt32(2))
	m.Mutable(f("lines")).List().Append(protoreflect.ValueOfMessage(line))
	m.Mutable(f("counts")).Map().Set(protoreflect.ValueOfString("b").MapKey(), protoreflect.ValueOfInt32(2))
	m.Mutable(f("counts")).Map().Set(protoreflect.ValueOfString("a").MapKey(), protoreflect.ValueOfInt32(1))
	m.Mutable(f("names")).Map().Set(protoreflect.ValueOfInt64(7).MapKey(), protoreflect.ValueOfString("seven"))
	m.Set(f("voucher"), protoreflect.ValueOfInt64(99))
	m.Set(f("big"), protoreflect.ValueOfUint64(1<<63+5))
	m.Set(f("small"), protoreflect.ValueOfUint32(4000000000))
	payload, err := proto.Marshal(m)
	if err != nil {
		t.Fatal(err)
	}
	got, err := d.Decode(payload)
	if err != nil {
		t.Fatal(err)
	}
	v := got.(map[string]any)
	sameFields(t, "decoded", v, map[string]string{
		"id": "42", "note": "<nil>", "status": "PAID", "placed": fmt.Sprint(placed.UnixMicro()), "took": "<nil>", "maybe": "<nil>",
		"lines": "[map[qty:2 sku:a]]", "counts": "[{a 1} {b 2}]", "names": "[{7 seven}]",
		"pay": "map[card:<nil> voucher:99]", "raw": "[]", "small": "4000000000",
	})

	typ := d.Type()
	Number(&typ, 1)
	schema := pq.NewSchema("row", pq.Group{"value": Node(typ)})
	back := writeAndRead(t, schema, typ, got)["value"].(map[string]any)
	// parquet-go reads a map into a map[string]any by string keys only:
	// names' long key is checked in its column instead (readInt64s).
	if keys := readInt64s(t, schema, typ, got, "value", "names", "key_value", "key"); fmt.Sprint(keys) != "[7]" {
		t.Errorf("names' keys = %v, want [7]", keys)
	}
	sameFields(t, "read back", back, map[string]string{
		"id": "42", "status": "PAID", "lines": "[map[qty:2 sku:a]]", "counts": "map[a:1 b:2]",
		"pay": "map[card:<nil> voucher:99]", "big": "9.223372036854775813e+18", "small": "4000000000",
	})
}

// Bytes that are not the message are an error, never a wrong value.
func TestProtobufDecodeErrors(t *testing.T) {
	d, err := NewProtobufDecoder(shop(t).Messages().ByName("Order"))
	if err != nil {
		t.Fatal(err)
	}
	for _, b := range [][]byte{{0x08}, {0x0a, 0x05, 'a'}, {0xff, 0xff, 0xff}} {
		if _, err := d.Decode(b); err == nil || !strings.Contains(err.Error(), "shop.Order") {
			t.Errorf("Decode(%v) = %v, want an error naming the message", b, err)
		}
	}
}
