package icetable

import (
	"context"
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"slices"

	"github.com/apache/iceberg-go"
	"github.com/apache/iceberg-go/table"

	"strata/parquet"
	"strata/typed"
)

// TypedColumn is a typed column (docs/typed.md) as a topic's table holds
// it: the column of decoded values and its error column.
type TypedColumn struct {
	Name    string     // parquet.ValueTyped or parquet.KeyTyped
	Type    typed.Type // with its field ids
	ErrorID int        // the field id of Name+"_error"
}

// TypedSchema is a table's typed columns as its current schema has them,
// by name, and the first field id the table has not given.
type TypedSchema struct {
	Columns map[string]TypedColumn
	Next    int
}

// EvolveTyped has evolve make the topic's typed columns from the table's
// current ones (typed.NewColumn with typed.Start) and, when they are not
// the table's, commits a schema with them, under the table's lock, before
// returning them: an object is written only with field ids the table has
// given, so two writers never give one id to two columns, and every id an
// object carries stays the same column's (docs/typed.md, "Evolution").
// evolve may be called again, from the table as another writer left it.
// The table is made if there is none.
func (t *Tables) EvolveTyped(ctx context.Context, topic string, evolve func(TypedSchema) ([]TypedColumn, error)) ([]TypedColumn, error) {
	tbl, _, err := t.load(ctx, topic)
	if err != nil && !errors.Is(err, errNoTable) {
		return nil, err
	}
	if tbl != nil {
		cols, changed, err := evolveFrom(tbl, evolve)
		if err != nil || !changed {
			return cols, err
		}
	}
	if t.Lock != nil {
		release, err := t.Lock(ctx, topic)
		if err != nil {
			return nil, err
		}
		defer release()
	}
	for attempt := 1; ; attempt++ {
		tbl, err := t.loadOrCreate(ctx, topic)
		if err != nil {
			return nil, err
		}
		t.changedOutside(topic, tbl)
		cols, changed, err := evolveFrom(tbl, evolve)
		if err != nil || !changed {
			return cols, err
		}
		schema := withTyped(tbl.Schema(), cols)
		meta := tbl.Metadata()
		_, _, err = t.catalog(topic).CommitTable(ctx, t.ident(topic),
			[]table.Requirement{table.AssertTableUUID(meta.TableUUID()), table.AssertCurrentSchemaID(meta.CurrentSchema().ID),
				table.AssertLastAssignedFieldID(meta.LastColumnID())},
			[]table.Update{table.NewAddSchemaUpdate(schema), table.NewSetCurrentSchemaUpdate(-1),
				table.NewSetPropertiesUpdate(iceberg.Properties{propSchema: fingerprint(schema)})})
		if err == nil {
			t.log().Info("the topic's table's typed columns evolved", "topic", topic, "schema", schema.String())
			return cols, nil
		}
		if !errors.Is(err, table.ErrCommitFailed) || attempt == commitAttempts {
			return nil, fmt.Errorf("committing the typed columns to the table's schema: %w", err)
		}
		t.Metrics.conflict()
	}
}

// propSchema is the table property that names, by its fingerprint, the
// schema strata last made the table's current one. A current schema of
// another fingerprint is another writer's (an engine's ALTER TABLE through
// a SQL catalog, or a commit straight to the bucket: strata's own REST
// catalog refuses every write).
const propSchema = "strata.schema"

// fingerprint is a schema's fields (names, ids, types) hashed.
func fingerprint(s *iceberg.Schema) string {
	b, err := json.Marshal(s.Fields())
	if err != nil { // nested past what encoding/json writes: typed.Check refuses those
		b = []byte(s.String())
	}
	sum := sha256.Sum256(b)
	return hex.EncodeToString(sum[:8])
}

