package record

import (
	"bytes"
	"encoding/hex"
	"errors"
	"hash/crc32"
	"os"
	"reflect"
	"strings"
	"testing"
)

var cases = []struct {
	name string
	r    Record
}{
	{"empty", Record{Value: []byte{}}},
	{"null key, null value (tombstone)", Record{Offset: 7, Timestamp: 1700000000000}},
	{"empty key", Record{Key: []byte{}, Value: []byte("v")}},
	{"everything", Record{
		Offset: 1<<40 + 3, Timestamp: 1764460800123, Key: []byte("user-42"), Value: []byte(`{"clicks":3}`),
		Headers:      []Header{{"trace", []byte("abc")}, {"null-header", nil}, {"empty", []byte{}}},
		Tags:         []string{"eu", ""},
		ProtocolData: []byte{0, 0, 0, 0, 0, 0, 0, 9, 0, 1, 0, 0, 0, 5},
	}},
	{"negative timestamp", Record{Timestamp: -1, Value: []byte("before 1970")}},
	{"binary", Record{Key: []byte{0, 255}, Value: bytes.Repeat([]byte{0xde, 0xad}, 5000)}},
}

func TestRoundTrip(t *testing.T) {
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			b, err := Append(nil, &tc.r)
			if err != nil {
				t.Fatal(err)
			}
			if len(b) != Size(&tc.r) {
				t.Fatalf("encoded %d bytes, Size says %d", len(b), Size(&tc.r))
			}
			got, n, err := Decode(append(b, 0xff, 0xff)) // trailing bytes belong to the next record
			if err != nil {
				t.Fatal(err)
			}
			if n != len(b) {
				t.Fatalf("Decode consumed %d bytes, want %d", n, len(b))
			}
			if !reflect.DeepEqual(got, tc.r) {
				t.Fatalf("round trip:\n got %#v\nwant %#v", got, tc.r)
			}
		})
	}
}

// Every single-byte change after the offset field is caught; a reader never
// takes a damaged record for a good one.
func TestEveryByteFlipIsCaught(t *testing.T) {
	b, _ := Append(nil, &cases[3].r)
	for i := 8; i < len(b); i++ {
		c := bytes.Clone(b)
		c[i] ^= 0x40
		if _, _, err := Decode(c); !errors.Is(err, ErrCorrupt) {
			t.Fatalf("flipping byte %d: err %v, want ErrCorrupt", i, err)
		}
	}
	for cut := 0; cut < len(b); cut++ {
		if _, _, err := Decode(b[:cut]); !errors.Is(err, ErrCorrupt) {
			t.Fatalf("record cut to %d bytes: err %v, want ErrCorrupt", cut, err)
		}
	}
}

func TestLimits(t *testing.T) {
	big := Record{Value: make([]byte, MaxSize)}
	if _, err := Append(nil, &big); err == nil || !strings.Contains(err.Error(), "more than") {
		t.Fatalf("a record over MaxSize: %v", err)
	}
	many := Record{Tags: make([]string, 70000)}
	if _, err := Append(nil, &many); err == nil || !strings.Contains(err.Error(), "70000 tags") {
		t.Fatalf("70000 tags: %v", err)
	}
}

// docs/format.md shows a real record as a hex dump; this keeps it true.
func TestFormatDocExample(t *testing.T) {
	doc, err := os.ReadFile("../../docs/format.md")
	if err != nil {
		t.Fatal(err)
	}
	_, after, ok := strings.Cut(string(doc), "```hexdump\n")
	if !ok {
		t.Fatal("docs/format.md has no ```hexdump block")
	}
	block, _, _ := strings.Cut(after, "```")
	var want []byte
	for _, line := range strings.Split(strings.TrimSpace(block), "\n") {
		fields := strings.Fields(line)
		for _, f := range fields[1:] { // first field is the position
			if strings.HasPrefix(f, "|") {
				break
			}
			v, err := hex.DecodeString(f)
			if err != nil {
				t.Fatalf("docs/format.md hex dump: %q: %v", f, err)
			}
			want = append(want, v...)
		}
	}
	got, _ := Append(nil, &DocExample)
	if !bytes.Equal(got, want) {
		t.Fatalf("docs/format.md shows a record that differs from the encoder's; regenerate it:\n%s", hex.Dump(got))
	}
}

