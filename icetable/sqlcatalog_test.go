package icetable

import (
	"context"
	"database/sql"
	"database/sql/driver"
	"errors"
	"path/filepath"
	"strings"
	"sync"
	"testing"

	sqlcat "github.com/apache/iceberg-go/catalog/sql"
	"modernc.org/sqlite"

	"strata/engine/record"
	"strata/internal/testsvc"
	"strata/tiering/objstore"
)

// pointer is one place a table's current metadata can be named: each
// test below runs against every one, as readers see the same table
// through any of them.
type pointer struct {
	name string
	// open is a process's Tables over bucket (rooted at dir), naming its
	// tables' metadata where this pointer keeps it; every call of one
	// test shares the one catalog, as nodes do.
	open func(t *testing.T, bucket objstore.Bucket, dir string) *Tables
}

func pointers(t *testing.T) []pointer {
	sqliteFile := filepath.Join(t.TempDir(), "catalog.db")
	var pgOnce sync.Once
	var pgURL string
	withCatalog := func(uri func() string) func(t *testing.T, bucket objstore.Bucket, dir string) *Tables {
		return func(t *testing.T, bucket objstore.Bucket, dir string) *Tables {
			tables := &Tables{Bucket: bucket, Prefix: "data", Location: dir, Log: quiet}
			if err := tables.OpenCatalog(context.Background(), uri(), "strata", "strata"); err != nil {
				t.Fatal(err)
			}
			t.Cleanup(func() { tables.Close() })
			return tables
		}
	}
	return []pointer{
		{"bucket", func(t *testing.T, bucket objstore.Bucket, dir string) *Tables {
			return &Tables{Bucket: bucket, Prefix: "data", Location: dir, Log: quiet}
		}},
		{"hadoop", func(t *testing.T, bucket objstore.Bucket, dir string) *Tables {
			return &Tables{Bucket: bucket, Prefix: "data", Location: dir, Log: quiet, Hadoop: true}
		}},
		{"sqlite", withCatalog(func() string { return "sqlite:" + sqliteFile })},
		{"postgres", withCatalog(func() string {
			pgOnce.Do(func() { pgURL = testsvc.StartPostgres(t) })
			return pgURL
		})},
	}
}

// Whatever holds the pointer, tiering's commits make the same table: the
// records tiered, once, read back by iceberg-go; another process over the
// same catalog sees it; a deleted topic's table leaves the catalog with
// its folder, and a topic made again under the name gets a new one.
func TestEveryPointerHoldsTheSameTable(t *testing.T) {
	for _, p := range pointers(t) {
		t.Run(p.name, func(t *testing.T) {
			ctx := context.Background()
			bucket, dir := localBucket(t)
			r := newRigOver(t, bucket, p.open(t, bucket, dir))
			produced := map[string][]record.Record{
				"orders-0": produce(t, r.engine, "orders-0", 12, 0),
				"orders-1": produce(t, r.engine, "orders-1", 12, 100),
			}
			tiered := map[string]uint64{}
			r.run(t, tiered)
			produced["orders-0"] = append(produced["orders-0"], produce(t, r.engine, "orders-0", 12, 200)...)
			r.run(t, tiered)

			other := p.open(t, bucket, dir) // another node, or the next start
			rows, tbl := scan(t, other, "orders", 0, 1)
			for i, shard := range []string{"orders-0", "orders-1"} {
				sameRecords(t, shard, rows[int32(i)], produced[shard][:tiered[shard]])
			}
			if n := len(tbl.Metadata().Snapshots()); n != 2 {
				t.Fatalf("two runs that tiered made %d snapshots", n)
			}
			if ok, err := other.Exists(ctx, "orders"); err != nil || !ok {
				t.Fatalf("Exists(orders) = %v, %v", ok, err)
			}

			for _, shard := range []string{"orders-0", "orders-1"} {
				if err := r.engine.DeleteShard(ctx, shard); err != nil {
					t.Fatal(err)
				}
			}
			r.engine.SyncEvents()
			if ok, err := other.Exists(ctx, "orders"); err != nil || ok {
				t.Fatalf("after the topic's deletion Exists(orders) = %v, %v", ok, err)
			}
			again := produce(t, r.engine, "orders-0", 12, 300)
			tiered = map[string]uint64{}
			r.run(t, tiered)
			rows, _ = scan(t, other, "orders", 0)
			sameRecords(t, "the topic made again", rows[0], again[:tiered["orders-0"]])
		})
	}
}