// changedOutside reports, once per topic and schema, that tbl's current
// schema is not the one strata last committed. strata undoes
// nothing: its typed columns evolve from that schema, adding what they
// lack with ids past its last, and its next commit takes the schema as
// known, so no change is fought over or reported twice. A table without
// the property (made before strata kept it) is taken as strata's.
func (t *Tables) changedOutside(topic string, tbl *table.Table) {
	want, ok := tbl.Properties()[propSchema]
	got := fingerprint(tbl.Schema())
	if !ok || want == got {
		return
	}
	if _, seen := t.reported.LoadOrStore(topic+"/"+got, true); !seen {
		t.log().Warn("the topic's table's schema was changed by another writer than strata: strata undoes nothing, and evolves its typed columns from it",
			"topic", topic, "schema_id", tbl.Schema().ID, "schema", tbl.Schema().String())
		t.Metrics.changedOutside(topic)
	}
}

// catalog commits the topic's table: the bucket's pointer, or the
// external catalog's row.
func (t *Tables) catalog(topic string) interface {
	CommitTable(context.Context, table.Identifier, []table.Requirement, []table.Update) (table.Metadata, string, error)
} {
	if t.external != nil {
		return t.external.cat
	}
	return &bucketCatalog{t, topic}
}

// evolveFrom runs evolve on tbl's typed columns; changed says the
// columns it made are not all the table's.
func evolveFrom(tbl *table.Table, evolve func(TypedSchema) ([]TypedColumn, error)) ([]TypedColumn, bool, error) {
	cur, err := typedSchema(tbl.Schema(), tbl.Metadata().LastColumnID())
	if err != nil {
		return nil, false, err
	}
	cols, err := evolve(cur)
	if err != nil {
		return nil, false, err
	}
	for _, c := range cols {
		was, ok := cur.Columns[c.Name]
		e, has := tbl.Schema().FindFieldByID(c.ErrorID)
		if !ok || was.ErrorID != c.ErrorID || !has || e.Name != c.Name+parquet.ErrorSuffix || !typed.Same(was.Type, c.Type) {
			return cols, true, nil
		}
	}
	return cols, false, nil
}

// typedSchema is the typed columns of schema s.
func typedSchema(s *iceberg.Schema, lastID int) (TypedSchema, error) {
	out := TypedSchema{Columns: map[string]TypedColumn{}, Next: lastID + 1}
	for _, f := range s.Fields() {
		if !slices.Contains([]string{parquet.ValueTyped, parquet.KeyTyped}, f.Name) {
			continue
		}
		t, err := fromIceberg(f.Type, f.ID, !f.Required)
		if err != nil {
			return TypedSchema{}, fmt.Errorf("the table's column %s: %w", f.Name, err)
		}
		c := TypedColumn{Name: f.Name, Type: t}
		if e, ok := s.FindFieldByName(f.Name + parquet.ErrorSuffix); ok {
			c.ErrorID = e.ID
		} else {
			// Dropped by another writer: the column keeps its ids, and
			// its error column comes back under a new one.
			c.ErrorID = out.Next
			out.Next++
		}
		out.Columns[f.Name] = c
	}
	return out, nil
}

// withTyped is schema s with cols in place of its typed columns, a new
// column and its error column after the others.
func withTyped(s *iceberg.Schema, cols []TypedColumn) *iceberg.Schema {
	fields := slices.Clone(s.Fields())
	set := func(f iceberg.NestedField) {
		if i := slices.IndexFunc(fields, func(g iceberg.NestedField) bool { return g.Name == f.Name }); i >= 0 {
			fields[i] = f
		} else {
			fields = append(fields, f)
		}
	}
	for _, c := range cols {
		set(iceberg.NestedField{ID: c.Type.ID, Name: c.Name, Type: toIceberg(c.Type)})
		set(iceberg.NestedField{ID: c.ErrorID, Name: c.Name + parquet.ErrorSuffix, Type: iceberg.PrimitiveTypes.String})
	}
	return iceberg.NewSchema(s.ID+1, fields...)
}