func FuzzDecode(f *testing.F) {
	for _, tc := range cases {
		b, _ := Append(nil, &tc.r)
		f.Add(b)
	}
	f.Add([]byte{})
	f.Add(bytes.Repeat([]byte{0xff}, 40))
	f.Fuzz(func(t *testing.T, b []byte) {
		r, n, err := Decode(b)
		if err != nil {
			if !errors.Is(err, ErrCorrupt) {
				t.Fatalf("Decode error %v does not wrap ErrCorrupt", err)
			}
			return
		}
		again, err := Append(nil, &r)
		if err != nil {
			t.Fatalf("a decoded record does not encode: %v", err)
		}
		if !bytes.Equal(again, b[:n]) {
			t.Fatalf("decode then encode changed the bytes:\n in %x\nout %x", b[:n], again)
		}
	})
}

// DecodeVerified trusts the CRC but nothing else: whatever the bytes, it
// never reads outside them, and what it accepts encodes back to the same
// bytes but for the CRC field; where the CRC is right it agrees with Decode.
func FuzzDecodeVerified(f *testing.F) {
	for _, tc := range cases {
		b, _ := Append(nil, &tc.r)
		f.Add(b)
		bad := bytes.Clone(b)
		bad[12] ^= 0xff // a wrong CRC: DecodeVerified takes it, Decode does not
		f.Add(bad)
	}
	f.Add([]byte{})
	f.Add(bytes.Repeat([]byte{0xff}, 40))
	f.Fuzz(func(t *testing.T, b []byte) {
		r, n, err := DecodeVerified(b)
		if err != nil {
			if !errors.Is(err, ErrCorrupt) {
				t.Fatalf("DecodeVerified error %v does not wrap ErrCorrupt", err)
			}
			if _, _, err2 := Decode(b); err2 == nil {
				t.Fatalf("Decode accepts what DecodeVerified refuses (%v)", err)
			}
			return
		}
		again, err := Append(nil, &r)
		if err != nil {
			t.Fatalf("a decoded record does not encode: %v", err)
		}
		if !bytes.Equal(again[:12], b[:12]) || !bytes.Equal(again[HeaderSize:], b[HeaderSize:n]) {
			t.Fatalf("decode then encode changed the bytes:\n in %x\nout %x", b[:n], again)
		}
		if r2, n2, err := Decode(b); err == nil && (n2 != n || r2.Offset != r.Offset || !bytes.Equal(r2.Value, r.Value)) {
			t.Fatalf("Decode and DecodeVerified disagree on %x", b[:n])
		}
	})
}

// A Sum is the count, bytes and CRC-32C of the records' encodings as a
// segment stores them, one after another.
func TestSumIsTheSegmentsEncoding(t *testing.T) {
	recs := []Record{{Offset: 7, Timestamp: 1, Value: []byte("a")}, {Offset: 8, Key: []byte("k"), Headers: []Header{{Key: "h", Value: []byte("v")}}}, {Offset: 9}}
	var sum Sum
	var all []byte
	for i := range recs {
		enc, err := sum.Add(&recs[i])
		if err != nil {
			t.Fatal(err)
		}
		all = append(all, enc...)
	}
	if sum.Records != 3 || sum.Bytes != int64(len(all)) || sum.Checksum() != crc32.Checksum(all, crc32.MakeTable(crc32.Castagnoli)) {
		t.Fatalf("sum %d records, %d bytes, crc32c %08x; the encodings are %d bytes with crc32c %08x",
			sum.Records, sum.Bytes, sum.Checksum(), len(all), crc32.Checksum(all, crc32.MakeTable(crc32.Castagnoli)))
	}
}
