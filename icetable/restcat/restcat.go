// Package restcat serves the topics' Iceberg tables (icetable) over the
// Iceberg REST catalog protocol, read-only: config, namespaces, and the
// listing, existence and loading of tables (docs/iceberg.md, "The
// catalog"). strata owns the tables, which change only by its tiering
// commits, so every write the protocol has is refused with the spec's error
// JSON.
//
// The catalog keeps nothing of its own. A table's current metadata is what
// its pointer in the bucket names (icetable.Tables.Current), the commit
// point every node shares; which tables there are is which topics strata's
// metadata holds (its catalog: Pebble on one node, etcd in a cluster) whose
// pointer exists. So every node answers the same, and a node's death loses
// no commit.
package restcat

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"log/slog"
	"net/http"
	"slices"
	"strconv"
	"strings"

	"github.com/apache/iceberg-go"
	"github.com/apache/iceberg-go/table"
	"github.com/prometheus/client_golang/prometheus"

	"strata/icetable"
)

// BasePath is where the catalog is mounted on the admin listener: a
// client's uri is http://ADMIN/iceberg, and its requests go to
// /iceberg/v1/....
const BasePath = "/iceberg"

// DefaultNamespace holds a table per topic unless configured otherwise.
const DefaultNamespace = "strata"

// Server answers the REST catalog's read endpoints over the topics' tables.
type Server struct {
	Tables *icetable.Tables
	// Namespace is the one namespace, holding a table per topic
	// (DefaultNamespace when empty).
	Namespace string
	// Topics lists the topics strata holds (metadata.Cluster.Topics): a
	// table is served for those whose pointer is in the bucket.
	Topics func(ctx context.Context) ([]string, error)
	// FileIO is the LoadTable answer's config: what a reader needs to open
	// the table's files (s3.endpoint, s3.path-style-access, the region;
	// credentials only when configured to vend them).
	FileIO iceberg.Properties
	Log    *slog.Logger
	// Registerer, if set, gets the requests' counter.
	Registerer prometheus.Registerer
}

// The spec's error types (the REST catalog's ErrorModel.type), as Java's
// and Python's clients map them to their exceptions.
const (
	errNoSuchNamespace = "NoSuchNamespaceException"
	errNoSuchTable     = "NoSuchTableException"
	errForbidden       = "ForbiddenException"
	errNotFound        = "NotFoundException"
	errServer          = "ServiceFailureException"
)

