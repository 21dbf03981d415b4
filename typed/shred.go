package typed

import (
	"fmt"
	"slices"
	"sort"
	"strings"
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
// Node(t)'s columns. A writer of many values of one type makes its
// Shredder once instead (NewShredder).
func Shred(t Type, v any, emit func(LeafValue)) error {
	return NewShredder(t).Shred(v, emit)
}

// A Shredder shreds values of one type: the type's fields put in column
// order once, not per value.
type Shredder struct{ root *shredNode }

type shredNode struct {
	t         *Type
	fields    []shredField // a struct's, in column order
	elem, key *shredNode
	leaves    int
}

type shredField struct {
	name string
	node *shredNode
}

// NewShredder is the shredder of values of t.
func NewShredder(t Type) *Shredder { return &Shredder{root: compile(&t)} }

func compile(t *Type) *shredNode {
	n := &shredNode{t: t, leaves: Leaves(*t)}
	for _, f := range byName(t.Fields) {
		i := slices.IndexFunc(t.Fields, func(g Field) bool { return g.Name == f.Name })
		n.fields = append(n.fields, shredField{f.Name, compile(&t.Fields[i].Type)})
	}
	if t.Elem != nil {
		n.elem = compile(t.Elem)
	}
	if t.Key != nil {
		n.key = compile(t.Key)
	}
	return n
}

// Shred emits v's leaf values.
func (s *Shredder) Shred(v any, emit func(LeafValue)) error {
	_, err := shredder{emit: emit}.walk(s.root, v, 0, 0, 0, 0)
	return rooted(err)
}

type shredder struct{ emit func(LeafValue) }

// pathError is an error of shredding or shaping a value, its path (the
// value's parts from the column's root) put together on the way out, so a
// value that shreds builds none.
type pathError struct {
	path []string // innermost first
	msg  string
}

func (e *pathError) Error() string {
	var b strings.Builder
	for i := len(e.path) - 1; i >= 0; i-- {
		b.WriteString(e.path[i])
	}
	return b.String() + ": " + e.msg
}

func failf(format string, args ...any) error { return &pathError{msg: fmt.Sprintf(format, args...)} }

// rooted is err with its path from the column's root, "value".
func rooted(err error) error {
	if e, ok := err.(*pathError); ok {
		e.path = append(e.path, "value")
	}
	return err
}

// within puts part in front of err's path.
func within(err error, part string) error {
	if e, ok := err.(*pathError); ok {
		e.path = append(e.path, part)
	}
	return err
}

// walk emits v's values under n, first leaf index leaf, at repetition
// level rep for the first value, definition level def so far, in a
// repeated ancestry of depth. It returns the index after n's leaves.
func (s shredder) walk(n *shredNode, v any, leaf, rep, def, depth int) (int, error) {
	t := n.t
	if v == nil {
		if !t.Optional {
			return 0, failf("null in a required column")
		}
		return s.nulls(n, leaf, rep, def), nil
	}
	if t.Optional {
		def++
	}
	switch t.Kind {
	case Struct:
		m, ok := v.(map[string]any)
		if !ok {
			return 0, failf("%T is not a struct", v)
		}
		for _, f := range n.fields {
			var err error
			if leaf, err = s.walk(f.node, m[f.name], leaf, rep, def, depth); err != nil {
				return 0, within(err, "."+f.name)
			}
		}
		return leaf, nil
	case List:
		l, ok := v.([]any)
		if !ok {
			return 0, failf("%T is not a list", v)
		}
		if len(l) == 0 {
			return s.nulls(n.elem, leaf, rep, def), nil
		}
		next := leaf
		for i, e := range l {
			r := rep
			if i > 0 {
				r = depth + 1
			}
			var err error
			if next, err = s.walk(n.elem, e, leaf, r, def+1, depth+1); err != nil {
				return 0, within(err, fmt.Sprintf("[%d]", i))
			}
		}
		return next, nil
	case Map:
		entries, ok := v.(Entries)
		if !ok {
			return 0, failf("%T is not a map's entries", v)
		}
		if len(entries) == 0 {
			return s.nulls(n, leaf, rep, def), nil
		}
		next := leaf
		for i, e := range entries {
			r := rep
			if i > 0 {
				r = depth + 1
			}
			if e.Key == nil {
				return 0, failf("a null map key")
			}
			s.emit(LeafValue{Leaf: leaf, Rep: r, Def: def + 1, Value: e.Key})
			var err error
			if next, err = s.walk(n.elem, e.Value, leaf+1, r, def+1, depth+1); err != nil {
				return 0, within(err, fmt.Sprintf("{%v}", e.Key))
			}
		}
		return next, nil
	}
	s.emit(LeafValue{Leaf: leaf, Rep: rep, Def: def, Value: promote(t, v)})
	return leaf + 1, nil
}

// nulls emits a null (or an empty list's or map's absence of values) for
// every leaf under n, at definition level def, and returns the index
// after them.
func (s shredder) nulls(n *shredNode, leaf, rep, def int) int {
	for i := range n.leaves {
		s.emit(LeafValue{Leaf: leaf + i, Rep: rep, Def: def})
	}
	return leaf + n.leaves
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