// With an external catalog a commit can die at the bucket's steps as
// before, at the row's swap, and after the swap landed but before the
// answer came (the database's commit): in every case a new process holds
// each tiered offset once and nothing that was not tiered.
func TestEveryCatalogCommitStepRecovers(t *testing.T) {
	manifest := func(b string) bool { return strings.HasSuffix(b, ".avro") && !strings.HasPrefix(b, "snap-") }
	metadata := func(b string) bool { return strings.HasSuffix(b, ".metadata.json") && !strings.HasPrefix(b, "00000-") }
	for _, tc := range []struct {
		name string
		// bucket dies at a write of the bucket's; row at the catalog's
		// statement starting with it ("INSERT": the table's creation,
		// "UPDATE": a commit's swap), before it ran, or with landed after
		// its transaction committed.
		bucket    func(string) bool
		row       string
		landed    bool
		snapshots int // the table's after the crash (-1: no table yet)
	}{
		{name: "dies writing the manifest", bucket: manifest, snapshots: 0},
		{name: "dies after writing the metadata", bucket: metadata, landed: true, snapshots: 0},
		{name: "dies creating the table's row", row: "INSERT", snapshots: -1},
		// iceberg-go's CreateTable deletes the first metadata file when its
		// insert fails, even one whose result is unknown: the row is dropped.
		{name: "dies after creating the table's row", row: "INSERT", landed: true, snapshots: -1},
		{name: "dies swapping the row", row: "UPDATE", snapshots: 0},
		{name: "dies after swapping the row (result unknown)", row: "UPDATE", landed: true, snapshots: 1},
	} {
		t.Run(tc.name, func(t *testing.T) {
			ctx := context.Background()
			bucket, dir := localBucket(t)
			r := newRig(t, bucket, dir)
			r.job.Tables = nil
			produced := map[string][]record.Record{
				"orders-0": produce(t, r.engine, "orders-0", 14, 0),
				"orders-1": produce(t, r.engine, "orders-1", 14, 100),
			}
			tiered := map[string]uint64{}
			r.run(t, tiered)

			file := filepath.Join(t.TempDir(), "catalog.db")
			dsn := "file:" + file + "?_pragma=busy_timeout(10000)&_pragma=journal_mode(WAL)"
			var dyingBucket objstore.Bucket = bucket
			if tc.bucket != nil {
				dyingBucket = &dieAt{Bucket: bucket, op: objstore.OpUpload, step: tc.bucket, landed: tc.landed}
			}
			dying := &Tables{Bucket: dyingBucket, Prefix: "data", Location: dir, Log: quiet}
			drv := "sqlite"
			if tc.row != "" {
				drv = dyingDriver(t, tc.row, tc.landed)
			}
			if err := dying.openCatalog(ctx, drv, sqlcat.SQLite, dsn, file, "strata", "strata"); err != nil {
				t.Fatal(err)
			}
			defer dying.Close()
			if err := dying.CommitTables(ctx, map[string]uint64{"orders-0": 0, "orders-1": 0}); !errors.Is(err, errKilled) {
				t.Fatalf("the dying commit: %v, want it killed", err)
			}

			fresh := &Tables{Bucket: bucket, Prefix: "data", Location: dir, Log: quiet}
			if err := fresh.OpenCatalog(ctx, "sqlite:"+file, "strata", "strata"); err != nil {
				t.Fatal(err)
			}
			defer fresh.Close()
			tbl, _, err := fresh.load(ctx, "orders")
			switch {
			case tc.snapshots < 0 && !errors.Is(err, errNoTable):
				t.Fatalf("after the crash: %v, want no table yet", err)
			case tc.snapshots >= 0 && err != nil:
				t.Fatalf("after the crash: %v", err)
			case tc.snapshots >= 0 && len(tbl.Metadata().Snapshots()) != tc.snapshots:
				t.Fatalf("after the crash the table has %d snapshots, want %d", len(tbl.Metadata().Snapshots()), tc.snapshots)
			}
			if err := fresh.CommitTables(ctx, map[string]uint64{"orders-0": 0, "orders-1": 0}); err != nil {
				t.Fatal(err)
			}
			rows, tbl := scan(t, fresh, "orders", 0, 1)
			for p, shard := range []string{"orders-0", "orders-1"} {
				sameRecords(t, shard, rows[int32(p)], produced[shard][:tiered[shard]])
			}
			if n := len(tbl.Metadata().Snapshots()); n != 1 {
				t.Fatalf("the table has %d snapshots, want the one commit", n)
			}
		})
	}
}

func TestCatalogURIs(t *testing.T) {
	for _, tc := range []struct {
		uri, driver, dsn, err string
	}{
		{uri: "sqlite:/var/lib/strata/catalog.db", driver: "sqlite", dsn: "file:/var/lib/strata/catalog.db?"},
		{uri: "sqlite:///var/lib/strata/catalog.db", driver: "sqlite", dsn: "file:/var/lib/strata/catalog.db?"},
		{uri: "sqlite:catalog.db", driver: "sqlite", dsn: "file:catalog.db?"},
		{uri: "postgres://u:pw@127.0.0.1:5432/db", driver: "pgx", dsn: "postgres://u:pw@127.0.0.1:5432/db"},
		{uri: "postgresql://u@127.0.0.1/db", driver: "pgx", dsn: "postgresql://u@127.0.0.1/db"},
		{uri: "sqlite:", err: "want sqlite:PATH"},
		{uri: "mysql://u:secret@h/db", err: "want sqlite:PATH or postgres://"},
		{uri: "/var/lib/catalog.db", err: "want sqlite:PATH or postgres://"},
	} {
		drv, _, dsn, err := parseCatalogURI(tc.uri)
		switch {
		case tc.err != "":
			if err == nil || !strings.Contains(err.Error(), tc.err) || strings.Contains(err.Error(), "secret") {
				t.Errorf("%s: %v, want an error saying %q and no password", tc.uri, err, tc.err)
			}
		case err != nil || drv != tc.driver || !strings.HasPrefix(dsn, tc.dsn):
			t.Errorf("%s: %s %s %v, want %s %s…", tc.uri, drv, dsn, err, tc.driver, tc.dsn)
		}
	}
}