// Handler serves the catalog under BasePath. Mount it on the admin mux,
// behind the admin API's guard (its token, or nothing but the health checks
// when Kafka authenticates and no token is set).
func (s *Server) Handler() http.Handler {
	requests := prometheus.NewCounterVec(prometheus.CounterOpts{
		Name: "strata_iceberg_rest_requests_total",
		Help: "Requests to the Iceberg REST catalog on the admin listener, by route and HTTP status.",
	}, []string{"route", "code"})
	if s.Registerer != nil {
		s.Registerer.MustRegister(requests)
	}
	mux := http.NewServeMux()
	handle := func(pattern, route string, h func(w http.ResponseWriter, r *http.Request) int) {
		mux.HandleFunc(pattern, func(w http.ResponseWriter, r *http.Request) {
			code := h(w, r)
			requests.WithLabelValues(route, strconv.Itoa(code)).Inc()
		})
	}
	v1 := BasePath + "/v1"
	handle("GET "+v1+"/config", "config", s.config)
	handle("GET "+v1+"/namespaces", "list_namespaces", s.listNamespaces)
	handle("GET "+v1+"/namespaces/{ns}", "load_namespace", s.loadNamespace)
	handle("HEAD "+v1+"/namespaces/{ns}", "namespace_exists", s.namespaceExists)
	handle("GET "+v1+"/namespaces/{ns}/tables", "list_tables", s.listTables)
	handle("GET "+v1+"/namespaces/{ns}/tables/{table}", "load_table", s.loadTable)
	handle("HEAD "+v1+"/namespaces/{ns}/tables/{table}", "table_exists", s.tableExists)
	// Every write the protocol has: strata commits these tables itself.
	for _, w := range []struct{ pattern, route, what string }{
		{"POST " + v1 + "/namespaces", "create_namespace", "create a namespace"},
		{"DELETE " + v1 + "/namespaces/{ns}", "drop_namespace", "drop a namespace"},
		{"POST " + v1 + "/namespaces/{ns}/properties", "update_namespace", "change a namespace's properties"},
		{"POST " + v1 + "/namespaces/{ns}/tables", "create_table", "create a table"},
		{"POST " + v1 + "/namespaces/{ns}/register", "register_table", "register a table"},
		{"POST " + v1 + "/namespaces/{ns}/tables/{table}", "update_table", "commit to a table"},
		{"DELETE " + v1 + "/namespaces/{ns}/tables/{table}", "drop_table", "drop a table"},
		{"POST " + v1 + "/tables/rename", "rename_table", "rename a table"},
		{"POST " + v1 + "/transactions/commit", "commit_transaction", "commit a transaction"},
	} {
		handle(w.pattern, w.route, func(wr http.ResponseWriter, r *http.Request) int {
			return s.fail(wr, r, http.StatusForbidden, errForbidden, fmt.Sprintf(
				"strata's Iceberg catalog is read-only: it cannot %s. strata owns the tables of namespace %q, one per topic, "+
					"and only its tiering commits to them (docs/iceberg.md)", w.what, s.namespace()))
		})
	}
	// OAuth 2's token exchange (credential= in pyiceberg and Spark): the
	// catalog mints no tokens, it takes the admin token as the bearer
	// token, and says so in OAuth's error model, which the clients show.
	handle(TokenPath, "oauth_tokens", func(w http.ResponseWriter, r *http.Request) int {
		s.log().Debug("the Iceberg REST catalog refused an OAuth token request", "method", r.Method)
		return RefuseOAuth(w, "strata's Iceberg catalog issues no OAuth tokens: it takes the admin API's token (admin_token) as "+
			"the bearer token itself. Give that to the client as token= (pyiceberg: load_catalog(..., token=ADMIN_TOKEN); "+
			"Spark: spark.sql.catalog.NAME.token; DuckDB: CREATE SECRET (TYPE iceberg, TOKEN ...)), not credential=; "+
			"with no admin_token set, the catalog needs neither (docs/iceberg.md)")
	})
	// Anything else under the base (views, scan planning, metrics reports):
	// not served.
	handle(BasePath+"/", "other", func(w http.ResponseWriter, r *http.Request) int {
		return s.fail(w, r, http.StatusNotFound, errNotFound, fmt.Sprintf(
			"%s %s is not an endpoint of strata's Iceberg catalog, which serves config, namespaces and the loading of tables (GET /iceberg/v1/config lists them)",
			r.Method, r.URL.Path))
	})
	return mux
}

func (s *Server) namespace() string {
	if s.Namespace != "" {
		return s.Namespace
	}
	return DefaultNamespace
}

func (s *Server) log() *slog.Logger {
	if s.Log != nil {
		return s.Log
	}
	return slog.Default()
}

// endpoints are the routes config advertises: the reads. A client that
// negotiates (Java's, iceberg-go's) then refuses writes itself; one that
// does not gets the 403.
var endpoints = []string{
	"GET /v1/{prefix}/namespaces",
	"GET /v1/{prefix}/namespaces/{namespace}",
	"HEAD /v1/{prefix}/namespaces/{namespace}",
	"GET /v1/{prefix}/namespaces/{namespace}/tables",
	"GET /v1/{prefix}/namespaces/{namespace}/tables/{table}",
	"HEAD /v1/{prefix}/namespaces/{namespace}/tables/{table}",
}

// configResponse is the spec's CatalogConfig.
type configResponse struct {
	Defaults  iceberg.Properties `json:"defaults"`
	Overrides iceberg.Properties `json:"overrides"`
	Endpoints []string           `json:"endpoints"`
}

func (s *Server) config(w http.ResponseWriter, _ *http.Request) int {
	return writeJSON(w, http.StatusOK, configResponse{Defaults: iceberg.Properties{}, Overrides: iceberg.Properties{}, Endpoints: endpoints})
}

// isNamespace says whether a path's namespace is strata's. The spec joins
// a namespace's levels with the unit separator (0x1F); strata's has one
// level, so any separator makes it another.
func (s *Server) isNamespace(raw string) bool { return raw == s.namespace() }

