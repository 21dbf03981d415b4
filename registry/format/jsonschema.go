package format

import (
	"fmt"
	"maps"
	"math/big"
	"net/url"
	"reflect"
	"slices"
	"strings"

	"github.com/santhosh-tekuri/jsonschema/v6"
)

// jsonBase is where the schema and its references live for the compiler:
// a reference named "other.json" is the $ref "other.json" resolves to.
const jsonBase = "mem://schema/"

// noLoader refuses every URL not added as a resource: a schema never
// makes the registry read a file or the network.
type noLoader struct{}

func (noLoader) Load(u string) (any, error) {
	return nil, fmt.Errorf("%s is neither the schema nor one of its references", u)
}

func parseJSON(text string, refs []Ref) (*jsonschema.Schema, error) {
	c := jsonschema.NewCompiler()
	c.UseLoader(noLoader{})
	// The compiled schema keeps its formats (date-time, uuid, ...) only
	// when they are asserted: typed columns map them (typed.FromJSONSchema).
	c.AssertFormat()
	add := func(name, text string) error {
		doc, err := jsonschema.UnmarshalJSON(strings.NewReader(text))
		if err != nil {
			return err
		}
		return c.AddResource(jsonURL(name), doc)
	}
	for _, r := range refs {
		if err := add(r.Name, r.Text); err != nil {
			return nil, fmt.Errorf("reference %q: %w", r.Name, err)
		}
	}
	if err := add("schema.json", text); err != nil {
		return nil, err
	}
	return c.Compile(jsonURL("schema.json"))
}

// jsonURL is a reference name as an absolute URL: relative ones under
// jsonBase.
func jsonURL(name string) string {
	if u, err := url.Parse(name); err == nil && u.IsAbs() {
		return name
	}
	return jsonBase + name
}

// checkJSON says what a value the writer accepts may fail in the reader:
// a type it no longer allows (integer to number widens), a property's
// schema so changed, a property required that was not, a closed content
// model (additionalProperties false) where it was open or a property a
// closed reader dropped, a property added to an open content model (old
// data may carry it with any value), enum values removed, array items so
// changed, bounds tightened (checkBounds). Other keywords (formats,
// combinators, conditionals, pattern properties, dependencies) are not
// compared yet (docs/registry.md).
func checkJSON(reader, writer *jsonschema.Schema) []string {
	c := jsonChecker{seen: map[[2]*jsonschema.Schema]bool{}}
	c.check("#", reader, writer)
	return c.out
}

type jsonChecker struct {
	seen map[[2]*jsonschema.Schema]bool
	out  []string
}

func (c *jsonChecker) add(at, format string, args ...any) {
	c.out = append(c.out, at+": "+fmt.Sprintf(format, args...))
}

// deref follows $ref to the schema it names; a recursive schema is
// compared once per pair.
func deref(s *jsonschema.Schema) *jsonschema.Schema {
	for i := 0; s != nil && s.Ref != nil && i < 32; i++ {
		s = s.Ref
	}
	return s
}

func (c *jsonChecker) check(at string, r, w *jsonschema.Schema) {
	r, w = deref(r), deref(w)
	if r == nil || w == nil || c.seen[[2]*jsonschema.Schema{r, w}] {
		return
	}
	c.seen[[2]*jsonschema.Schema{r, w}] = true
	if w.Bool != nil && !*w.Bool {
		return // the writer accepts nothing
	}
	if r.Bool != nil {
		if !*r.Bool {
			c.add(at, "the schema became false (accepts nothing)")
		}
		return
	}
	c.checkTypes(at, r, w)
	c.checkEnum(at, r, w)
	c.checkBounds(at, r, w)
	c.checkObject(at, r, w)
	if ri, ok := r.Items.(*jsonschema.Schema); ok {
		if wi, ok := w.Items.(*jsonschema.Schema); ok {
			c.check(at+"/items", ri, wi)
		}
	}
	if r.Items2020 != nil && w.Items2020 != nil {
		c.check(at+"/items", r.Items2020, w.Items2020)
	}
}

func jsonTypes(s *jsonschema.Schema) []string {
	if s.Types == nil {
		return nil
	}
	return s.Types.ToStrings()
}

func (c *jsonChecker) checkTypes(at string, r, w *jsonschema.Schema) {
	rt, wt := jsonTypes(r), jsonTypes(w)
	if len(rt) == 0 {
		return
	}
	if len(wt) == 0 {
		c.add(at, "type narrowed from any to %v", rt)
		return
	}
	for _, t := range wt {
		if !slices.Contains(rt, t) && !(t == "integer" && slices.Contains(rt, "number")) {
			c.add(at, "type changed from %v to %v", wt, rt)
			return
		}
	}
}

