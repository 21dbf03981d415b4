package format

import "testing"

// Whatever text a client registers, each parser answers a schema or an
// error (never a panic), and a schema it takes is compatible with itself
// both ways.
func FuzzParse(f *testing.F) {
	f.Add(uint8(0), `{"type":"record","name":"R","fields":[{"name":"a","type":["null","string"],"default":null}]}`)
	f.Add(uint8(1), "syntax = \"proto3\";\npackage acme;\nmessage M { oneof o { int32 a = 1; string b = 2; } map<string, M> m = 3; }")
	f.Add(uint8(2), `{"type":"object","properties":{"a":{"type":"string","maxLength":3},"n":{"$ref":"#"}},"required":["a"],"additionalProperties":false}`)
	f.Fuzz(func(t *testing.T, typ uint8, text string) {
		ty := []Type{Avro, Protobuf, JSON}[typ%3]
		s, err := Parse(ty, text, nil)
		if err != nil {
			if err.Error() == "" {
				t.Fatalf("%s %q: an error without a message", ty, text)
			}
			return
		}
		if why := Check(s, s); len(why) > 0 {
			t.Fatalf("%s %q is incompatible with itself: %q", ty, text, why)
		}
	})
}
