package icetable

import (
	"context"
	"database/sql"
	"errors"
	"fmt"
	"io/fs"
	"log/slog"
	"net/url"
	"path"
	"regexp"
	"slices"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"

	"github.com/apache/iceberg-go"
	"github.com/apache/iceberg-go/catalog"
	sqlcat "github.com/apache/iceberg-go/catalog/sql"
	icebergio "github.com/apache/iceberg-go/io"
	"github.com/apache/iceberg-go/table"
	_ "github.com/jackc/pgx/v5/stdlib" // database/sql's "pgx" driver: PostgreSQL
	_ "modernc.org/sqlite"             // database/sql's "sqlite" driver, in Go (no cgo)

	"strata/tiering/objstore"
)

// An external catalog (iceberg.catalog: a SQL catalog's URI) holds each
// table's pointer in place of the bucket's version-hint.text: the row of
// the Iceberg SQL catalog (the JDBC catalog's iceberg_tables table, as
// Spark's JdbcCatalog and pyiceberg's SqlCatalog read it), and a commit is
// the row's compare-and-swap on its metadata location (iceberg-go's
// catalog/sql). The metadata files are the same, in the same folder, and
// go through strata's object store as before: the catalog's file IO is
// this package's fileIO, found by the bucketIOKey property.

// OpenCatalog makes uri's catalog the tables' pointer: "sqlite:PATH" (one
// node: a file), or "postgres://USER:PASSWORD@HOST:PORT/DB" (any number of
// nodes). name is the catalog's name in its rows (the JDBC catalog's
// catalog_name: Spark's name for the catalog), namespace the one the
// tables are in. The catalog's tables and the namespace are created if
// missing.
func (t *Tables) OpenCatalog(ctx context.Context, uri, name, namespace string) error {
	driver, dialect, dsn, err := parseCatalogURI(uri)
	if err != nil {
		return err
	}
	return t.openCatalog(ctx, driver, dialect, dsn, RedactCatalogURI(uri), name, namespace)
}

func (t *Tables) openCatalog(ctx context.Context, driver string, dialect sqlcat.SupportedDialect, dsn, uri, name, namespace string) error {
	db, err := sql.Open(driver, dsn)
	if err != nil {
		return fmt.Errorf("iceberg.catalog %s: %w", uri, err)
	}
	if err := db.PingContext(ctx); err != nil {
		db.Close()
		return fmt.Errorf("iceberg.catalog %s: cannot reach the database: %w", uri, err)
	}
	id := bindBucket(t.Bucket, strings.TrimSuffix(t.Location, "/"))
	cat, err := sqlcat.NewCatalog(name, db, dialect, iceberg.Properties{
		"init_catalog_tables": "true",
		bucketIOKey:           id,
	})
	if err != nil {
		db.Close()
		unbindBucket(id)
		return fmt.Errorf("iceberg.catalog %s: %w", uri, err)
	}
	ns := table.Identifier{namespace}
	if err := cat.CreateNamespace(ctx, ns, iceberg.Properties{"comment": "strata's topics, one table each"}); err != nil &&
		!errors.Is(err, catalog.ErrNamespaceAlreadyExists) {
		cat.Close()
		db.Close()
		unbindBucket(id)
		return fmt.Errorf("iceberg.catalog %s: creating namespace %s: %w", uri, namespace, err)
	}
	t.external = &external{cat: cat, db: db, dialect: dialect, ioID: id, namespace: namespace, log: t.log()}
	return nil
}

// Close releases the external catalog's connections, if there is one.
func (t *Tables) Close() error {
	e := t.external
	if e == nil {
		return nil
	}
	t.external = nil
	unbindBucket(e.ioID)
	return errors.Join(e.cat.Close(), e.db.Close())
}

type external struct {
	cat       *sqlcat.Catalog
	db        *sql.DB
	dialect   sqlcat.SupportedDialect
	ioID      string
	namespace string
	log       *slog.Logger
}

// parseCatalogURI is the database/sql driver, iceberg-go's dialect and the
// driver's data source name of an iceberg.catalog URI.
func parseCatalogURI(uri string) (driver string, dialect sqlcat.SupportedDialect, dsn string, err error) {
	scheme, rest, ok := strings.Cut(uri, ":")
	switch {
	case ok && scheme == "sqlite":
		file := strings.TrimPrefix(rest, "//")
		if file == "" {
			return "", "", "", fmt.Errorf("iceberg.catalog %q: want sqlite:PATH (a file)", uri)
		}
		// Spark or pyiceberg may read the file while strata commits:
		// readers do not block the writer in WAL mode, and a writer
		// waits for a lock rather than failing at once.
		return "sqlite", sqlcat.SQLite, "file:" + file + "?_pragma=busy_timeout(10000)&_pragma=journal_mode(WAL)", nil
	case ok && (scheme == "postgres" || scheme == "postgresql"):
		if _, err := url.Parse(uri); err != nil {
			return "", "", "", fmt.Errorf("iceberg.catalog: %w", err)
		}
		return "pgx", sqlcat.Postgres, uri, nil
	}
	return "", "", "", fmt.Errorf("iceberg.catalog %q: want sqlite:PATH or postgres://USER:PASSWORD@HOST:PORT/DATABASE (or hadoop, or empty: the bucket holds the pointer)", RedactCatalogURI(uri))
}

