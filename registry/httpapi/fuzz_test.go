package httpapi

import (
	"bytes"
	"context"
	"encoding/json"
	"net/http"
	"net/http/httptest"
	"testing"

	"strata/registry"
	"strata/registry/pebblestore"
)

// Whatever a client sends as a schema request (registration, lookup,
// compatibility check), the API answers JSON: a success, or an error_code
// with the status it maps to and a message; never a panic. The schema
// text reaches the Avro, Protobuf and JSON Schema parsers.
func FuzzSchemaRequest(f *testing.F) {
	store, err := pebblestore.Open(f.TempDir())
	if err != nil {
		f.Fatal(err)
	}
	reg, err := registry.Open(context.Background(), store)
	if err != nil {
		f.Fatal(err)
	}
	f.Cleanup(func() { reg.Close() })
	h := (&Server{Registry: reg}).Handler()
	f.Add([]byte(`{"schema":` + q(avroV1) + `}`))
	f.Add([]byte(`{"schemaType":"PROTOBUF","schema":` + q(protoV1) + `}`))
	f.Add([]byte(`{"schemaType":"JSON","schema":` + q(jsonAddr) + `}`))
	f.Fuzz(func(t *testing.T, body []byte) {
		for _, path := range []string{"/subjects/fuzz/versions", "/subjects/fuzz", "/compatibility/subjects/fuzz/versions/latest"} {
			rec := httptest.NewRecorder()
			h.ServeHTTP(rec, httptest.NewRequest("POST", path, bytes.NewReader(body)))
			if rec.Code == http.StatusOK {
				if !json.Valid(rec.Body.Bytes()) {
					t.Fatalf("POST %s: 200 with %q", path, rec.Body)
				}
				continue
			}
			var e errorJSON
			if err := json.Unmarshal(rec.Body.Bytes(), &e); err != nil || e.Message == "" || (&registry.Error{Code: e.ErrorCode}).Status() != rec.Code {
				t.Fatalf("POST %s: %d %q, want an error_code of that status and a message", path, rec.Code, rec.Body)
			}
		}
	})
}

// PUT /config's and PUT /mode's bodies give a valid level or mode, or an
// error naming why.
func FuzzConfigBodies(f *testing.F) {
	f.Add([]byte(`{"compatibility":"FULL"}`))
	f.Add([]byte(`{"mode":"IMPORT"}`))
	f.Fuzz(func(t *testing.T, body []byte) {
		if l, err := decodeLevel(body); err == nil {
			if again, err := registry.ParseLevel(string(l)); err != nil || again != l {
				t.Fatalf("%q gave level %q, which does not read back", body, l)
			}
		} else if err.Error() == "" {
			t.Fatalf("%q: an error without a message", body)
		}
		if m, err := decodeMode(body); err == nil {
			if again, err := registry.ParseMode(string(m)); err != nil || again != m {
				t.Fatalf("%q gave mode %q, which does not read back", body, m)
			}
		} else if err.Error() == "" {
			t.Fatalf("%q: an error without a message", body)
		}
	})
}
