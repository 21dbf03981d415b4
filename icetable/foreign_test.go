package icetable

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"io/fs"
	"path"
	"strings"
	"testing"

	sqlcat "github.com/apache/iceberg-go/catalog/sql"

	"strata/tiering"
	"strata/tiering/objstore"
)

// Another topic's table put in a topic's place (a metadata file copied or
// restored into its folder, a catalog row registered over it) is refused,
// naming it, rather than read as the topic's table; and the topic's
// deletion then deletes nothing it names: those files hold the other
// topic's records, which stay whole. So does a deletion over metadata
// that is no table at all (a torn file), which no retry could read.
func TestAnotherTopicsTableIsNeverTaken(t *testing.T) {
	for _, p := range pointers(t) {
		t.Run(p.name, func(t *testing.T) {
			ctx := context.Background()
			bucket, dir := localBucket(t)
			tables := p.open(t, bucket, dir)
			r := newRigOver(t, bucket, tables)
			produce(t, r.engine, "orders-0", 12, 0)
			clicks := produce(t, r.engine, "clicks-0", 12, 100)
			tiered := map[string]uint64{}
			r.run(t, tiered)
			_, loc, err := tables.Current(ctx, "clicks")
			if err != nil {
				t.Fatal(err)
			}
			taken := putInPlace(t, p.name, tables, bucket, dir, "orders", loc)

			_, _, err = tables.Current(ctx, "orders")
			if !errors.Is(err, errBadMetadata) || !strings.Contains(err.Error(), taken) || !strings.Contains(err.Error(), `topic "clicks", not "orders"`) {
				t.Fatalf("loading orders with clicks' table in its place: %v; want a refusal naming %s and both topics", err, taken)
			}
			if err := tables.ForgetTopic(ctx, "orders", 1); err != nil {
				t.Fatalf("deleting orders: %v", err)
			}
			if ok, err := tables.Exists(ctx, "orders"); tables.external != nil && (ok || err != nil) {
				// Else a topic made again under the name finds the row.
				t.Fatalf("after the deletion the catalog still has orders' row (%v, %v)", ok, err)
			}
			rows, _ := scan(t, tables, "clicks", 0)
			sameRecords(t, "clicks-0", rows[0], clicks[:tiered["clicks-0"]])
			everyFileExists(t, bucket, tables, "clicks")
		})
	}
}

// putInPlace makes the table the metadata at loc names topic's, as the
// pointer p keeps tables, and returns the name the refusal should give.
func putInPlace(t *testing.T, p string, tables *Tables, bucket objstore.Bucket, dir, topic, loc string) string {
	t.Helper()
	ctx := context.Background()
	raw, err := objstore.ReadAll(ctx, bucket, strings.TrimPrefix(loc, dir+"/"))
	if err != nil {
		t.Fatal(err)
	}
	meta := tables.Dir(topic) + "/metadata/"
	switch p {
	case "bucket":
		stem := "00099-0b0b8a4e-5f0e-4f4c-9d1b-3c7c5e1a2b3c"
		must(t, bucket.Upload(ctx, meta+stem+".metadata.json", strings.NewReader(string(raw))))
		must(t, bucket.Upload(ctx, meta+hintName, strings.NewReader(stem)))
		return meta + stem + ".metadata.json"
	case "hadoop":
		_, cur, err := tables.Current(ctx, topic)
		if err != nil {
			t.Fatal(err)
		}
		v, err := metadataVersion(strings.TrimSuffix(path.Base(cur), ".metadata.json"))
		if err != nil {
			t.Fatal(err)
		}
		name := meta + hadoopStem(v+1) + ".metadata.json"
		must(t, bucket.Upload(ctx, name, strings.NewReader(string(raw))))
		return name
	default: // a SQL catalog: the row made to name the other table
		q := "UPDATE iceberg_tables SET metadata_location = ? WHERE table_name = ?"
		if tables.external.dialect == sqlcat.Postgres {
			q = "UPDATE iceberg_tables SET metadata_location = $1 WHERE table_name = $2"
		}
		if _, err := tables.external.db.ExecContext(ctx, q, loc, topic); err != nil {
			t.Fatal(err)
		}
		return loc
	}
}

