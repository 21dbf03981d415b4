package typed

import (
	"fmt"
	"slices"
	"sort"
)

// LeafValue is one value of a leaf column of Node(t), with its Parquet
// repetition and definition levels: what a page writer takes. Value is
// the physical value (int32, int64, float32, float64, bool, string,
// []byte), nil for a null.
type LeafValue struct {
	Leaf     int // the column's index among Node(t)'s leaves, in their order
	Rep, Def int
	Value    any
}

// Shred turns v, a value of t as Decode shapes it, into its leaf columns'
// values (Dremel's striping). parquet-go's Schema.Deconstruct does this
// for Go types known at build time; a decoded value's types are known
// only from its schema, and Deconstruct does not walk a map[string]any's
// nested maps. Leaves are numbered in parquet-go's column order (a
// struct's fields by name, a map's key before its value), so they match
// Node(t)'s columns.
func Shred(t Type, v any, emit func(LeafValue)) error {
	s := shredder{emit: emit}
	_, err := s.walk(t, v, 0, 0, 0, 0, "value")
	return err
}

type shredder struct{ emit func(LeafValue) }

// walk emits v's values under t, first leaf index leaf, at repetition
// level rep for the first value, definition level def so far, in a
// repeated ancestry of depth. It returns the index after t's leaves.
func (s shredder) walk(t Type, v any, leaf, rep, def, depth int, at string) (int, error) {
	if v == nil {
		if !t.Optional {
			return 0, fmt.Errorf("%s: null in a required column", at)
		}
		return s.nulls(t, leaf, rep, def), nil
	}
	if t.Optional {
		def++
	}
	switch t.Kind {
	case Struct:
		m, ok := v.(map[string]any)
		if !ok {
			return 0, fmt.Errorf("%s: %T is not a struct", at, v)
		}
		for _, f := range byName(t.Fields) {
			var err error
			if leaf, err = s.walk(f.Type, m[f.Name], leaf, rep, def, depth, at+"."+f.Name); err != nil {
				return 0, err
			}
		}
		return leaf, nil
	case List:
		l, ok := v.([]any)
		if !ok {
			return 0, fmt.Errorf("%s: %T is not a list", at, v)
		}
		if len(l) == 0 {
			return s.nulls(*t.Elem, leaf, rep, def), nil
		}
		next := leaf
		for i, e := range l {
			r := rep
			if i > 0 {
				r = depth + 1
			}
			var err error
			if next, err = s.walk(*t.Elem, e, leaf, r, def+1, depth+1, fmt.Sprintf("%s[%d]", at, i)); err != nil {
				return 0, err
			}
		}
		return next, nil
	case Map:
		entries, ok := v.(Entries)
		if !ok {
			return 0, fmt.Errorf("%s: %T is not a map's entries", at, v)
		}
		if len(entries) == 0 {
			return s.nulls(t, leaf, rep, def), nil
		}
		next := leaf
		for i, e := range entries {
			r := rep
			if i > 0 {
				r = depth + 1
			}
			if e.Key == nil {
				return 0, fmt.Errorf("%s: a null map key", at)
			}
			s.emit(LeafValue{Leaf: leaf, Rep: r, Def: def + 1, Value: e.Key})
			var err error
			if next, err = s.walk(*t.Elem, e.Value, leaf+1, r, def+1, depth+1, fmt.Sprintf("%s{%v}", at, e.Key)); err != nil {
				return 0, err
			}
		}
		return next, nil
	}
	s.emit(LeafValue{Leaf: leaf, Rep: rep, Def: def, Value: promote(t, v)})
	return leaf + 1, nil
}

// nulls emits a null (or an empty list's or map's absence of values) for
// every leaf under t, at definition level def, and returns the index
// after them.
func (s shredder) nulls(t Type, leaf, rep, def int) int {
	n := Leaves(t)
	for i := range n {
		s.emit(LeafValue{Leaf: leaf + i, Rep: rep, Def: def})
	}
	return leaf + n
}

// Leaves is how many leaf columns Node(t) has.
func Leaves(t Type) int {
	switch t.Kind {
	case Struct:
		n := 0
		for _, f := range t.Fields {
			n += Leaves(f.Type)
		}
		return n
	case List:
		return Leaves(*t.Elem)
	case Map:
		return 1 + Leaves(*t.Elem)
	}
	return 1
}

// byName is fields in parquet-go's order for a group's columns.
func byName(fields []Field) []Field {
	out := slices.Clone(fields)
	sort.SliceStable(out, func(i, j int) bool { return out[i].Name < out[j].Name })
	return out
}
