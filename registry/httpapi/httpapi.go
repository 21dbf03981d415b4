// Package httpapi serves the schema registry as Confluent's REST API
// (docs/registry.md): the paths, JSON bodies, error codes and statuses
// Confluent's clients and tools expect. It translates HTTP to registry's
// decisions and back; the listener, its TLS and authentication are cmd's.
package httpapi

import (
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"mime"
	"net/http"
	"strconv"
	"strings"

	"github.com/prometheus/client_golang/prometheus"

	"strata/internal/promreg"
	"strata/registry"
	"strata/registry/format"
)

// ContentType is the registry's own media type, which every answer has.
const ContentType = "application/vnd.schemaregistry.v1+json"

// maxBody bounds a request body: a schema with its text escaped in JSON.
const maxBody = 8 << 20

// Server serves one registry.
type Server struct {
	Registry *registry.Registry
	Log      *slog.Logger
	// Registerer, if set, gets the requests' counter.
	Registerer prometheus.Registerer
}

// Handler is the REST API.
func (s *Server) Handler() http.Handler {
	requests := promreg.CounterVec(s.Registerer, "strata_schema_registry_requests_total",
		"Requests to the schema registry's REST API, by route and HTTP status.", "route", "code")
	mux := http.NewServeMux()
	handle := func(pattern, route string, h func(w http.ResponseWriter, r *http.Request) int) {
		mux.HandleFunc(pattern, func(w http.ResponseWriter, r *http.Request) {
			// Every answer from the registry's state starts from the
			// store's latest: in a cluster another node may have changed
			// it (registry.Registry.Sync says why not a watch). The
			// constant answers need no store.
			var code int
			if route == "root" || route == "schema_types" || route == "other" {
				code = h(w, r)
			} else if err := s.Registry.Sync(r.Context()); err != nil {
				code = s.failed(w, r, err)
			} else {
				code = h(w, r)
			}
			requests.WithLabelValues(route, strconv.Itoa(code)).Inc()
		})
	}
	handle("GET /{$}", "root", func(w http.ResponseWriter, r *http.Request) int { return answer(w, struct{}{}) })
	handle("GET /schemas/types", "schema_types", func(w http.ResponseWriter, r *http.Request) int { return answer(w, format.Types) })
	handle("GET /schemas/ids/{id}", "schema_by_id", s.schemaByID)
	handle("GET /schemas/ids/{id}/schema", "schema_text_by_id", s.schemaTextByID)
	handle("GET /schemas/ids/{id}/subjects", "subjects_by_id", s.subjectsByID)
	handle("GET /schemas/ids/{id}/versions", "versions_by_id", s.versionsByID)
	handle("GET /subjects", "subjects", s.subjects)
	handle("GET /subjects/{subject}/versions", "versions", s.versions)
	handle("POST /subjects/{subject}/versions", "register", s.register)
	handle("GET /subjects/{subject}/versions/{version}", "version", s.version)
	handle("GET /subjects/{subject}/versions/{version}/schema", "version_schema", s.versionSchema)
	handle("GET /subjects/{subject}/versions/{version}/referencedby", "referenced_by", s.referencedBy)
	handle("DELETE /subjects/{subject}/versions/{version}", "delete_version", s.deleteVersion)
	handle("POST /subjects/{subject}", "lookup", s.lookup)
	handle("DELETE /subjects/{subject}", "delete_subject", s.deleteSubject)
	handle("GET /config", "get_config", s.getConfig)
	handle("PUT /config", "put_config", s.putConfig)
	handle("DELETE /config", "delete_config", s.deleteConfig)
	handle("GET /config/{subject}", "get_config", s.getConfig)
	handle("PUT /config/{subject}", "put_config", s.putConfig)
	handle("DELETE /config/{subject}", "delete_config", s.deleteConfig)
	handle("GET /mode", "get_mode", s.getMode)
	handle("PUT /mode", "put_mode", s.putMode)
	handle("GET /mode/{subject}", "get_mode", s.getMode)
	handle("PUT /mode/{subject}", "put_mode", s.putMode)
	handle("DELETE /mode/{subject}", "delete_mode", s.deleteMode)
	handle("POST /compatibility/subjects/{subject}/versions/{version}", "compatibility", s.compatibility)
	handle("POST /compatibility/subjects/{subject}/versions", "compatibility", s.compatibility)
	handle("/", "other", func(w http.ResponseWriter, r *http.Request) int {
		return fail(w, &registry.Error{Code: http.StatusNotFound, Message: fmt.Sprintf("%s %s is not an endpoint of strata's schema registry (docs/registry.md lists them)", r.Method, r.URL.Path)})
	})
	return mux
}

