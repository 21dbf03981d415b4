package restcat

import (
	"context"
	"encoding/json"
	"errors"
	"io"
	"log/slog"
	"net/http"
	"net/http/httptest"
	"path/filepath"
	"slices"
	"strings"
	"testing"

	"github.com/apache/iceberg-go"
	"github.com/apache/iceberg-go/catalog"
	"github.com/apache/iceberg-go/catalog/rest"
	"github.com/apache/iceberg-go/table"
	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/testutil"

	"strata/catalog/pebblecat"
	"strata/engine/segment"
	"strata/engine/store/storetest"
	"strata/icetable"
	"strata/parquet"
	"strata/tiering"
	"strata/tiering/objstore/local"
)

var quiet = slog.New(slog.NewTextHandler(io.Discard, nil))

// tieredTable makes the Iceberg table of topic orders as a node does: its
// engine, catalog and tiering job over a local cold tier, committing to the
// table. It returns the tables and how many records of each partition the
// table holds.
func tieredTable(t *testing.T) (*icetable.Tables, map[int32]int64) {
	t.Helper()
	ctx := context.Background()
	coldDir, dir := t.TempDir(), t.TempDir()
	bucket, err := local.New(coldDir)
	if err != nil {
		t.Fatal(err)
	}
	cat, err := pebblecat.Open(filepath.Join(dir, "catalog"))
	if err != nil {
		t.Fatal(err)
	}
	e, err := segment.Open(segment.Config{Dir: dir, Workers: 2, MaxSegmentBytes: 16 << 10, RollCheckInterval: 10, Logger: quiet,
		Events: tiering.Listen(cat, bucket, "data", quiet)})
	if err != nil {
		cat.Close()
		t.Fatal(err)
	}
	t.Cleanup(func() { e.Close(); cat.Close() })
	tables := &icetable.Tables{Bucket: bucket, Prefix: "data", Location: coldDir, Log: quiet}
	job := &tiering.Job{Engine: e, Catalog: cat, Bucket: bucket, Prefix: "data", Log: quiet,
		Parquet: parquet.Options{RowGroupBytes: 4 << 10}, Tables: tables}
	for p, shard := range []string{"orders-0", "orders-1"} {
		if err := e.CreateShard(ctx, shard); err != nil {
			t.Fatal(err)
		}
		for i := 0; i < 30; i++ {
			if _, err := e.Append(ctx, shard, storetest.Records(20, p*100+i)); err != nil {
				t.Fatal(err)
			}
		}
	}
	sum, err := job.Run(ctx)
	if err != nil || len(sum.Errors) > 0 {
		t.Fatalf("tiering run: %v %+v", err, sum.Errors)
	}
	tiered := map[int32]int64{}
	for _, u := range sum.Uploaded {
		p := int32(0)
		if u.Shard == "orders-1" {
			p = 1
		}
		tiered[p] += int64(u.Records)
	}
	if tiered[0] == 0 || tiered[1] == 0 {
		t.Fatalf("tiering tiered %v; want records of both partitions", tiered)
	}
	return tables, tiered
}

func serve(t *testing.T, s *Server) string {
	t.Helper()
	srv := httptest.NewServer(s.Handler())
	t.Cleanup(srv.Close)
	return srv.URL + BasePath
}

