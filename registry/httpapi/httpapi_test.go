package httpapi

import (
	"context"
	"encoding/json"
	"io"
	"net/http"
	"net/http/httptest"
	"reflect"
	"slices"
	"strconv"
	"strings"
	"sync"
	"testing"

	"github.com/prometheus/client_golang/prometheus"

	"strata/registry"
	"strata/registry/pebblestore"
)

// serve runs the API on a registry in a fresh store, on a loopback port.
func serve(t testing.TB) (*httptest.Server, *prometheus.Registry) {
	t.Helper()
	store, err := pebblestore.Open(t.TempDir())
	if err != nil {
		t.Fatal(err)
	}
	reg, err := registry.Open(context.Background(), store)
	if err != nil {
		t.Fatal(err)
	}
	metrics := prometheus.NewRegistry()
	srv := httptest.NewServer((&Server{Registry: reg, Registerer: metrics}).Handler())
	t.Cleanup(func() { srv.Close(); reg.Close() })
	return srv, metrics
}

// q is s as a JSON string.
func q(s string) string {
	raw, _ := json.Marshal(s)
	return string(raw)
}

const (
	avroV1     = `{"type":"record","name":"Order","fields":[{"name":"id","type":"long"}]}`
	avroV2     = `{"type":"record","name":"Order","fields":[{"name":"id","type":"long"},{"name":"note","type":"string","default":""}]}`
	avroBreaks = `{"type":"record","name":"Order","fields":[{"name":"id","type":"long"},{"name":"qty","type":"int"}]}`
	protoV1    = "syntax = \"proto3\";\nmessage Order { int64 id = 1; }"
	jsonAddr   = `{"type":"object","properties":{"street":{"type":"string"}}}`
	jsonPerson = `{"type":"object","properties":{"home":{"$ref":"addr.json"}}}`
)

