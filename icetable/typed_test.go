package icetable

import (
	"context"
	"path/filepath"
	"testing"

	"github.com/apache/iceberg-go"
	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/testutil"

	"strata/parquet"
	"strata/typed"
)

// evolving is a build for EvolveTyped: the value column evolved over
// versions from the table's, as typed.NewColumn evolves it, counting its
// calls; during its first call it runs during, if set.
func evolving(calls *int, during func(), versions ...typed.Type) func(TypedSchema) ([]TypedColumn, error) {
	return func(cur TypedSchema) ([]TypedColumn, error) {
		*calls++
		if during != nil && *calls == 1 {
			during()
		}
		c, ok := cur.Columns[parquet.ValueTyped]
		next, vs := cur.Next, versions
		if !ok {
			c = TypedColumn{Name: parquet.ValueTyped, Type: vs[0]}
			c.Type.ID = max(1000, next)
			c.ErrorID = typed.Number(&c.Type, c.Type.ID+1)
			next, vs = c.ErrorID+1, vs[1:]
		}
		for _, v := range vs {
			var err error
			if c.Type, next, err = typed.Evolve(c.Type, v, next); err != nil {
				return nil, err
			}
		}
		c.Type.Optional = true
		return []TypedColumn{c}, nil
	}
}

// A topic's typed column becomes its table's, with the ids the objects
// carry, before any object is written with them: a later version adds its
// fields with the table's next ids and keeps the others', the schemas
// before stay in the metadata for the files written under them, and of two
// writers adding columns at once the one that commits second evolves
// again from the first one's schema, so no id names two columns.
func TestTypedColumnsEvolveTheTablesSchema(t *testing.T) {
	for _, pointer := range []string{"bucket", "hadoop", "sqlite"} {
		t.Run(pointer, func(t *testing.T) {
			bucket, dir := localBucket(t)
			catalog := filepath.Join(t.TempDir(), "catalog.db")
			open := func() *Tables {
				tables := &Tables{Bucket: bucket, Prefix: "data", Location: dir, Log: quiet, Hadoop: pointer == "hadoop"}
				if pointer == "sqlite" {
					if err := tables.OpenCatalog(context.Background(), "sqlite:"+catalog, "strata", "strata"); err != nil {
						t.Fatal(err)
					}
					t.Cleanup(func() { tables.Close() })
				}
				return tables
			}
			typedColumnsEvolve(t, open)
		})
	}
}