// iceberg-go's own REST client, given only the catalog's URI, finds the
// namespace and the topic's table, loads it at the metadata the pointer
// names and reads through it exactly the records tiered, partition by
// partition; a topic with nothing tiered has no table, and a name that is
// not a topic none.
func TestIcebergGoReadsTheTableThroughTheCatalog(t *testing.T) {
	ctx := context.Background()
	tables, tiered := tieredTable(t)
	reg := prometheus.NewRegistry()
	s := &Server{Tables: tables, Topics: func(context.Context) ([]string, error) { return []string{"quiet", "orders"}, nil },
		FileIO: iceberg.Properties{"strata.test": "handed to readers"}, Log: quiet, Registerer: reg}
	cat, err := rest.NewCatalog(ctx, "strata", serve(t, s))
	if err != nil {
		t.Fatalf("connecting iceberg-go's REST client: %v", err)
	}
	defer cat.Close()

	nss, err := cat.ListNamespaces(ctx, nil)
	if err != nil || len(nss) != 1 || strings.Join(nss[0], ".") != "strata" {
		t.Fatalf("ListNamespaces: %v %v; want [[strata]]", nss, err)
	}
	for _, c := range []struct {
		ns   string
		want bool
	}{{"strata", true}, {"other", false}} {
		if ok, err := cat.CheckNamespaceExists(ctx, table.Identifier{c.ns}); err != nil || ok != c.want {
			t.Fatalf("CheckNamespaceExists(%s): %v %v; want %v", c.ns, ok, err, c.want)
		}
	}
	var names []string
	for id, err := range cat.ListTables(ctx, table.Identifier{"strata"}) {
		if err != nil {
			t.Fatalf("ListTables: %v", err)
		}
		names = append(names, strings.Join(id, "."))
	}
	if !slices.Equal(names, []string{"strata.orders"}) {
		t.Fatalf("ListTables: %v; want [strata.orders] (quiet has nothing tiered)", names)
	}
	for _, c := range []struct {
		table []string
		want  bool
	}{{[]string{"strata", "orders"}, true}, {[]string{"strata", "quiet"}, false}, {[]string{"strata", "nosuch"}, false}, {[]string{"other", "orders"}, false}} {
		if ok, err := cat.CheckTableExists(ctx, c.table); err != nil || ok != c.want {
			t.Fatalf("CheckTableExists(%v): %v %v; want %v", c.table, ok, err, c.want)
		}
	}
	if _, err := cat.LoadTable(ctx, table.Identifier{"strata", "quiet"}); !errors.Is(err, catalog.ErrNoSuchTable) {
		t.Fatalf("LoadTable(strata.quiet): %v; want ErrNoSuchTable", err)
	}

	tbl, err := cat.LoadTable(ctx, table.Identifier{"strata", "orders"})
	if err != nil {
		t.Fatalf("LoadTable(strata.orders): %v", err)
	}
	_, want, err := tables.Current(ctx, "orders")
	if err != nil {
		t.Fatal(err)
	}
	if tbl.MetadataLocation() != want {
		t.Fatalf("metadata-location %s; want the one the pointer names, %s", tbl.MetadataLocation(), want)
	}
	if tbl.Properties()["strata.topic"] != "orders" {
		t.Fatalf("the table's properties: %v", tbl.Properties())
	}
	for p, n := range tiered {
		sc := tbl.Scan(table.WithRowFilter(iceberg.EqualTo(iceberg.Reference(icetable.ColPartition), p)),
			table.WithSelectedFields(icetable.ColOffset))
		at, err := sc.ToArrowTable(ctx)
		if err != nil {
			t.Fatalf("scanning partition %d through the catalog: %v", p, err)
		}
		if at.NumRows() != n {
			t.Fatalf("partition %d: the scan through the catalog read %d rows; %d records were tiered", p, at.NumRows(), n)
		}
		at.Release()
	}
	if got := testutil.ToFloat64(must(reg, t).WithLabelValues("load_table", "200")); got != 1 {
		t.Fatalf("strata_iceberg_rest_requests_total{route=load_table,code=200} = %v; want 1", got)
	}
}

func must(reg *prometheus.Registry, t *testing.T) *prometheus.CounterVec {
	t.Helper()
	// The counter registered by Handler, found again by name through a
	// second registration's AlreadyRegisteredError.
	err := reg.Register(prometheus.NewCounterVec(prometheus.CounterOpts{Name: "strata_iceberg_rest_requests_total",
		Help: "Requests to the Iceberg REST catalog on the admin listener, by route and HTTP status."}, []string{"route", "code"}))
	var are prometheus.AlreadyRegisteredError
	if !errors.As(err, &are) {
		t.Fatalf("the requests counter is not registered: %v", err)
	}
	return are.ExistingCollector.(*prometheus.CounterVec)
}