// Every endpoint, in an order that walks a subject's life, answers as
// Confluent's API documents: the body for a success, the HTTP status and
// error_code for a refusal.
func TestEndpoints(t *testing.T) {
	srv, metrics := serve(t)
	for i, st := range []struct {
		method, path, body string
		status             int
		want               string // the JSON answer (a /schema route's is the schema); for a refusal, its error_code
		contains           string // instead of want: what the answer has
	}{
		{"GET", "/", "", 200, `{}`, ""},
		{"GET", "/schemas/types", "", 200, `["JSON","PROTOBUF","AVRO"]`, ""},
		{"GET", "/subjects", "", 200, `[]`, ""},
		{"GET", "/config", "", 200, `{"compatibilityLevel":"BACKWARD"}`, ""},
		{"GET", "/mode", "", 200, `{"mode":"READWRITE"}`, ""},

		{"POST", "/subjects/orders-value/versions", `{"schema":` + q(avroV1) + `}`, 200, `{"id":1}`, ""},
		{"POST", "/subjects/orders-value/versions", `{"schema":` + q(avroV1) + `,"schemaType":"AVRO"}`, 200, `{"id":1}`, ""},
		{"POST", "/subjects/orders-value/versions", `{"schema":"{\"type\":\"record\"}"}`, 422, `42201`, ""},
		{"POST", "/subjects/orders-value/versions", `{"schema":`, 422, `422`, ""},
		{"POST", "/subjects/orders-value/versions", `{"schema":` + q(avroBreaks) + `}`, 409, `409`, ""},
		{"POST", "/compatibility/subjects/orders-value/versions/latest", `{"schema":` + q(avroBreaks) + `}`, 200, `{"is_compatible":false}`, ""},
		{"POST", "/compatibility/subjects/orders-value/versions/1?verbose=true", `{"schema":` + q(avroBreaks) + `}`, 200, "", `qty is missing`},
		{"POST", "/compatibility/subjects/orders-value/versions?verbose=true", `{"schema":` + q(avroV2) + `}`, 200, `{"is_compatible":true,"messages":[]}`, ""},
		{"POST", "/compatibility/subjects/orders-value/versions/2", `{"schema":` + q(avroV2) + `}`, 404, `40402`, ""},
		{"POST", "/compatibility/subjects/nosuch/versions/latest", `{"schema":` + q(avroV2) + `}`, 404, `40401`, ""},
		{"POST", "/subjects/orders-value/versions", `{"schema":` + q(avroV2) + `}`, 200, `{"id":2}`, ""},

		{"GET", "/subjects", "", 200, `["orders-value"]`, ""},
		{"GET", "/subjects/orders-value/versions", "", 200, `[1,2]`, ""},
		{"GET", "/subjects/orders-value/versions/latest", "", 200, `{"subject":"orders-value","version":2,"id":2,"schema":` + q(avroV2) + `}`, ""},
		{"GET", "/subjects/orders-value/versions/1", "", 200, `{"subject":"orders-value","version":1,"id":1,"schema":` + q(avroV1) + `}`, ""},
		{"GET", "/subjects/orders-value/versions/1/schema", "", 200, avroV1, ""},
		{"GET", "/subjects/orders-value/versions/3", "", 404, `40402`, ""},
		{"GET", "/subjects/orders-value/versions/0", "", 422, `42202`, ""},
		{"GET", "/subjects/orders-value/versions/first", "", 422, `42202`, ""},
		{"GET", "/subjects/nosuch/versions", "", 404, `40401`, ""},
		{"GET", "/subjects/nosuch/versions/latest", "", 404, `40401`, ""},
		{"GET", "/schemas/ids/1", "", 200, `{"schema":` + q(avroV1) + `}`, ""},
		{"GET", "/schemas/ids/1/schema", "", 200, avroV1, ""},
		{"GET", "/schemas/ids/1/subjects", "", 200, `["orders-value"]`, ""},
		{"GET", "/schemas/ids/1/versions", "", 200, `[{"subject":"orders-value","version":1}]`, ""},
		{"GET", "/schemas/ids/99", "", 404, `40403`, ""},
		{"GET", "/schemas/ids/x", "", 404, `40403`, ""},
		{"POST", "/subjects/orders-value", `{"schema":` + q(avroV1) + `}`, 200, `{"subject":"orders-value","version":1,"id":1,"schema":` + q(avroV1) + `}`, ""},
		{"POST", "/subjects/orders-value", `{"schema":` + q(avroBreaks) + `}`, 404, `40403`, ""},
		{"POST", "/subjects/nosuch", `{"schema":` + q(avroV1) + `}`, 404, `40401`, ""},

		{"POST", "/subjects/proto-value/versions", `{"schemaType":"PROTOBUF","schema":` + q(protoV1) + `}`, 200, `{"id":3}`, ""},
		{"GET", "/schemas/ids/3", "", 200, `{"schemaType":"PROTOBUF","schema":` + q(protoV1) + `}`, ""},
		{"POST", "/subjects/addr/versions", `{"schemaType":"JSON","schema":` + q(jsonAddr) + `}`, 200, `{"id":4}`, ""},
		{"POST", "/subjects/person/versions", `{"schemaType":"JSON","schema":` + q(jsonPerson) + `}`, 422, `42201`, ""},
		{"POST", "/subjects/person/versions", `{"schemaType":"JSON","schema":` + q(jsonPerson) + `,"references":[{"name":"addr.json","subject":"addr","version":1}]}`, 200, `{"id":5}`, ""},
		{"GET", "/schemas/ids/5", "", 200, `{"schemaType":"JSON","references":[{"name":"addr.json","subject":"addr","version":1}],"schema":` + q(jsonPerson) + `}`, ""},
		{"GET", "/subjects/addr/versions/1/referencedby", "", 200, `[5]`, ""},
		{"GET", "/subjects/orders-value/versions/1/referencedby", "", 200, `[]`, ""},
		{"DELETE", "/subjects/addr", "", 422, `42206`, ""},

		{"PUT", "/config", `{"compatibility":"FULL"}`, 200, `{"compatibility":"FULL"}`, ""},
		{"PUT", "/config", `{"compatibility":"SIDEWAYS"}`, 422, `42203`, ""},
		{"GET", "/config/orders-value", "", 404, `40408`, ""},
		{"GET", "/config/orders-value?defaultToGlobal=true", "", 200, `{"compatibilityLevel":"FULL"}`, ""},
		{"PUT", "/config/orders-value", `{"compatibility":"none"}`, 200, `{"compatibility":"NONE"}`, ""},
		{"GET", "/config/orders-value", "", 200, `{"compatibilityLevel":"NONE"}`, ""},
		{"DELETE", "/config/orders-value", "", 200, `{"compatibilityLevel":"NONE"}`, ""},
		{"DELETE", "/config/nosuch", "", 404, `40401`, ""},
		{"DELETE", "/config", "", 200, `{"compatibilityLevel":"FULL"}`, ""},
		{"GET", "/config", "", 200, `{"compatibilityLevel":"BACKWARD"}`, ""},

		{"PUT", "/mode", `{"mode":"READONLY"}`, 200, `{"mode":"READONLY"}`, ""},
		{"POST", "/subjects/other/versions", `{"schema":` + q(avroV1) + `}`, 422, `42205`, ""},
		{"PUT", "/mode", `{"mode":"WRITEONLY"}`, 422, `42204`, ""},
		{"PUT", "/mode", `{"mode":"IMPORT"}`, 422, `42205`, ""},
		{"PUT", "/mode", `{"mode":"READWRITE"}`, 200, `{"mode":"READWRITE"}`, ""},
		{"GET", "/mode/orders-value", "", 404, `40409`, ""},
		{"GET", "/mode/orders-value?defaultToGlobal=true", "", 200, `{"mode":"READWRITE"}`, ""},
		{"PUT", "/mode/imports", `{"mode":"IMPORT"}`, 200, `{"mode":"IMPORT"}`, ""},
		{"POST", "/subjects/imports/versions", `{"schema":"\"string\"","id":100,"version":1}`, 200, `{"id":100}`, ""},
		{"POST", "/subjects/orders-value/versions", `{"schema":"\"int\"","id":101}`, 422, `42205`, ""},
		{"GET", "/mode/imports", "", 200, `{"mode":"IMPORT"}`, ""},
		{"DELETE", "/mode/imports", "", 200, `{"mode":"IMPORT"}`, ""},

		{"DELETE", "/subjects/orders-value/versions/1?permanent=true", "", 404, `40407`, ""},
		{"DELETE", "/subjects/orders-value/versions/1", "", 200, `1`, ""},
		{"DELETE", "/subjects/orders-value/versions/1", "", 404, `40406`, ""},
		{"GET", "/subjects/orders-value/versions/1", "", 404, `40402`, ""},
		{"GET", "/subjects/orders-value/versions/1?deleted=true", "", 200, `{"subject":"orders-value","version":1,"id":1,"schema":` + q(avroV1) + `}`, ""},
		{"DELETE", "/subjects/orders-value/versions/1?permanent=true", "", 200, `1`, ""},
		{"DELETE", "/subjects/orders-value?permanent=true", "", 404, `40405`, ""},
		{"DELETE", "/subjects/orders-value", "", 200, `[2]`, ""},
		{"DELETE", "/subjects/orders-value", "", 404, `40404`, ""},
		{"GET", "/subjects", "", 200, `["addr","imports","person","proto-value"]`, ""},
		{"GET", "/subjects?deleted=true", "", 200, `["addr","imports","orders-value","person","proto-value"]`, ""},
		{"GET", "/schemas/ids/2/versions?deleted=true", "", 200, `[{"subject":"orders-value","version":2}]`, ""},
		{"DELETE", "/subjects/orders-value?permanent=true", "", 200, `[2]`, ""},
		{"DELETE", "/subjects/orders-value", "", 404, `40401`, ""},
		{"GET", "/schemas/ids/2", "", 404, `40403`, ""},

		{"GET", "/nosuch", "", 404, `404`, ""},
	} {
		req, err := http.NewRequest(st.method, srv.URL+st.path, strings.NewReader(st.body))
		if err != nil {
			t.Fatal(err)
		}
		if st.body != "" {
			req.Header.Set("Content-Type", ContentType)
		}
		req.Header.Set("Accept", ContentType)
		resp, err := http.DefaultClient.Do(req)
		if err != nil {
			t.Fatal(err)
		}
		raw, _ := io.ReadAll(resp.Body)
		resp.Body.Close()
		at := strings.Join([]string{st.method, st.path, st.body}, " ")
		if resp.StatusCode != st.status {
			t.Fatalf("step %d, %s: %d %s, want %d", i, at, resp.StatusCode, raw, st.status)
		}
		if ct := resp.Header.Get("Content-Type"); ct != ContentType {
			t.Errorf("step %d, %s: Content-Type %q", i, at, ct)
		}
		switch {
		case st.contains != "":
			if !strings.Contains(string(raw), st.contains) {
				t.Errorf("step %d, %s: %s, want it to say %q", i, at, raw, st.contains)
			}
		case st.status >= 400:
			var e struct {
				ErrorCode int    `json:"error_code"`
				Message   string `json:"message"`
			}
			if err := json.Unmarshal(raw, &e); err != nil || e.Message == "" || st.want != strconv.Itoa(e.ErrorCode) {
				t.Errorf("step %d, %s: %s, want error_code %s and a message", i, at, raw, st.want)
			}
		default:
			var got, want any
			if err := json.Unmarshal(raw, &got); err != nil {
				t.Fatalf("step %d, %s: %s: %v", i, at, raw, err)
			}
			json.Unmarshal([]byte(st.want), &want)
			if !reflect.DeepEqual(got, want) {
				t.Errorf("step %d, %s: %s, want %s", i, at, raw, st.want)
			}
		}
	}
	if n := requests(t, metrics, "register", "200"); n < 5 {
		t.Errorf("strata_schema_registry_requests_total{route=register,code=200}: %v, want the 5 registrations or more", n)
	}
}

