package tiering

import (
	"bytes"
	"context"
	"os"
	"path/filepath"
	"testing"
	"time"

	"strata/catalog"
	"strata/catalog/pebblecat"
	"strata/engine/record"
	"strata/engine/store"
	"strata/engine/store/storetest"
	"strata/parquet"
)

// Objects tiered before value became the last column (Parquet format 1)
// stay readable by the cold reader: point reads from their pages and
// scans of whole row groups give what parquet-go's row reader gives.
func TestColdReaderReadsFormat1Objects(t *testing.T) {
	ctx := context.Background()
	data, err := os.ReadFile("../parquet/testdata/format1.parquet")
	if err != nil {
		t.Fatal(err)
	}
	f, err := parquet.Open(bytes.NewReader(data), int64(len(data)))
	if err != nil {
		t.Fatal(err)
	}
	if v, _ := f.Lookup(parquet.MetaVersion); v != "1" {
		t.Fatalf("the fixture is format %q", v)
	}
	var want []record.Record
	for gi := range f.Groups() {
		recs, err := f.ReadGroup(gi) // parquet-go's row reader, by column name
		if err != nil {
			t.Fatal(err)
		}
		want = append(want, recs...)
	}
	first, last := f.FirstOffset(), f.FirstOffset()+uint64(f.Rows())-1

	bucket := backends["local"](t)
	const key = "topic=old/partition=0/format1.parquet"
	if err := bucket.Upload(ctx, key, bytes.NewReader(data)); err != nil {
		t.Fatal(err)
	}
	cat, err := pebblecat.Open(filepath.Join(t.TempDir(), "catalog"))
	if err != nil {
		t.Fatal(err)
	}
	defer cat.Close()
	if err := cat.Restore(catalog.Shard{Name: "old-0"}, []catalog.Segment{{Shard: "old-0", State: catalog.Remote,
		StartOffset: first, EndOffset: last, Records: uint64(f.Rows()), ObjectKey: key, ObjectSize: int64(len(data)),
		TieredAt: time.Now()}}); err != nil {
		t.Fatal(err)
	}

	point := NewColdReader(cat, bucket, 1) // no row group fits: every read fetches its pages
	point.NoReadAhead = true
	for _, off := range []uint64{first, first + 1, first + 4, (first + last) / 2, last - 2, last} {
		got, err := point.Read(ctx, "old-0", off, store.Budget{MaxRecords: 3})
		if err != nil {
			t.Fatalf("point read at %d: %v", off, err)
		}
		storetest.Equal(t, got, want[off-first:min(off-first+3, uint64(len(want)))])
	}
	if point.Fetches.Load() == 0 {
		t.Fatal("the point reads fetched nothing")
	}
	scan := NewColdReader(cat, bucket, 1<<20)
	got, err := scan.Read(ctx, "old-0", first, store.Budget{MaxBytes: 1 << 30})
	if err != nil {
		t.Fatal(err)
	}
	storetest.Equal(t, got, want)
}
