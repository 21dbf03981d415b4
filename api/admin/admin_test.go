package admin

import (
	"context"
	"encoding/json"
	"io"
	"log/slog"
	"net/http"
	"net/http/httptest"
	"path/filepath"
	"strings"
	"testing"

	"strata/catalog"
	"strata/catalog/pebblecat"
	"strata/engine/record"
	"strata/engine/segment"
	"strata/tiering"
)

// engine opens a segment engine with a catalog listening to it, as cmd
// wires them.
func engine(t *testing.T) (*segment.Engine, catalog.Catalog) {
	t.Helper()
	dir := t.TempDir()
	quiet := slog.New(slog.NewTextHandler(io.Discard, nil))
	cat, err := pebblecat.Open(filepath.Join(dir, "catalog"))
	if err != nil {
		t.Fatal(err)
	}
	e, err := segment.Open(segment.Config{Dir: dir, Logger: quiet, Events: tiering.Listen(cat, nil, "", quiet)})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { e.Close(); cat.Close() })
	return e, cat
}

// With admin_token set, every endpoint but the health checks wants it.
func TestToken(t *testing.T) {
	e, cat := engine(t)
	h := Handler(context.Background(), Config{Store: e, Engine: e, Catalog: cat, Token: "s3cret"})
	for _, tc := range []struct {
		path, auth string
		want       int
	}{
		{"/healthz", "", 200},
		{"/readyz", "", 200},
		{"/v1/shards", "", 401},
		{"/v1/shards", "Bearer wrong", 401},
		{"/v1/shards", "Bearer s3cret", 200},
		{"/v1/shards", "bearer s3cret", 200}, // the scheme is case-insensitive
		{"/v1/shards", "Bearer S3CRET", 401},
		{"/v1/shards", "Bearer  s3cret", 401},
	} {
		req := httptest.NewRequest("GET", tc.path, nil)
		if tc.auth != "" {
			req.Header.Set("Authorization", tc.auth)
		}
		rec := httptest.NewRecorder()
		h.ServeHTTP(rec, req)
		if rec.Code != tc.want {
			t.Errorf("GET %s with %q: %d, want %d", tc.path, tc.auth, rec.Code, tc.want)
		}
	}
}

// The Iceberg REST catalog under /iceberg/ is guarded as the rest of the
// API: the admin token when set, and nothing but the health checks and
// metrics when Kafka authenticates and no token is set.
func TestIcebergCatalogIsGuardedAsTheAPI(t *testing.T) {
	e, cat := engine(t)
	catalog := http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) { w.WriteHeader(http.StatusTeapot) })
	for _, tc := range []struct {
		name string
		cfg  Config
		auth string
		want int
	}{
		{"no token", Config{}, "", http.StatusTeapot},
		{"token missing", Config{Token: "s3cret"}, "", http.StatusUnauthorized},
		{"token wrong", Config{Token: "s3cret"}, "Bearer nope", http.StatusUnauthorized},
		{"token given", Config{Token: "s3cret"}, "Bearer s3cret", http.StatusTeapot},
		{"SASL on, no token", Config{Authenticated: true}, "", http.StatusForbidden},
		{"SASL on, token given", Config{Authenticated: true, Token: "s3cret"}, "Bearer s3cret", http.StatusTeapot},
	} {
		t.Run(tc.name, func(t *testing.T) {
			tc.cfg.Store, tc.cfg.Engine, tc.cfg.Catalog, tc.cfg.Iceberg = e, e, cat, catalog
			req := httptest.NewRequest("GET", "/iceberg/v1/config", nil)
			if tc.auth != "" {
				req.Header.Set("Authorization", tc.auth)
			}
			rec := httptest.NewRecorder()
			Handler(context.Background(), tc.cfg).ServeHTTP(rec, req)
			if rec.Code != tc.want {
				t.Fatalf("GET /iceberg/v1/config: %d, want %d", rec.Code, tc.want)
			}
			if rec.Code == http.StatusTeapot {
				return
			}
			// A refusal is in the catalog's error model, as Iceberg
			// clients parse it (the REST spec's IcebergErrorResponse).
			var body struct {
				Error struct {
					Message, Type string
					Code          int
				}
			}
			if err := json.Unmarshal(rec.Body.Bytes(), &body); err != nil || body.Error.Code != tc.want || body.Error.Message == "" ||
				!strings.HasSuffix(body.Error.Type, "Exception") || rec.Header().Get("Content-Type") != "application/json" {
				t.Fatalf("refusal %q (%s, %v): want the spec's error JSON with code %d", rec.Body, rec.Header().Get("Content-Type"), err, tc.want)
			}
		})
	}
}

// Shards, their segments and records read back as an operator asks;
// bad requests say what was wrong.
func TestShardsAndRecords(t *testing.T) {
	e, cat := engine(t)
	ctx := context.Background()
	e.CreateShard(ctx, "clicks-0")
	if _, err := e.Append(ctx, "clicks-0", []record.Record{{Key: []byte("k"), Value: []byte("v1")}, {Value: []byte("v2")}}); err != nil {
		t.Fatal(err)
	}
	h := Handler(ctx, Config{Store: e, Engine: e, Catalog: cat})
	get := func(path string, want int, v any) {
		t.Helper()
		rec := httptest.NewRecorder()
		h.ServeHTTP(rec, httptest.NewRequest("GET", path, nil))
		if rec.Code != want {
			t.Fatalf("GET %s: %d %s, want %d", path, rec.Code, rec.Body, want)
		}
		if v != nil {
			if err := json.Unmarshal(rec.Body.Bytes(), v); err != nil {
				t.Fatal(err)
			}
		}
	}
	var shards []shardInfo
	get("/v1/shards", 200, &shards)
	if len(shards) != 1 || shards[0].Shard != "clicks-0" || shards[0].HighWatermark != 2 || shards[0].HotBytes == 0 {
		t.Fatalf("shards: %+v", shards)
	}
	// A single node answers /v1/cluster as the one node that leads all.
	var view clusterAnswer
	get("/v1/cluster", 200, &view)
	if view.Cluster || len(view.Nodes) != 1 || len(view.Partitions) != 1 || view.Partitions[0].Topic != "clicks" ||
		view.Partitions[0].Leader != 0 || len(view.Partitions[0].Segments) != 1 {
		t.Fatalf("cluster view of a single node: %+v", view)
	}
	var recs []recordJSON
	get("/v1/records?shard=clicks-0&offset=1", 200, &recs)
	if len(recs) != 1 || recs[0].Offset != 1 || string(recs[0].Value) != "v2" {
		t.Fatalf("records from 1: %+v", recs)
	}
	get("/v1/records?shard=clicks-0&offset=5", http.StatusRequestedRangeNotSatisfiable, nil)
	get("/v1/records?shard=nope-0&offset=0", http.StatusNotFound, nil)
	get("/v1/records?offset=0", http.StatusBadRequest, nil)
	get("/v1/shards/clicks-0/segments", 200, nil)
	get("/v1/shards/nope-0/segments", http.StatusNotFound, nil)
}