func typedColumnsEvolve(t *testing.T, open func() *Tables) {
	ctx := context.Background()
	tables := open()
	field := func(name string, k typed.Kind) typed.Field { return typed.Field{Name: name, Type: typed.Type{Kind: k}} }
	v1 := typed.Type{Kind: typed.Struct, Fields: []typed.Field{field("id", typed.Int64), field("item", typed.String)}}
	v2 := typed.Type{Kind: typed.Struct, Fields: []typed.Field{field("id", typed.Int64), field("item", typed.String), field("discount", typed.Float64)}}
	schema := func() *iceberg.Schema {
		tbl, _, err := tables.load(ctx, "orders")
		if err != nil {
			t.Fatal(err)
		}
		return tbl.Schema()
	}
	id := func(s *iceberg.Schema, name string) int {
		f, ok := s.FindFieldByName(name)
		if !ok {
			t.Fatalf("the table's schema has no %s: %s", name, s)
		}
		return f.ID
	}

	calls := 0
	cols, err := tables.EvolveTyped(ctx, "orders", evolving(&calls, nil, v1))
	if err != nil {
		t.Fatal(err)
	}
	s := schema()
	for name, want := range map[string]int{"offset": 1, "value": 11, "value_typed": 1000, "value_typed.id": 1001, "value_typed.item": 1002, "value_typed_error": 1003} {
		if got := id(s, name); got != want {
			t.Errorf("%s has field id %d, want %d", name, got, want)
		}
	}
	if cols[0].Type.ID != 1000 || cols[0].ErrorID != 1003 {
		t.Errorf("the column written has ids %d and %d, not the table's", cols[0].Type.ID, cols[0].ErrorID)
	}
	// The types round-trip through the table's schema.
	got, err := typedSchema(s, 1003)
	if err != nil || !typed.Same(got.Columns[parquet.ValueTyped].Type, cols[0].Type) || got.Next != 1004 {
		t.Fatalf("the table holds %+v (%v), want %s", got, err, cols[0].Type)
	}

	current := func() string {
		tbl, _, err := tables.load(ctx, "orders")
		if err != nil {
			t.Fatal(err)
		}
		return tbl.MetadataLocation()
	}
	before := current()
	if _, err := tables.EvolveTyped(ctx, "orders", evolving(&calls, nil, v1)); err != nil {
		t.Fatal(err)
	}
	if current() != before {
		t.Error("a column the table already holds committed a schema")
	}

	if _, err := tables.EvolveTyped(ctx, "orders", evolving(&calls, nil, v1, v2)); err != nil {
		t.Fatal(err)
	}
	s = schema()
	if id(s, "value_typed.id") != 1001 || id(s, "value_typed.item") != 1002 || id(s, "value_typed.discount") != 1004 {
		t.Errorf("evolved to %s: want id and item's ids kept, discount's 1004", s)
	}
	if f, _ := s.FindFieldByName("value_typed.discount"); f.Required {
		t.Error("the added field is required; older files have none")
	}
	tbl, _, _ := tables.load(ctx, "orders")
	if n := len(tbl.Metadata().Schemas()); n != 3 {
		t.Errorf("the metadata keeps %d schemas, want the first, v1's and v2's", n)
	}

	// Another writer adds a field while this one is about to.
	other := open()
	withX := typed.Type{Kind: typed.Struct, Fields: append(v2.Fields[:3:3], field("x", typed.Bool))}
	withY := typed.Type{Kind: typed.Struct, Fields: append(v2.Fields[:3:3], field("y", typed.Bool))}
	calls = 0
	otherCalls := 0
	cols, err = tables.EvolveTyped(ctx, "orders", evolving(&calls, func() {
		if _, err := other.EvolveTyped(ctx, "orders", evolving(&otherCalls, nil, v1, v2, withX)); err != nil {
			t.Error(err)
		}
	}, v1, v2, withY))
	if err != nil {
		t.Fatal(err)
	}
	s = schema()
	x, y := id(s, "value_typed.x"), id(s, "value_typed.y")
	if x == y || x != 1005 || y != 1006 || calls < 2 {
		t.Errorf("x has id %d, y %d (after %d builds); want 1005 and 1006, y's evolved again from x's schema", x, y, calls)
	}
	if cols[0].Type.Fields[4].Name != "y" || cols[0].Type.Fields[4].Type.ID != y {
		t.Errorf("the column written is %s; want the table's y", cols[0].Type)
	}
}

// Every typed column type is an Iceberg type and back, ids and all.
func TestTypedTypesAreIcebergTypes(t *testing.T) {
	elem := typed.Type{Kind: typed.Struct, Optional: true, Fields: []typed.Field{
		{Name: "at", Type: typed.Type{Kind: typed.Timestamp}}, {Name: "local", Type: typed.Type{Kind: typed.LocalTimestamp, Optional: true}},
	}}
	key, val := typed.Type{Kind: typed.String}, typed.Type{Kind: typed.Decimal, Precision: 30, Scale: 4, Size: typed.DecimalSize(30), Optional: true}
	col := typed.Type{Kind: typed.Struct, Optional: true, Fields: []typed.Field{
		{Name: "b", Type: typed.Type{Kind: typed.Bool}}, {Name: "i", Type: typed.Type{Kind: typed.Int32}},
		{Name: "l", Type: typed.Type{Kind: typed.Int64}}, {Name: "f", Type: typed.Type{Kind: typed.Float32}},
		{Name: "d", Type: typed.Type{Kind: typed.Float64}}, {Name: "s", Type: typed.Type{Kind: typed.String}},
		{Name: "bin", Type: typed.Type{Kind: typed.Binary}}, {Name: "fx", Type: typed.Type{Kind: typed.Fixed, Size: 3}},
		{Name: "dec", Type: typed.Type{Kind: typed.Decimal, Precision: 9, Scale: 2}}, {Name: "day", Type: typed.Type{Kind: typed.Date}},
		{Name: "tm", Type: typed.Type{Kind: typed.Time}}, {Name: "u", Type: typed.Type{Kind: typed.UUID}},
		{Name: "list", Type: typed.Type{Kind: typed.List, Elem: &elem}},
		{Name: "map", Type: typed.Type{Kind: typed.Map, Key: &key, Elem: &val, Optional: true}},
	}}
	col.ID = 1000
	typed.Number(&col, 1001)
	back, err := fromIceberg(toIceberg(col), col.ID, true)
	if err != nil {
		t.Fatal(err)
	}
	if !typed.Same(back, col) {
		t.Errorf("%s came back as %s", col, back)
	}
}

