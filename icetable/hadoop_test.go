package icetable

import (
	"context"
	"path"
	"strings"
	"testing"

	"strata/engine/record"
	"strata/tiering/objstore"
)

// A Hadoop-style table's version-hint.text is a hint: whatever state a
// crash or a late writer left it in, the table read is the highest
// v{N}.metadata.json, and the next commit makes the one after it.
func TestAHadoopTableIsItsHighestVersionWhateverTheHint(t *testing.T) {
	for _, tc := range []struct {
		name string
		hint func(t *testing.T, b objstore.Bucket, dir string) // dir: the table's metadata folder
	}{
		{"current", func(*testing.T, objstore.Bucket, string) {}},
		{"missing (a crash before the first hint)", func(t *testing.T, b objstore.Bucket, dir string) {
			must(t, b.Delete(context.Background(), dir+hintName))
		}},
		{"behind (a commit died after its metadata file)", func(t *testing.T, b objstore.Bucket, dir string) {
			must(t, b.Upload(context.Background(), dir+hintName, strings.NewReader("1")))
		}},
		{"naming a file deleted since", func(t *testing.T, b objstore.Bucket, dir string) {
			must(t, b.Upload(context.Background(), dir+hintName, strings.NewReader("1")))
			must(t, b.Delete(context.Background(), dir+"v1.metadata.json"))
		}},
		{"naming a bucket pointer's file that is not there", func(t *testing.T, b objstore.Bucket, dir string) {
			must(t, b.Upload(context.Background(), dir+hintName, strings.NewReader("00099-0b0b8a4e-5f0e-4f4c-9d1b-3c7c5e1a2b3c")))
		}},
		{"not a version", func(t *testing.T, b objstore.Bucket, dir string) {
			must(t, b.Upload(context.Background(), dir+hintName, strings.NewReader("?")))
		}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			bucket, dir := localBucket(t)
			tables := &Tables{Bucket: bucket, Prefix: "data", Location: dir, Log: quiet, Hadoop: true}
			r := newRigOver(t, bucket, tables)
			produced := produce(t, r.engine, "orders-0", 12, 0)
			tiered := map[string]uint64{}
			r.run(t, tiered)
			tc.hint(t, bucket, tables.Dir("orders")+"/metadata/")
			_, loc, err := tables.Current(context.Background(), "orders")
			if err != nil || path.Base(loc) != "v2.metadata.json" {
				t.Fatalf("the table read: %s, %v; want v2 (made, then one commit)", loc, err)
			}
			produced = append(produced, produce(t, r.engine, "orders-0", 12, 100)...)
			r.run(t, tiered)
			rows, tbl := scan(t, tables, "orders", 0)
			sameRecords(t, "orders-0", rows[0], produced[:tiered["orders-0"]])
			if b := path.Base(tbl.MetadataLocation()); b != "v3.metadata.json" {
				t.Fatalf("the next commit made %s, want v3.metadata.json", b)
			}
		})
	}
}

// iceberg.catalog may change between bucket and hadoop on a table that
// exists: each carries on from the other's version, and no record is lost
// or added twice.
func TestATableChangesBetweenBucketAndHadoopNames(t *testing.T) {
	bucket, dir := localBucket(t)
	named := func(hadoop bool) *Tables {
		return &Tables{Bucket: bucket, Prefix: "data", Location: dir, Log: quiet, Hadoop: hadoop}
	}
	r := newRigOver(t, bucket, named(false))
	var produced []record.Record
	tiered := map[string]uint64{}
	for i, hadoop := range []bool{false, true, false, true} {
		r.tables, r.job.Tables = named(hadoop), named(hadoop)
		produced = append(produced, produce(t, r.engine, "orders-0", 12, 100*i)...)
		r.run(t, tiered)
		rows, tbl := scan(t, named(!hadoop), "orders", 0)
		sameRecords(t, "orders-0", rows[0], produced[:tiered["orders-0"]])
		if n := len(tbl.Metadata().Snapshots()); n != i+1 {
			t.Fatalf("after %d runs the table has %d snapshots", i+1, n)
		}
		version, err := metadataVersion(strings.TrimSuffix(path.Base(tbl.MetadataLocation()), ".metadata.json"))
		if err != nil || version != i+1 {
			t.Fatalf("run %d (hadoop names: %v) made %s: version %d, %v", i+1, hadoop, tbl.MetadataLocation(), version, err)
		}
	}
}

func must(t *testing.T, err error) {
	t.Helper()
	if err != nil {
		t.Fatal(err)
	}
}