// requests reads the requests counter for a route and status.
func requests(t *testing.T, reg *prometheus.Registry, route, code string) float64 {
	t.Helper()
	families, err := reg.Gather()
	if err != nil {
		t.Fatal(err)
	}
	for _, f := range families {
		if f.GetName() != "strata_schema_registry_requests_total" {
			continue
		}
		for _, m := range f.GetMetric() {
			labels := map[string]string{}
			for _, l := range m.GetLabel() {
				labels[l.GetName()] = l.GetValue()
			}
			if labels["route"] == route && labels["code"] == code {
				return m.GetCounter().GetValue()
			}
		}
	}
	return 0
}

// A body in a media type the API does not take is refused, not guessed at;
// plain JSON and no type at all are taken.
func TestContentTypes(t *testing.T) {
	srv, _ := serve(t)
	for _, tc := range []struct {
		ct   string
		want int
	}{
		{"text/plain", http.StatusUnsupportedMediaType},
		{"application/json", http.StatusOK},
		{"application/vnd.schemaregistry.v1+json; charset=utf-8", http.StatusOK},
		{"", http.StatusOK},
	} {
		req, _ := http.NewRequest("POST", srv.URL+"/subjects/s/versions", strings.NewReader(`{"schema":"\"string\""}`))
		if tc.ct != "" {
			req.Header.Set("Content-Type", tc.ct)
		}
		resp, err := http.DefaultClient.Do(req)
		if err != nil {
			t.Fatal(err)
		}
		resp.Body.Close()
		if resp.StatusCode != tc.want {
			t.Errorf("Content-Type %q: %d, want %d", tc.ct, resp.StatusCode, tc.want)
		}
	}
}