// A deleted topic whose table cannot be read (its current metadata or
// manifest list torn or gone: strata never leaves one so, but a copy or a
// disk can) is deleted all the same: the name is not taken for good by a
// table no retry could read.
func TestAnUnreadableTableDoesNotBlockItsTopicsDeletion(t *testing.T) {
	for _, tc := range []struct {
		name   string
		damage func(t *testing.T, b objstore.Bucket, tables *Tables, dir string)
	}{
		{"torn metadata", func(t *testing.T, b objstore.Bucket, tables *Tables, dir string) {
			must(t, b.Upload(context.Background(), tables.Dir("orders")+"/metadata/v3.metadata.json", strings.NewReader(`{"format-version": 2, "table-uu`)))
		}},
		{"torn manifest list", func(t *testing.T, b objstore.Bucket, tables *Tables, dir string) {
			name := manifestList(t, tables, dir)
			raw, err := objstore.ReadAll(context.Background(), b, name)
			if err != nil {
				t.Fatal(err)
			}
			must(t, b.Upload(context.Background(), name, bytes.NewReader(raw[:len(raw)/2])))
		}},
		{"missing manifest list", func(t *testing.T, b objstore.Bucket, tables *Tables, dir string) {
			must(t, b.Delete(context.Background(), manifestList(t, tables, dir)))
		}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			ctx := context.Background()
			bucket, dir := localBucket(t)
			tables := &Tables{Bucket: bucket, Prefix: "data", Location: dir, Log: quiet, Hadoop: true}
			r := newRigOver(t, bucket, tables)
			produce(t, r.engine, "orders-0", 12, 0)
			r.run(t, map[string]uint64{})
			tc.damage(t, bucket, tables, dir)
			if err := tables.ForgetTopic(ctx, "orders", 1); err != nil {
				t.Fatalf("deleting the topic: %v", err)
			}
		})
	}
}

// manifestList is the object name of the topic orders' current manifest
// list.
func manifestList(t *testing.T, tables *Tables, dir string) string {
	t.Helper()
	return strings.TrimPrefix(tableOf(t, tables, "orders").CurrentSnapshot().ManifestList, dir+"/")
}

// A table's file system reaches only its topic's folder: whatever its
// metadata names, nothing outside is read, written or deleted.
func TestATablesFilesStayInItsTopicsFolder(t *testing.T) {
	ctx := context.Background()
	bucket, dir := localBucket(t)
	tables := &Tables{Bucket: bucket, Prefix: "data", Location: dir, Log: quiet}
	must(t, bucket.Upload(ctx, "data/topic=clicks/partition=0/x.parquet", strings.NewReader("clicks' records")))
	fsys, err := tables.fsF("orders")(ctx)
	if err != nil {
		t.Fatal(err)
	}
	io := fsys.(fileIO)
	other := dir + "/data/topic=clicks/partition=0/x.parquet"
	if err := io.Remove(other); !errors.Is(err, fs.ErrPermission) {
		t.Fatalf("removing another topic's object: %v, want fs.ErrPermission", err)
	}
	if _, err := io.Open(other); !errors.Is(err, fs.ErrPermission) {
		t.Fatalf("opening another topic's object: %v, want fs.ErrPermission", err)
	}
	if err := io.WriteFile(dir+"/data/topic=ordersx/_iceberg/m.json", []byte("{}")); !errors.Is(err, fs.ErrPermission) {
		t.Fatalf("writing in a folder that only starts like the topic's: %v, want fs.ErrPermission", err)
	}
	if _, err := bucket.Stat(ctx, "data/topic=clicks/partition=0/x.parquet"); err != nil {
		t.Fatalf("the other topic's object: %v", err)
	}
	if err := io.WriteFile(dir+"/data/topic=orders/_iceberg/m.json", []byte("{}")); err != nil {
		t.Fatalf("writing in the topic's own folder: %v", err)
	}
}

// An object whose offsets overlap what the table holds (a manifest entry
// no sound run writes) is not added, and the commit says so: a tiering run
// reports its table stuck there rather than succeeding.
func TestAnOverlappingObjectIsReported(t *testing.T) {
	ctx := context.Background()
	bucket, dir := localBucket(t)
	r := newRig(t, bucket, dir)
	produce(t, r.engine, "orders-0", 12, 0)
	r.run(t, map[string]uint64{})
	key := "data/topic=orders/partition=0/_strata_manifest.json"
	m, err := tiering.ReadManifest(ctx, bucket, key)
	if err != nil || len(m.Objects) == 0 {
		t.Fatalf("manifest: %v, %d objects", err, len(m.Objects))
	}
	last := m.Objects[len(m.Objects)-1]
	bad := last
	bad.Key, bad.Segment, bad.StartOffset, bad.EndOffset = "data/topic=orders/partition=0/overlapping.parquet", last.Segment+1, last.EndOffset-3, last.EndOffset+10
	m.Objects = append(m.Objects, bad)
	raw, err := json.Marshal(m)
	if err != nil {
		t.Fatal(err)
	}
	must(t, bucket.Upload(ctx, key, bytes.NewReader(raw)))
	before := tableOf(t, r.tables, "orders").CurrentSnapshot().SnapshotID

	_, err = r.tables.Commit(ctx, "orders", map[int32]uint64{0: 0})
	if err == nil || !strings.Contains(err.Error(), bad.Key) || !strings.Contains(err.Error(), "overlap") {
		t.Fatalf("committing an overlapping object: %v; want an error naming it", err)
	}
	if now := tableOf(t, r.tables, "orders").CurrentSnapshot().SnapshotID; now != before {
		t.Fatalf("the table changed (%d to %d) with nothing to add", before, now)
	}
}