func (c *jsonChecker) checkEnum(at string, r, w *jsonschema.Schema) {
	if r.Enum == nil {
		return
	}
	if w.Enum == nil {
		c.add(at, "enum added")
		return
	}
	for _, v := range w.Enum.Values {
		if !slices.ContainsFunc(r.Enum.Values, func(x any) bool { return reflect.DeepEqual(x, v) }) {
			c.add(at, "enum value %v removed", v)
		}
	}
}

// checkBounds finds the constraints the reader added or tightened: a
// minimum (or length, items, properties) raised, a maximum lowered, a
// pattern or const added or changed, a multipleOf the writer's is not a
// multiple of.
func (c *jsonChecker) checkBounds(at string, r, w *jsonschema.Schema) {
	raised := func(name string, rv, wv *big.Rat) {
		if rv != nil && (wv == nil || rv.Cmp(wv) > 0) {
			c.add(at, "%s raised to %s", name, rv.RatString())
		}
	}
	lowered := func(name string, rv, wv *big.Rat) {
		if rv != nil && (wv == nil || rv.Cmp(wv) < 0) {
			c.add(at, "%s lowered to %s", name, rv.RatString())
		}
	}
	raised("minimum", r.Minimum, w.Minimum)
	raised("exclusiveMinimum", r.ExclusiveMinimum, w.ExclusiveMinimum)
	lowered("maximum", r.Maximum, w.Maximum)
	lowered("exclusiveMaximum", r.ExclusiveMaximum, w.ExclusiveMaximum)
	atLeast := func(name string, rv, wv *int) {
		if rv != nil && *rv > 0 && (wv == nil || *rv > *wv) {
			c.add(at, "%s raised to %d", name, *rv)
		}
	}
	atMost := func(name string, rv, wv *int) {
		if rv != nil && (wv == nil || *rv < *wv) {
			c.add(at, "%s lowered to %d", name, *rv)
		}
	}
	atLeast("minLength", r.MinLength, w.MinLength)
	atLeast("minItems", r.MinItems, w.MinItems)
	atLeast("minProperties", r.MinProperties, w.MinProperties)
	atMost("maxLength", r.MaxLength, w.MaxLength)
	atMost("maxItems", r.MaxItems, w.MaxItems)
	atMost("maxProperties", r.MaxProperties, w.MaxProperties)
	if r.Pattern != nil && (w.Pattern == nil || r.Pattern.String() != w.Pattern.String()) {
		c.add(at, "pattern %q added or changed", r.Pattern.String())
	}
	if r.Const != nil && (w.Const == nil || !reflect.DeepEqual(*r.Const, *w.Const)) {
		c.add(at, "const %v added or changed", *r.Const)
	}
	if r.MultipleOf != nil && (w.MultipleOf == nil || !new(big.Rat).Quo(w.MultipleOf, r.MultipleOf).IsInt()) {
		c.add(at, "multipleOf %s added or changed", r.MultipleOf.RatString())
	}
}

// additional is a schema's additionalProperties: open (nil schema, true),
// closed, or a schema every other property must match.
func additional(s *jsonschema.Schema) (open bool, sch *jsonschema.Schema) {
	switch a := s.AdditionalProperties.(type) {
	case bool:
		return a, nil
	case *jsonschema.Schema:
		return false, a
	}
	return true, nil
}

func (c *jsonChecker) checkObject(at string, r, w *jsonschema.Schema) {
	rOpen, rAdd := additional(r)
	wOpen, wAdd := additional(w)
	if wOpen && !rOpen && rAdd == nil {
		c.add(at, "additionalProperties closed (false) where it was open")
	}
	for _, name := range slices.Sorted(maps.Keys(w.Properties)) {
		p := at + "/properties/" + name
		switch rp, ok := r.Properties[name]; {
		case ok:
			c.check(p, rp, w.Properties[name])
		case rAdd != nil:
			c.check(p, rAdd, w.Properties[name])
		case !rOpen:
			c.add(p, "property removed from a closed content model")
		}
	}
	for _, name := range slices.Sorted(maps.Keys(r.Properties)) {
		if _, ok := w.Properties[name]; ok {
			continue
		}
		p := at + "/properties/" + name
		switch {
		case wAdd != nil:
			c.check(p, r.Properties[name], wAdd)
		case wOpen:
			c.add(p, "property added to an open content model (old data may carry it with any value)")
		}
	}
	for _, name := range r.Required {
		if !slices.Contains(w.Required, name) {
			c.add(at, "property %q became required", name)
		}
	}
}