// Registrations at once: distinct schemas get distinct ids, one schema
// sent by many clients at once gets one id and one version.
func TestConcurrentRegistrations(t *testing.T) {
	srv, _ := serve(t)
	post := func(subject, schema string) int {
		resp, err := http.Post(srv.URL+"/subjects/"+subject+"/versions", ContentType, strings.NewReader(`{"schema":`+q(schema)+`}`))
		if err != nil {
			t.Error(err)
			return 0
		}
		defer resp.Body.Close()
		var out struct{ ID int }
		if err := json.NewDecoder(resp.Body).Decode(&out); err != nil || resp.StatusCode != http.StatusOK {
			t.Errorf("register under %s: %d, %v", subject, resp.StatusCode, err)
		}
		return out.ID
	}
	const n = 8
	distinct, same := make([]int, n), make([]int, n)
	var wg sync.WaitGroup
	for i := range n {
		wg.Go(func() {
			distinct[i] = post("s"+strconv.Itoa(i), `{"type":"fixed","name":"F","size":`+strconv.Itoa(i+1)+`}`)
		})
		wg.Go(func() { same[i] = post("shared", `"bytes"`) })
	}
	wg.Wait()
	slices.Sort(distinct)
	if len(slices.Compact(slices.Clone(distinct))) != n || slices.Contains(distinct, 0) {
		t.Fatalf("distinct schemas' ids: %v, want %d different ones", distinct, n)
	}
	slices.Sort(same)
	if len(slices.Compact(slices.Clone(same))) != 1 || same[0] == 0 {
		t.Fatalf("one schema's ids: %v, want one", same)
	}
	resp, err := http.Get(srv.URL + "/subjects/shared/versions")
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	var versions []int
	if json.NewDecoder(resp.Body).Decode(&versions); !slices.Equal(versions, []int{1}) {
		t.Fatalf("shared's versions: %v, want [1]", versions)
	}
}