func (s *Server) listNamespaces(w http.ResponseWriter, r *http.Request) int {
	// One level: the namespace has no children.
	ns := [][]string{{s.namespace()}}
	if p := r.URL.Query().Get("parent"); p != "" {
		if !s.isNamespace(p) {
			return s.noNamespace(w, r, p)
		}
		ns = [][]string{}
	}
	return writeJSON(w, http.StatusOK, map[string]any{"namespaces": ns})
}

func (s *Server) noNamespace(w http.ResponseWriter, r *http.Request, ns string) int {
	return s.fail(w, r, http.StatusNotFound, errNoSuchNamespace, fmt.Sprintf(
		"namespace %q does not exist: strata's catalog has one namespace, %q, with a table per topic", ns, s.namespace()))
}

func (s *Server) loadNamespace(w http.ResponseWriter, r *http.Request) int {
	if ns := r.PathValue("ns"); !s.isNamespace(ns) {
		return s.noNamespace(w, r, ns)
	}
	return writeJSON(w, http.StatusOK, map[string]any{"namespace": []string{s.namespace()},
		"properties": map[string]string{"comment": "a table per topic, committed by strata's tiering"}})
}

func (s *Server) namespaceExists(w http.ResponseWriter, r *http.Request) int {
	if !s.isNamespace(r.PathValue("ns")) {
		w.WriteHeader(http.StatusNotFound)
		return http.StatusNotFound
	}
	w.WriteHeader(http.StatusNoContent)
	return http.StatusNoContent
}

// tables are the topics with a table, in name order.
func (s *Server) tables(ctx context.Context) ([]string, error) {
	topics, err := s.Topics(ctx)
	if err != nil {
		return nil, fmt.Errorf("listing the topics: %w", err)
	}
	slices.Sort(topics)
	var out []string
	for _, t := range topics {
		ok, err := s.Tables.Exists(ctx, t)
		if err != nil {
			return nil, fmt.Errorf("the table of topic %s: %w", t, err)
		}
		if ok {
			out = append(out, t)
		}
	}
	return out, nil
}

type identifier struct {
	Namespace []string `json:"namespace"`
	Name      string   `json:"name"`
}

func (s *Server) listTables(w http.ResponseWriter, r *http.Request) int {
	if ns := r.PathValue("ns"); !s.isNamespace(ns) {
		return s.noNamespace(w, r, ns)
	}
	names, err := s.tables(r.Context())
	if err != nil {
		return s.fail(w, r, http.StatusInternalServerError, errServer, err.Error())
	}
	ids := make([]identifier, len(names))
	for i, n := range names {
		ids[i] = identifier{Namespace: []string{s.namespace()}, Name: n}
	}
	// Every table in one page: next-page-token stays null.
	return writeJSON(w, http.StatusOK, map[string]any{"identifiers": ids, "next-page-token": nil})
}

// topicOf is the topic a table path names, if it is one strata holds.
func (s *Server) topicOf(ctx context.Context, name string) (bool, error) {
	topics, err := s.Topics(ctx)
	if err != nil {
		return false, fmt.Errorf("listing the topics: %w", err)
	}
	return slices.Contains(topics, name), nil
}

// loadTableResponse is the spec's LoadTableResult.
type loadTableResponse struct {
	MetadataLocation string             `json:"metadata-location"`
	Metadata         json.RawMessage    `json:"metadata"`
	Config           iceberg.Properties `json:"config"`
}

func (s *Server) loadTable(w http.ResponseWriter, r *http.Request) int {
	ns, name := r.PathValue("ns"), r.PathValue("table")
	if !s.isNamespace(ns) {
		// NoSuchTable, not NoSuchNamespace: Spark's Iceberg catalog asks
		// for a metadata table (orders.files) as table files of namespace
		// strata.orders, and looks for the metadata table only after a
		// NoSuchTableException.
		return s.fail(w, r, http.StatusNotFound, errNoSuchTable, fmt.Sprintf(
			"table %q of namespace %q does not exist: strata's catalog has one namespace, %q, with a table per topic",
			name, strings.ReplaceAll(ns, "\x1f", "."), s.namespace()))
	}
	meta, loc, err := s.current(r.Context(), name)
	switch {
	case errors.Is(err, icetable.ErrNoTable):
		return s.fail(w, r, http.StatusNotFound, errNoSuchTable, fmt.Sprintf(
			"table %s.%s does not exist: %v (a topic's table is created by the first tiering run that tiers it, with iceberg.enabled)", ns, name, err))
	case err != nil:
		return s.fail(w, r, http.StatusInternalServerError, errServer, fmt.Sprintf("loading table %s.%s: %v", ns, name, err))
	}
	raw, err := json.Marshal(meta)
	if err != nil {
		return s.fail(w, r, http.StatusInternalServerError, errServer, fmt.Sprintf("table %s.%s's metadata: %v", ns, name, err))
	}
	cfg := iceberg.Properties{}
	for k, v := range s.FileIO {
		cfg[k] = v
	}
	return writeJSON(w, http.StatusOK, loadTableResponse{MetadataLocation: loc, Metadata: raw, Config: cfg})
}