// No password of an iceberg.catalog value reaches an error, a log or
// `strata config`, however it is written (an outside tester found the
// query's and a connection string's).
func TestCatalogURIsAreRedacted(t *testing.T) {
	for _, uri := range []string{
		"postgres://strata:s3cr3t@127.0.0.1:5432/lake",
		"postgres://strata@127.0.0.1:1/x?sslmode=disable&password=s3cr3t",
		"postgresql://strata@h/x?sslpassword=s3cr3t",
		"host=127.0.0.1 user=strata password=s3cr3t dbname=lake",
		"host=h password='s3cr3t' dbname=lake",
		"mysql://u:s3cr3t@h/db",
	} {
		got := RedactCatalogURI(uri)
		if strings.Contains(got, "s3cr3t") || !strings.Contains(got, "REDACTED") {
			t.Errorf("RedactCatalogURI(%q) = %q", uri, got)
		}
		if _, _, _, err := parseCatalogURI(uri); err != nil && strings.Contains(err.Error(), "s3cr3t") {
			t.Errorf("parseCatalogURI(%q): %v", uri, err)
		}
		err := (&Tables{}).OpenCatalog(context.Background(), uri, "strata", "strata")
		if err == nil || strings.Contains(err.Error(), "s3cr3t") {
			t.Errorf("OpenCatalog(%q) = %v, want an error without the password", uri, err)
		}
	}
	if got := RedactCatalogURI("sqlite:/var/lib/c.db"); got != "sqlite:/var/lib/c.db" {
		t.Errorf("a URI without a password changed: %q", got)
	}
}

// dyingDriver registers a database/sql driver: SQLite, but for the first
// statement starting with verb on the catalog's iceberg_tables, which
// fails before it runs, or with landed fails its transaction's commit
// after the commit landed. Every later statement fails too.
func dyingDriver(t *testing.T, verb string, landed bool) string {
	name := "dying-" + strings.NewReplacer("/", "-", " ", "-").Replace(t.Name())
	sql.Register(name, &dyingSQL{verb: verb, landed: landed})
	return name
}

type dyingSQL struct {
	verb   string
	landed bool

	mu         sync.Mutex
	dead, hit  bool // hit: the statement ran, its commit is to die
	underlying sqlite.Driver
}

func (d *dyingSQL) Open(dsn string) (driver.Conn, error) {
	c, err := d.underlying.Open(dsn)
	if err != nil {
		return nil, err
	}
	return &dyingConn{Conn: c, d: d}, nil
}

type dyingConn struct {
	driver.Conn
	d *dyingSQL
}

func (c *dyingConn) check(query string) error {
	c.d.mu.Lock()
	defer c.d.mu.Unlock()
	if c.d.dead {
		return errKilled
	}
	q := strings.TrimSpace(query)
	if strings.HasPrefix(q, c.d.verb) && strings.Contains(q, "iceberg_tables") {
		if !c.d.landed {
			c.d.dead = true
			return errKilled
		}
		c.d.hit = true
	}
	return nil
}

func (c *dyingConn) ExecContext(ctx context.Context, query string, args []driver.NamedValue) (driver.Result, error) {
	if err := c.check(query); err != nil {
		return nil, err
	}
	return c.Conn.(driver.ExecerContext).ExecContext(ctx, query, args)
}

func (c *dyingConn) QueryContext(ctx context.Context, query string, args []driver.NamedValue) (driver.Rows, error) {
	if err := c.check(query); err != nil {
		return nil, err
	}
	return c.Conn.(driver.QueryerContext).QueryContext(ctx, query, args)
}

func (c *dyingConn) BeginTx(ctx context.Context, opts driver.TxOptions) (driver.Tx, error) {
	tx, err := c.Conn.(driver.ConnBeginTx).BeginTx(ctx, opts)
	if err != nil {
		return nil, err
	}
	return &dyingTx{Tx: tx, d: c.d}, nil
}

type dyingTx struct {
	driver.Tx
	d *dyingSQL
}

func (tx *dyingTx) Commit() error {
	if err := tx.Tx.Commit(); err != nil {
		return err
	}
	tx.d.mu.Lock()
	defer tx.d.mu.Unlock()
	if tx.d.hit && !tx.d.dead {
		tx.d.dead = true
		return errKilled
	}
	return nil
}
