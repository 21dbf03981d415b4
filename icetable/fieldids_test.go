package icetable

import (
	"os"
	"path/filepath"
	"testing"

	pq "github.com/parquet-go/parquet-go"
)

// A new object's Parquet schema carries, for each column, the field id the
// topic's table gives it (parquet.Row's id tags against Schema): readers
// that match columns by id find every one, nested ones too. Without the
// tags the objects carried field id 0 everywhere.
func TestNewObjectsCarryTheTablesFieldIDs(t *testing.T) {
	bucket, dir := localBucket(t)
	r := newRig(t, bucket, dir)
	produce(t, r.engine, "orders-0", 12, 0)
	r.run(t, map[string]uint64{})
	objects, _ := filepath.Glob(filepath.Join(dir, "data", "topic=orders", "partition=0", "*.parquet"))
	if len(objects) == 0 {
		t.Fatal("nothing tiered")
	}
	f, err := os.Open(objects[0])
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	st, _ := f.Stat()
	pf, err := pq.OpenFile(f, st.Size())
	if err != nil {
		t.Fatal(err)
	}
	want := map[string]int{}
	for id, name := range indexNames(t) {
		want[name] = id
	}
	got := map[string]int{}
	var walk func(prefix string, fields []pq.Field)
	walk = func(prefix string, fields []pq.Field) {
		for _, fl := range fields {
			name := prefix + fl.Name()
			// Parquet's three-level list: the repeated "list" group has
			// no id in Iceberg's mapping; its "element" is the element.
			if fl.Name() == "list" {
				walk(prefix, fl.Fields())
				continue
			}
			got[name] = fl.ID()
			walk(name+".", fl.Fields())
		}
	}
	walk("", pf.Schema().Fields())
	for name, id := range want {
		if name == ColPartition {
			continue // not in the objects: the data file's partition value
		}
		if got[name] != id {
			t.Errorf("column %s: field id %d in the object, %d in the table's schema", name, got[name], id)
		}
	}
	if len(got) != len(want)-1 {
		t.Errorf("the object's columns %v; the table's %v", got, want)
	}
}

// indexNames is the table schema's full column names by field id, with
// Parquet's names for list elements ("headers.element.key").
func indexNames(t *testing.T) map[int]string {
	t.Helper()
	names := map[int]string{}
	s := Schema()
	for id := 1; id <= s.HighestFieldID(); id++ {
		if n, ok := s.FindColumnName(id); ok {
			names[id] = n
		}
	}
	if len(names) != 12 {
		t.Fatalf("the table's schema names %d fields: %v", len(names), names)
	}
	return names
}