// answer writes v as the registry's JSON with 200 OK.
func answer(w http.ResponseWriter, v any) int {
	w.Header().Set("Content-Type", ContentType)
	json.NewEncoder(w).Encode(v)
	return http.StatusOK
}

type errorJSON struct {
	ErrorCode int    `json:"error_code"`
	Message   string `json:"message"`
}

// fail answers err as Confluent does: its error_code and message, with
// the code's HTTP status; anything not a registry.Error is a 500.
func fail(w http.ResponseWriter, err error) int {
	var e *registry.Error
	if !errors.As(err, &e) {
		e = &registry.Error{Code: http.StatusInternalServerError, Message: err.Error()}
	}
	w.Header().Set("Content-Type", ContentType)
	w.WriteHeader(e.Status())
	json.NewEncoder(w).Encode(errorJSON{e.Code, e.Message})
	return e.Status()
}

// failed logs the server's own failures, then answers them.
func (s *Server) failed(w http.ResponseWriter, r *http.Request, err error) int {
	code := fail(w, err)
	if code >= 500 && s.Log != nil {
		s.Log.Error("schema registry: request failed", "method", r.Method, "path", r.URL.Path, "err", err)
	}
	return code
}

// schemaJSON is a schema as the API answers it: schemaType is left out
// for Avro, references when there are none, as Confluent does.
type schemaJSON struct {
	Subject    string               `json:"subject,omitempty"`
	Version    int                  `json:"version,omitempty"`
	ID         int                  `json:"id,omitempty"`
	SchemaType format.Type          `json:"schemaType,omitempty"`
	References []registry.Reference `json:"references,omitempty"`
	Schema     string               `json:"schema"`
}

func toJSON(ss registry.SubjectSchema) schemaJSON {
	out := schemaJSON{Subject: ss.Subject, Version: ss.Version, ID: ss.ID, References: ss.References, Schema: ss.Text}
	if ss.Type != format.Avro {
		out.SchemaType = ss.Type
	}
	return out
}

func flag(r *http.Request, name string) bool {
	return strings.EqualFold(r.URL.Query().Get(name), "true")
}

func idParam(r *http.Request) (int, error) {
	id, err := strconv.Atoi(r.PathValue("id"))
	if err != nil || id < 1 {
		return 0, &registry.Error{Code: registry.CodeSchemaNotFound, Message: fmt.Sprintf("Schema %q not found: an id is a number from 1", r.PathValue("id"))}
	}
	return id, nil
}

func versionParam(r *http.Request) (int, error) {
	if r.PathValue("version") == "" {
		return registry.Latest, nil
	}
	return registry.ParseVersion(r.PathValue("version"))
}

// readBody decodes a request's JSON body into v, given one of the media
// types Confluent's API takes (or none).
func readBody(w http.ResponseWriter, r *http.Request, decode func([]byte) error) error {
	if ct := r.Header.Get("Content-Type"); ct != "" {
		mt, _, err := mime.ParseMediaType(ct)
		switch {
		case err != nil:
			return &registry.Error{Code: http.StatusUnsupportedMediaType, Message: fmt.Sprintf("Content-Type %q: %v", ct, err)}
		case mt != ContentType && mt != "application/vnd.schemaregistry+json" && mt != "application/json" && mt != "application/octet-stream":
			return &registry.Error{Code: http.StatusUnsupportedMediaType, Message: fmt.Sprintf("Content-Type %q: want %s or application/json", ct, ContentType)}
		}
	}
	body, err := io.ReadAll(http.MaxBytesReader(w, r.Body, maxBody))
	if err != nil {
		return registry.Unprocessable(fmt.Sprintf("reading the request body: %v", err))
	}
	return decode(body)
}