// current is the topic's table, or icetable.ErrNoTable for a name that is
// not a topic strata holds or has no table yet.
func (s *Server) current(ctx context.Context, name string) (table.Metadata, string, error) {
	ok, err := s.topicOf(ctx, name)
	if err != nil {
		return nil, "", err
	}
	if !ok {
		return nil, "", fmt.Errorf("%w: no topic %q", icetable.ErrNoTable, name)
	}
	return s.Tables.Current(ctx, name)
}

func (s *Server) tableExists(w http.ResponseWriter, r *http.Request) int {
	code := http.StatusNoContent
	ok, err := s.topicOf(r.Context(), r.PathValue("table"))
	if err == nil && ok {
		ok, err = s.Tables.Exists(r.Context(), r.PathValue("table"))
	}
	switch {
	case err != nil:
		s.log().Warn("the Iceberg REST catalog could not tell whether a table exists", "table", r.PathValue("table"), "err", err)
		code = http.StatusInternalServerError
	case !s.isNamespace(r.PathValue("ns")) || !ok:
		code = http.StatusNotFound
	}
	w.WriteHeader(code)
	return code
}

// errorResponse is the spec's IcebergErrorResponse.
type errorResponse struct {
	Error errorModel `json:"error"`
}

type errorModel struct {
	Message string `json:"message"`
	Type    string `json:"type"`
	Code    int    `json:"code"`
}

// Refuse answers a request refused before it reaches the catalog (the
// admin API's token) in the spec's error model, which Iceberg clients
// parse and show: a plain-text body, pyiceberg and Spark reported only as
// a response they could not read.
func Refuse(w http.ResponseWriter, code int, msg string) {
	typ := "NotAuthorizedException"
	if code == http.StatusForbidden {
		typ = "ForbiddenException"
	}
	writeJSON(w, code, errorResponse{errorModel{Message: msg, Type: typ, Code: code}})
}

// TokenPath is the REST spec's OAuth token endpoint, which the admin API's
// guard lets through: a client asks it for a token before it has one.
const TokenPath = BasePath + "/v1/oauth/tokens"

// RefuseOAuth answers a token request in OAuth 2's error model (RFC 6749
// section 5.2): {"error": "invalid_client", "error_description": msg},
// 401, not cached; pyiceberg shows it as "OAuthError: invalid_client: msg".
func RefuseOAuth(w http.ResponseWriter, msg string) int {
	w.Header().Set("Cache-Control", "no-store")
	w.Header().Set("Pragma", "no-cache")
	return writeJSON(w, http.StatusUnauthorized, struct {
		Error       string `json:"error"`
		Description string `json:"error_description"`
	}{"invalid_client", msg})
}

func (s *Server) fail(w http.ResponseWriter, r *http.Request, code int, typ, msg string) int {
	if code >= 500 {
		s.log().Error("the Iceberg REST catalog failed a request", "method", r.Method, "path", r.URL.Path, "err", msg)
	} else {
		s.log().Debug("the Iceberg REST catalog refused a request", "method", r.Method, "path", r.URL.Path, "status", code, "reason", msg)
	}
	return writeJSON(w, code, errorResponse{errorModel{Message: msg, Type: typ, Code: code}})
}

func writeJSON(w http.ResponseWriter, code int, v any) int {
	w.Header().Set("Content-Type", "application/json")
	w.WriteHeader(code)
	// An error here is the client gone: the status is sent.
	_ = json.NewEncoder(w).Encode(v)
	return code
}