// RedactCatalogURI is an iceberg.catalog value without its secrets, for
// errors, logs and `strata config`: a password in the URI's user info or
// in its query (password=, sslpassword=), or in a key=value connection
// string, reads REDACTED.
func RedactCatalogURI(uri string) string {
	if u, err := url.Parse(uri); err == nil && u.Scheme != "" {
		if u.User != nil {
			if _, ok := u.User.Password(); ok {
				u.User = url.UserPassword(u.User.Username(), "REDACTED")
			}
		}
		q := u.Query()
		for k := range q {
			if strings.Contains(strings.ToLower(k), "password") {
				q.Set(k, "REDACTED")
			}
		}
		u.RawQuery = q.Encode()
		return u.String()
	}
	return passwordKV.ReplaceAllString(uri, "${1}REDACTED")
}

var passwordKV = regexp.MustCompile(`(?i)(password\s*=\s*)('[^']*'|\S+)`)

func (e *external) ident(topic string) table.Identifier { return table.Identifier{e.namespace, topic} }

// load is the topic's table as the catalog's row names it.
func (e *external) load(ctx context.Context, topic string) (*table.Table, error) {
	tbl, err := e.cat.LoadTable(ctx, e.ident(topic))
	if errors.Is(err, catalog.ErrNoSuchTable) {
		return nil, errNoTable
	}
	if errors.Is(err, fs.ErrNotExist) {
		return nil, e.unmade(ctx, topic, err)
	}
	return tbl, err
}

// unmade drops the row of a table whose creation died after its row was
// inserted and before the answer came: iceberg-go's CreateTable then
// deletes the table's first metadata file, which the row still names.
// Such a table has no snapshot, so nothing is lost, and the next commit
// makes it again; a row naming any later metadata file that is missing
// is an error.
func (e *external) unmade(ctx context.Context, topic string, loadErr error) error {
	q := "SELECT metadata_location FROM iceberg_tables WHERE catalog_name = ? AND table_namespace = ? AND table_name = ?"
	if e.dialect == sqlcat.Postgres {
		q = "SELECT metadata_location FROM iceberg_tables WHERE catalog_name = $1 AND table_namespace = $2 AND table_name = $3"
	}
	var loc sql.NullString
	if err := e.db.QueryRowContext(ctx, q, e.cat.Name(), e.namespace, topic).Scan(&loc); err != nil {
		return errors.Join(loadErr, err)
	}
	if v, err := metadataVersion(path.Base(loc.String)); err != nil || v != 0 {
		return loadErr
	}
	if err := e.drop(ctx, topic); err != nil {
		return errors.Join(loadErr, err)
	}
	e.log.Warn("a table's creation had died after its catalog row was written; the row is dropped and the table made again",
		"topic", topic, "metadata", loc.String)
	return errNoTable
}

// create makes the topic's table (its first metadata file, then its row),
// or loads the one another node made first.
func (e *external) create(ctx context.Context, topic, location string, props iceberg.Properties) (*table.Table, error) {
	spec := Spec()
	tbl, err := e.cat.CreateTable(ctx, e.ident(topic), Schema(), catalog.WithLocation(location),
		catalog.WithPartitionSpec(&spec), catalog.WithProperties(props))
	if errors.Is(err, catalog.ErrTableAlreadyExists) {
		return e.load(ctx, topic)
	}
	return tbl, err
}

// drop removes the topic's row: its table left the bucket with the
// topic's deletion, and a topic made again under the name makes a new one.
func (e *external) drop(ctx context.Context, topic string) error {
	err := e.cat.DropTable(ctx, e.ident(topic))
	if errors.Is(err, catalog.ErrNoSuchTable) {
		return nil
	}
	return err
}

// bucketIOKey is the catalog property naming the bucket its tables' files
// are in: iceberg-go opens a table's files by the scheme of their URI and
// the catalog's properties, so the schemes below look the bucket up by it.
const bucketIOKey = "strata.bucket-io"

var (
	bucketIOs  sync.Map // id -> fileIO without its context
	bucketIOID atomic.Int64
)

func bindBucket(b objstore.Bucket, base string) string {
	id := strconv.FormatInt(bucketIOID.Add(1), 10)
	bucketIOs.Store(id, fileIO{bucket: b, base: base})
	return id
}

func unbindBucket(id string) { bucketIOs.Delete(id) }

func init() {
	// The local schemes are iceberg-go's LocalFS unless a catalog of ours
	// names a bucket; the others have no IO in iceberg-go without
	// gocloud, which strata does not use.
	registered := icebergio.GetRegisteredSchemes()
	for _, scheme := range []string{"", "file", "s3", "s3a", "hdfs"} {
		if slices.Contains(registered, scheme) {
			icebergio.Unregister(scheme)
		}
		icebergio.Register(scheme, openBucketIO)
	}
}

func openBucketIO(ctx context.Context, u *url.URL, props map[string]string) (icebergio.IO, error) {
	if id := props[bucketIOKey]; id != "" {
		v, ok := bucketIOs.Load(id)
		if !ok {
			return nil, fmt.Errorf("%s: the catalog's bucket was closed", u.Redacted())
		}
		f := v.(fileIO)
		f.ctx = ctx
		return f, nil
	}
	if u.Scheme == "" || u.Scheme == "file" {
		return icebergio.LocalFS{}, nil
	}
	return nil, fmt.Errorf("%s: no file IO for scheme %q outside a strata catalog", u.Redacted(), u.Scheme)
}