// Every write of the protocol is refused with the spec's error JSON (403,
// ForbiddenException) naming why; the table is as it was.
func TestWritesAreRefused(t *testing.T) {
	tables, _ := tieredTable(t)
	s := &Server{Tables: tables, Topics: func(context.Context) ([]string, error) { return []string{"orders"}, nil }, Log: quiet}
	base := serve(t, s)
	_, before, err := tables.Current(context.Background(), "orders")
	if err != nil {
		t.Fatal(err)
	}
	for _, c := range []struct{ method, path, body string }{
		{"POST", "/v1/namespaces", `{"namespace":["mine"]}`},
		{"DELETE", "/v1/namespaces/strata", ""},
		{"POST", "/v1/namespaces/strata/properties", `{"updates":{"a":"b"}}`},
		{"POST", "/v1/namespaces/strata/tables", `{"name":"t","schema":{"type":"struct","fields":[]}}`},
		{"POST", "/v1/namespaces/strata/register", `{"name":"t","metadata-location":"/x"}`},
		{"POST", "/v1/namespaces/strata/tables/orders", `{"requirements":[],"updates":[{"action":"remove-properties","removals":["strata.topic"]}]}`},
		{"DELETE", "/v1/namespaces/strata/tables/orders?purgeRequested=true", ""},
		{"POST", "/v1/tables/rename", `{"source":{"namespace":["strata"],"name":"orders"},"destination":{"namespace":["strata"],"name":"o"}}`},
		{"POST", "/v1/transactions/commit", `{"table-changes":[]}`},
	} {
		t.Run(c.method+" "+c.path, func(t *testing.T) {
			req, _ := http.NewRequest(c.method, base+c.path, strings.NewReader(c.body))
			resp, err := http.DefaultClient.Do(req)
			if err != nil {
				t.Fatal(err)
			}
			defer resp.Body.Close()
			var e errorResponse
			if err := json.NewDecoder(resp.Body).Decode(&e); err != nil {
				t.Fatalf("%d, not the spec's error JSON: %v", resp.StatusCode, err)
			}
			if resp.StatusCode != http.StatusForbidden || e.Error.Code != 403 || e.Error.Type != "ForbiddenException" ||
				!strings.Contains(e.Error.Message, "read-only") || !strings.Contains(e.Error.Message, "strata owns") {
				t.Fatalf("%d %+v; want 403, ForbiddenException, saying strata owns the tables", resp.StatusCode, e.Error)
			}
		})
	}
	if _, after, err := tables.Current(context.Background(), "orders"); err != nil || after != before {
		t.Fatalf("the table moved from %s to %s (%v)", before, after, err)
	}

	// A client that negotiates endpoints refuses the write itself.
	cat, err := rest.NewCatalog(context.Background(), "strata", base)
	if err != nil {
		t.Fatal(err)
	}
	defer cat.Close()
	if err := cat.DropTable(context.Background(), table.Identifier{"strata", "orders"}); err == nil {
		t.Fatal("iceberg-go's DropTable through the catalog succeeded")
	}
}

// The LoadTable answer carries FileIO, what a reader needs to open the
// files; config advertises only the reads.
func TestLoadTableHandsReadersTheFileIOConfig(t *testing.T) {
	tables, _ := tieredTable(t)
	io := iceberg.Properties{"s3.endpoint": "http://127.0.0.1:9000", "s3.path-style-access": "true", "client.region": "us-east-1"}
	s := &Server{Tables: tables, Namespace: "lake", Topics: func(context.Context) ([]string, error) { return []string{"orders"}, nil }, FileIO: io, Log: quiet}
	base := serve(t, s)
	get := func(path string, v any) int {
		resp, err := http.Get(base + path)
		if err != nil {
			t.Fatal(err)
		}
		defer resp.Body.Close()
		if err := json.NewDecoder(resp.Body).Decode(v); err != nil {
			t.Fatalf("GET %s: %v", path, err)
		}
		return resp.StatusCode
	}
	var lt loadTableResponse
	if code := get("/v1/namespaces/lake/tables/orders", &lt); code != 200 {
		t.Fatalf("LoadTable in namespace lake: %d", code)
	}
	for k, v := range io {
		if lt.Config[k] != v {
			t.Fatalf("LoadTable's config %v; want %v", lt.Config, io)
		}
	}
	if _, err := table.ParseMetadataBytes(lt.Metadata); err != nil {
		t.Fatalf("LoadTable's metadata: %v", err)
	}
	var cfg configResponse
	if code := get("/v1/config", &cfg); code != 200 || !slices.Equal(cfg.Endpoints, endpoints) {
		t.Fatalf("config: %d %+v", code, cfg)
	}
	// Spark asks for orders.files as table files of namespace strata.orders,
	// and looks for the metadata table only after NoSuchTableException.
	var e errorResponse
	if code := get("/v1/namespaces/lake%1Forders/tables/files", &e); code != 404 || e.Error.Type != "NoSuchTableException" {
		t.Fatalf("LoadTable of lake.orders.files: %d %+v; want 404 NoSuchTableException", code, e)
	}
	if code := get("/v1/namespaces/strata/tables/orders", &e); code != 404 || e.Error.Type != "NoSuchTableException" {
		t.Fatalf("LoadTable in namespace strata when it is lake: %d %+v", code, e)
	}
}
