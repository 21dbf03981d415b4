package typed

import (
	"fmt"
	"math/big"
	"slices"
)

// Evolve widens table, a column's type as its table holds it, to take
// the values of s, another schema's type, as Iceberg's schema evolution
// allows: a field s adds is appended, optional (older files lack it),
// numbered from next; a field s lacks becomes optional (s's values have
// none); an int widens to a long, a float to a double, a decimal to more
// digits of the same scale; a required part becomes optional. Fields are
// matched by name, so a renamed field is a new column and the old one
// keeps its values. Ids already given never change. It returns the
// widened type and the next free id, or an error naming the first part s
// cannot be read into (another kind, a narrower number): table is then
// unchanged.
func Evolve(table, s Type, next int) (Type, int, error) {
	out := clone(table)
	next, err := evolve(&out, s, next, "")
	if err != nil {
		return table, next, err
	}
	return out, next, nil
}

// Covers says whether every value of s is a value of table as it is:
// Evolve has nothing to add or widen.
func Covers(table, s Type) bool {
	out, _, err := Evolve(table, s, 1<<30)
	return err == nil && Same(out, table)
}

func evolve(t *Type, s Type, next int, at string) (int, error) {
	if s.Optional {
		t.Optional = true
	}
	if t.Kind != s.Kind {
		switch {
		case t.Kind == Int32 && s.Kind == Int64, t.Kind == Float32 && s.Kind == Float64:
			t.Kind = s.Kind
			return next, nil
		case t.Kind == Int64 && s.Kind == Int32, t.Kind == Float64 && s.Kind == Float32:
			return next, nil // promoted as it is written
		}
		return next, mismatch(at, *t, s)
	}
	switch t.Kind {
	case Fixed:
		if t.Size != s.Size {
			return next, mismatch(at, *t, s)
		}
	case Decimal:
		if t.Scale != s.Scale {
			return next, mismatch(at, *t, s)
		}
		if s.Precision > t.Precision {
			t.Precision = s.Precision
			t.Size = 0
			if t.Precision > 18 {
				t.Size = max(s.Size, decimalBytes(t.Precision))
			}
		}
	case Struct:
		seen := map[string]bool{}
		for _, f := range s.Fields {
			seen[f.Name] = true
			i := slices.IndexFunc(t.Fields, func(g Field) bool { return g.Name == f.Name })
			if i >= 0 {
				var err error
				if next, err = evolve(&t.Fields[i].Type, f.Type, next, at+"."+f.Name); err != nil {
					return next, err
				}
				continue
			}
			add := Field{Name: f.Name, Type: clone(f.Type)}
			add.Type.Optional = true
			add.Type.ID = next
			next = Number(&add.Type, next+1)
			t.Fields = append(t.Fields, add)
		}
		for i := range t.Fields {
			if !seen[t.Fields[i].Name] {
				t.Fields[i].Type.Optional = true
			}
		}
	case List:
		return evolve(t.Elem, *s.Elem, next, at+"[]")
	case Map:
		if t.Key.String() != s.Key.String() {
			return next, mismatch(at+" (key)", *t.Key, *s.Key)
		}
		return evolve(t.Elem, *s.Elem, next, at+"{}")
	}
	return next, nil
}

func mismatch(at string, table, s Type) error {
	if at == "" {
		at = "the column"
	} else {
		at = at[1:]
	}
	table.Optional, s.Optional = false, false
	return fmt.Errorf("%s is %s in the schema and %s in the table, which Iceberg cannot widen to it", at, s, table)
}

// clone is a deep copy of t, so that evolving it leaves t as it was.
func clone(t Type) Type {
	out := t
	if t.Fields != nil {
		out.Fields = make([]Field, len(t.Fields))
		for i, f := range t.Fields {
			out.Fields[i] = Field{Name: f.Name, Type: clone(f.Type)}
		}
	}
	if t.Elem != nil {
		e := clone(*t.Elem)
		out.Elem = &e
	}
	if t.Key != nil {
		k := clone(*t.Key)
		out.Key = &k
	}
	return out
}

// Same says a and b are one type with the same field ids.
func Same(a, b Type) bool { return a.String() == b.String() && sameIDs(a, b) }

func sameIDs(a, b Type) bool {
	if a.ID != b.ID || len(a.Fields) != len(b.Fields) {
		return false
	}
	for i := range a.Fields {
		if !sameIDs(a.Fields[i].Type, b.Fields[i].Type) {
			return false
		}
	}
	if a.Elem != nil && !sameIDs(*a.Elem, *b.Elem) || a.Key != nil && !sameIDs(*a.Key, *b.Key) {
		return false
	}
	return true
}

// promote is v, a leaf's value as a schema of type from decoded it, as
// a leaf of to stores it: a column Evolve widened takes an older
// schema's int as a long, its float as a double, its decimal in the
// wider one's physical type.
func promote(to *Type, v any) any {
	switch x := v.(type) {
	case int32:
		switch to.Kind {
		case Int64:
			return int64(x)
		case Decimal:
			return decimalPhysicalValue(to, big.NewInt(int64(x)))
		}
	case int64:
		if to.Kind == Decimal {
			return decimalPhysicalValue(to, big.NewInt(x))
		}
	case float32:
		if to.Kind == Float64 {
			return float64(x)
		}
	case []byte:
		if to.Kind == Decimal && (to.Precision <= 18 || len(x) != to.Size) {
			return decimalPhysicalValue(to, fromTwosComplement(x))
		}
	}
	return v
}

// decimalPhysicalValue is an unscaled n as a decimal of to's precision
// is stored.
func decimalPhysicalValue(to *Type, n *big.Int) any {
	switch {
	case to.Precision <= 9:
		return int32(n.Int64())
	case to.Precision <= 18:
		return n.Int64()
	}
	return twosComplement(n, to.Size)
}

func fromTwosComplement(b []byte) *big.Int {
	n := new(big.Int).SetBytes(b)
	if len(b) > 0 && b[0]&0x80 != 0 {
		n.Sub(n, new(big.Int).Lsh(big.NewInt(1), uint(8*len(b))))
	}
	return n
}
