package typed

import (
	"testing"

	"github.com/hamba/avro/v2"
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
		v, err := d.Decode(payload)
		if err != nil {
			return
		}
		if _, ok := v.(map[string]any); !ok {
			t.Fatalf("a record decoded to %T", v)
		}
	})
}
