package httpapi

import (
	"encoding/json"
	"io"
	"net/http"
	"strconv"
	"strings"
	"testing"

	"strata/registry/format"
)

// ?format=serialized answers a Protobuf schema as its base64 descriptor
// (what confluent-kafka-python's deserializer asks for), on both routes
// that carry a schema; that descriptor registers as a schema of its own
// and checks compatible with the text it came from; Avro keeps its text.
func TestProtobufSerializedFormat(t *testing.T) {
	srv, _ := serve(t)
	parsed, err := format.Parse(format.Protobuf, protoV1, nil)
	if err != nil {
		t.Fatal(err)
	}
	desc, err := parsed.Serialized()
	if err != nil {
		t.Fatal(err)
	}
	call := func(method, path, body string) (int, string) {
		t.Helper()
		req, _ := http.NewRequest(method, srv.URL+path, strings.NewReader(body))
		req.Header.Set("Content-Type", ContentType)
		resp, err := srv.Client().Do(req)
		if err != nil {
			t.Fatal(err)
		}
		defer resp.Body.Close()
		raw, _ := io.ReadAll(resp.Body)
		return resp.StatusCode, strings.TrimSpace(string(raw))
	}
	for _, st := range []struct {
		method, path, body string
		status             int
		want               string
	}{
		{"POST", "/subjects/p-value/versions", `{"schemaType":"PROTOBUF","schema":` + q(protoV1) + `}`, 200, `{"id":1}`},
		{"POST", "/subjects/a-value/versions", `{"schema":` + q(avroV1) + `}`, 200, `{"id":2}`},
		{"GET", "/schemas/ids/1?format=serialized", "", 200, `{"schemaType":"PROTOBUF","schema":` + q(desc) + `}`},
		{"GET", "/subjects/p-value/versions/1?format=serialized", "", 200, `{"subject":"p-value","version":1,"id":1,"schemaType":"PROTOBUF","schema":` + q(desc) + `}`},
		{"GET", "/schemas/ids/1", "", 200, `{"schemaType":"PROTOBUF","schema":` + q(protoV1) + `}`},
		{"GET", "/schemas/ids/2?format=serialized", "", 200, `{"schema":` + q(avroV1) + `}`},
		{"POST", "/compatibility/subjects/p-value/versions/latest", `{"schemaType":"PROTOBUF","schema":` + q(desc) + `}`, 200, `{"is_compatible":true}`},
		{"POST", "/subjects/p-value/versions", `{"schemaType":"PROTOBUF","schema":` + q(desc) + `}`, 200, `{"id":3}`},
		{"POST", "/subjects/p-value/versions", `{"schemaType":"PROTOBUF","schema":` + q(desc) + `}`, 200, `{"id":3}`},
		{"POST", "/subjects/p-value/versions", `{"schemaType":"PROTOBUF","schema":"bm90IGEgZGVzY3JpcHRvcg=="}`, 422, `42201`},
	} {
		status, body := call(st.method, st.path, st.body)
		if status != st.status {
			t.Fatalf("%s %s: %d %s, want %d", st.method, st.path, status, body, st.status)
		}
		if status != 200 {
			var e errorJSON
			if json.Unmarshal([]byte(body), &e) != nil || strconv.Itoa(e.ErrorCode) != st.want {
				t.Fatalf("%s %s: %s, want error_code %s", st.method, st.path, body, st.want)
			}
			continue
		}
		if body != st.want {
			t.Fatalf("%s %s:\n got %s\nwant %s", st.method, st.path, body, st.want)
		}
	}
}
