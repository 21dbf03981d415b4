package typed

import (
	"fmt"
	"math/big"
	"strings"
	"testing"
)

// Evolve widens a table's column as Iceberg's schema evolution allows,
// keeping every id it gave, and refuses what no reader could read.
func TestEvolve(t *testing.T) {
	p := func(k Kind) Type { return Type{Kind: k} }
	st := func(fields ...Field) Type { return Type{Kind: Struct, Fields: fields} }
	f := func(name string, t Type) Field { return Field{Name: name, Type: t} }
	opt := func(t Type) Type { t.Optional = true; return t }
	list := func(e Type) Type { return Type{Kind: List, Elem: &e} }
	mp := func(k, v Type) Type { return Type{Kind: Map, Key: &k, Elem: &v} }
	dec := func(p, s int) Type {
		t := Type{Kind: Decimal, Precision: p, Scale: s}
		if p > 18 {
			t.Size = decimalBytes(p)
		}
		return t
	}

	for _, tc := range []struct {
		name      string
		table, s  Type
		want, err string
	}{
		{"the same", st(f("a", p(String))), st(f("a", p(String))), "struct<a: string>", ""},
		{"a field added", st(f("a", p(String))), st(f("a", p(String)), f("b", p(Int64))), "struct<a: string, b: optional long>", ""},
		{"a field dropped", st(f("a", p(String)), f("b", p(Int64))), st(f("b", p(Int64))), "struct<a: optional string, b: long>", ""},
		{"renamed: a new column", st(f("a", p(String))), st(f("c", p(String))), "struct<a: optional string, c: optional string>", ""},
		{"int to long", st(f("a", p(Int32))), st(f("a", p(Int64))), "struct<a: long>", ""},
		{"long read from int", st(f("a", p(Int64))), st(f("a", p(Int32))), "struct<a: long>", ""},
		{"float to double", st(f("a", p(Float32))), st(f("a", p(Float64))), "struct<a: double>", ""},
		{"required to optional", st(f("a", p(String))), st(f("a", opt(p(String)))), "struct<a: optional string>", ""},
		{"decimal widened", st(f("a", dec(9, 2))), st(f("a", dec(20, 2))), "struct<a: decimal(20, 2)>", ""},
		{"decimal narrower", st(f("a", dec(20, 2))), st(f("a", dec(9, 2))), "struct<a: decimal(20, 2)>", ""},
		{"decimal rescaled", st(f("a", dec(9, 2))), st(f("a", dec(9, 3))), "", "a is decimal(9, 3) in the schema and decimal(9, 2) in the table"},
		{"string to long", st(f("a", p(String))), st(f("a", p(Int64))), "", "a is long in the schema and string in the table"},
		{"long to int is no narrowing", st(f("a", p(Float64))), st(f("a", p(Int64))), "", "a is long in the schema and double in the table"},
		{"fixed resized", st(f("a", Type{Kind: Fixed, Size: 4})), st(f("a", Type{Kind: Fixed, Size: 8})), "", "a is fixed[8] in the schema"},
		{"nested", st(f("a", st(f("x", p(Int32))))), st(f("a", st(f("x", p(Int64)), f("y", p(Bool))))),
			"struct<a: struct<x: long, y: optional boolean>>", ""},
		{"list element", st(f("a", list(st(f("x", p(Int32)))))), st(f("a", list(st(f("y", p(String)))))),
			"struct<a: list<struct<x: optional int, y: optional string>>>", ""},
		{"map value", st(f("a", mp(p(String), p(Int32)))), st(f("a", mp(p(String), p(Int64)))), "struct<a: map<string, long>>", ""},
		{"map key", st(f("a", mp(p(String), p(Int32)))), st(f("a", mp(p(Int32), p(Int32)))), "", "a (key) is int in the schema and string in the table"},
		{"kind of the whole", p(String), st(f("a", p(String))), "", "the column is struct<a: string> in the schema and string in the table"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			table := tc.table
			next := Number(&table, 2)
			before := table.String()
			got, after, err := Evolve(table, tc.s, next)
			if tc.err != "" {
				if err == nil || !strings.Contains(err.Error(), tc.err) {
					t.Fatalf("Evolve: %v, want an error naming %q", err, tc.err)
				}
				if got.String() != before || after != next {
					t.Errorf("a failed evolution changed the column: %s (next %d)", got, after)
				}
				return
			}
			if err != nil {
				t.Fatal(err)
			}
			if got.String() != tc.want {
				t.Errorf("Evolve = %s, want %s", got, tc.want)
			}
			if table.String() != before {
				t.Errorf("the table's column changed under Evolve: %s", table)
			}
			// Every id the table gave is kept; new ones start at next and
			// none is given twice.
			old, ids := map[string]int{}, map[int]string{}
			walkIDs(table, "", func(at string, id int) { old[at] = id })
			walkIDs(got, "", func(at string, id int) {
				if prev, ok := ids[id]; ok {
					t.Errorf("id %d given to %s and %s", id, prev, at)
				}
				ids[id] = at
				if was, ok := old[at]; ok && was != id {
					t.Errorf("%s's id changed from %d to %d", at, was, id)
				} else if !ok && (id < next || id >= after) {
					t.Errorf("new %s's id %d is not in [%d, %d)", at, id, next, after)
				}
			})
			if Covers(got, tc.s) != true || Covers(table, tc.s) != (got.String() == before) {
				t.Errorf("Covers: of the evolved %v, of the table %v", Covers(got, tc.s), Covers(table, tc.s))
			}
		})
	}
}

func walkIDs(t Type, at string, visit func(at string, id int)) {
	visit(at, t.ID)
	for _, f := range t.Fields {
		walkIDs(f.Type, at+"."+f.Name, visit)
	}
	if t.Key != nil {
		walkIDs(*t.Key, at+".key", visit)
	}
	if t.Elem != nil {
		walkIDs(*t.Elem, at+".elem", visit)
	}
}

// A value an older version decoded is written in the evolved column's
// types: an int as a long, a decimal in the wider one's bytes.
func TestShredPromotes(t *testing.T) {
	col := Type{Kind: Struct, Fields: []Field{
		{Name: "n", Type: Type{Kind: Int64}},
		{Name: "x", Type: Type{Kind: Float64}},
		{Name: "d", Type: Type{Kind: Decimal, Precision: 20, Scale: 2, Size: decimalBytes(20)}},
		{Name: "e", Type: Type{Kind: Decimal, Precision: 18, Scale: 2}},
		{Name: "new", Type: Type{Kind: String, Optional: true}},
	}}
	var got []string
	err := Shred(col, map[string]any{"n": int32(7), "x": float32(1.5), "d": int32(-12345), "e": int32(99)}, func(v LeafValue) {
		got = append(got, fmt.Sprintf("%T %v", v.Value, v.Value))
	})
	if err != nil {
		t.Fatal(err)
	}
	// byName order: d, e, n, new, x.
	want := []string{
		fmt.Sprintf("[]uint8 %v", twosComplement(bigInt(-12345), decimalBytes(20))),
		"int64 99", "int64 7", "<nil> <nil>", "float64 1.5",
	}
	if fmt.Sprint(got) != fmt.Sprint(want) {
		t.Errorf("leaves %q, want %q", got, want)
	}
}

func bigInt(n int64) *big.Int { return big.NewInt(n) }