// A schema another writer committed (an engine's ALTER TABLE straight to
// the table) is reported once and built on, not undone: strata's next
// evolution keeps the writer's column and gives its own new field an id
// past it, and nothing more is reported after that.
func TestASchemaChangedOutsideIsReportedOnce(t *testing.T) {
	ctx := context.Background()
	bucket, dir := localBucket(t)
	tables := &Tables{Bucket: bucket, Prefix: "data", Location: dir, Log: quiet, Metrics: NewMetrics(prometheus.NewRegistry())}
	reported := func() float64 { return testutil.ToFloat64(tables.Metrics.outside.WithLabelValues("orders")) }
	field := func(name string, k typed.Kind) typed.Field { return typed.Field{Name: name, Type: typed.Type{Kind: k}} }
	v1 := typed.Type{Kind: typed.Struct, Fields: []typed.Field{field("id", typed.Int64)}}
	v2 := typed.Type{Kind: typed.Struct, Fields: []typed.Field{field("id", typed.Int64), field("qty", typed.Int32)}}
	calls := 0
	if _, err := tables.EvolveTyped(ctx, "orders", evolving(&calls, nil, v1)); err != nil {
		t.Fatal(err)
	}
	if reported() != 0 {
		t.Fatal("strata's own schema was reported as changed outside")
	}

	tbl, _, err := tables.load(ctx, "orders")
	if err != nil {
		t.Fatal(err)
	}
	txn := tbl.NewTransaction()
	if err := txn.UpdateSchema(true, false).AddColumn([]string{"analyst_note"}, iceberg.PrimitiveTypes.String, "", false, nil).Commit(); err != nil {
		t.Fatal(err)
	}
	if _, err := txn.Commit(ctx); err != nil {
		t.Fatal(err)
	}

	for range 2 {
		if _, err := tables.EvolveTyped(ctx, "orders", evolving(&calls, nil, v1, v2)); err != nil {
			t.Fatal(err)
		}
	}
	if reported() != 1 {
		t.Errorf("the outside change was reported %v times, want once", reported())
	}
	tbl, _, _ = tables.load(ctx, "orders")
	note, ok := tbl.Schema().FindFieldByName("analyst_note")
	qty, ok2 := tbl.Schema().FindFieldByName("value_typed.qty")
	if !ok || !ok2 || qty.ID <= note.ID {
		t.Fatalf("after the outside change the schema is %s: want analyst_note kept and qty's id past it", tbl.Schema())
	}
}

// Another writer dropping the error column leaves the typed column as it
// is: strata keeps its ids (the rows tiered before still read) and gives
// the error column back under a new id.
func TestADroppedErrorColumnKeepsTheTypedColumn(t *testing.T) {
	ctx := context.Background()
	bucket, dir := localBucket(t)
	tables := &Tables{Bucket: bucket, Prefix: "data", Location: dir, Log: quiet}
	v1 := typed.Type{Kind: typed.Struct, Fields: []typed.Field{{Name: "id", Type: typed.Type{Kind: typed.Int64}}}}
	calls := 0
	if _, err := tables.EvolveTyped(ctx, "orders", evolving(&calls, nil, v1)); err != nil {
		t.Fatal(err)
	}
	tbl, _, err := tables.load(ctx, "orders")
	if err != nil {
		t.Fatal(err)
	}
	txn := tbl.NewTransaction()
	if err := txn.UpdateSchema(true, false).DeleteColumn([]string{"value_typed_error"}).Commit(); err != nil {
		t.Fatal(err)
	}
	if _, err := txn.Commit(ctx); err != nil {
		t.Fatal(err)
	}
	cols, err := tables.EvolveTyped(ctx, "orders", evolving(&calls, nil, v1))
	if err != nil {
		t.Fatal(err)
	}
	tbl, _, _ = tables.load(ctx, "orders")
	f, ok := tbl.Schema().FindFieldByName("value_typed")
	e, ok2 := tbl.Schema().FindFieldByName("value_typed_error")
	if !ok || f.ID != 1000 || cols[0].Type.ID != 1000 || !ok2 || e.ID == 1002 || e.ID != cols[0].ErrorID {
		t.Fatalf("after the error column was dropped: %s; the column written has ids %d and %d", tbl.Schema(), cols[0].Type.ID, cols[0].ErrorID)
	}
}