// toIceberg is t as an Iceberg type (docs/typed.md's mapping table).
func toIceberg(t typed.Type) iceberg.Type {
	switch t.Kind {
	case typed.Bool:
		return iceberg.PrimitiveTypes.Bool
	case typed.Int32:
		return iceberg.PrimitiveTypes.Int32
	case typed.Int64:
		return iceberg.PrimitiveTypes.Int64
	case typed.Float32:
		return iceberg.PrimitiveTypes.Float32
	case typed.Float64:
		return iceberg.PrimitiveTypes.Float64
	case typed.String:
		return iceberg.PrimitiveTypes.String
	case typed.Binary:
		return iceberg.PrimitiveTypes.Binary
	case typed.Fixed:
		return iceberg.FixedTypeOf(t.Size)
	case typed.Decimal:
		return iceberg.DecimalTypeOf(t.Precision, t.Scale)
	case typed.Date:
		return iceberg.PrimitiveTypes.Date
	case typed.Time:
		return iceberg.PrimitiveTypes.Time
	case typed.Timestamp:
		return iceberg.PrimitiveTypes.TimestampTz
	case typed.LocalTimestamp:
		return iceberg.PrimitiveTypes.Timestamp
	case typed.UUID:
		return iceberg.PrimitiveTypes.UUID
	case typed.Struct:
		fields := make([]iceberg.NestedField, len(t.Fields))
		for i, f := range t.Fields {
			fields[i] = iceberg.NestedField{ID: f.Type.ID, Name: f.Name, Type: toIceberg(f.Type), Required: !f.Type.Optional}
		}
		return &iceberg.StructType{FieldList: fields}
	case typed.List:
		return &iceberg.ListType{ElementID: t.Elem.ID, Element: toIceberg(*t.Elem), ElementRequired: !t.Elem.Optional}
	case typed.Map:
		return &iceberg.MapType{KeyID: t.Key.ID, KeyType: toIceberg(*t.Key), ValueID: t.Elem.ID,
			ValueType: toIceberg(*t.Elem), ValueRequired: !t.Elem.Optional}
	}
	panic(fmt.Sprintf("icetable: no Iceberg type for typed kind %d", t.Kind))
}

// fromIceberg is the typed column type of an Iceberg type the table's
// schema has, with its ids.
func fromIceberg(it iceberg.Type, id int, optional bool) (typed.Type, error) {
	t := typed.Type{ID: id, Optional: optional}
	switch x := it.(type) {
	case iceberg.BooleanType:
		t.Kind = typed.Bool
	case iceberg.Int32Type:
		t.Kind = typed.Int32
	case iceberg.Int64Type:
		t.Kind = typed.Int64
	case iceberg.Float32Type:
		t.Kind = typed.Float32
	case iceberg.Float64Type:
		t.Kind = typed.Float64
	case iceberg.StringType:
		t.Kind = typed.String
	case iceberg.BinaryType:
		t.Kind = typed.Binary
	case iceberg.FixedType:
		t.Kind, t.Size = typed.Fixed, x.Len()
	case iceberg.DecimalType:
		t.Kind, t.Precision, t.Scale = typed.Decimal, x.Precision(), x.Scale()
		if t.Precision > 18 {
			t.Size = typed.DecimalSize(t.Precision)
		}
	case iceberg.DateType:
		t.Kind = typed.Date
	case iceberg.TimeType:
		t.Kind = typed.Time
	case iceberg.TimestampTzType:
		t.Kind = typed.Timestamp
	case iceberg.TimestampType:
		t.Kind = typed.LocalTimestamp
	case iceberg.UUIDType:
		t.Kind = typed.UUID
	case *iceberg.StructType:
		t.Kind = typed.Struct
		for _, f := range x.FieldList {
			ft, err := fromIceberg(f.Type, f.ID, !f.Required)
			if err != nil {
				return typed.Type{}, fmt.Errorf("%s: %w", f.Name, err)
			}
			t.Fields = append(t.Fields, typed.Field{Name: f.Name, Type: ft})
		}
	case *iceberg.ListType:
		e, err := fromIceberg(x.Element, x.ElementID, !x.ElementRequired)
		if err != nil {
			return typed.Type{}, err
		}
		t.Kind, t.Elem = typed.List, &e
	case *iceberg.MapType:
		k, err := fromIceberg(x.KeyType, x.KeyID, false)
		if err != nil {
			return typed.Type{}, err
		}
		v, err := fromIceberg(x.ValueType, x.ValueID, !x.ValueRequired)
		if err != nil {
			return typed.Type{}, err
		}
		t.Kind, t.Key, t.Elem = typed.Map, &k, &v
	default:
		return typed.Type{}, fmt.Errorf("%s is no type a typed column has", it)
	}
	return t, nil
}
