package registry

import (
	"errors"
	"slices"
	"strings"
	"testing"

	"strata/registry/format"
)

func avroRecord(fields string) Schema {
	return Schema{Type: format.Avro, Text: `{"type":"record","name":"R","fields":[` + fields + `]}`}
}

// tstate is a State the tests change by the writes its decisions return,
// as Registry does once its store has them.
type tstate struct {
	*State
	t *testing.T
}

func newState(t *testing.T) tstate { return tstate{NewState(), t} }

func (s tstate) apply(writes []Write) {
	s.t.Helper()
	for _, w := range writes {
		if err := s.State.apply(w); err != nil {
			s.t.Fatal(err)
		}
	}
}

func (s tstate) register(subject string, sc Schema) SubjectSchema {
	s.t.Helper()
	ss, writes, err := s.Register(RegisterRequest{Subject: subject, Schema: sc})
	if err != nil {
		s.t.Fatalf("register under %s: %v", subject, err)
	}
	s.apply(writes)
	return ss
}

func wantCode(t *testing.T, err error, code int) {
	t.Helper()
	var e *Error
	if !errors.As(err, &e) || e.Code != code {
		t.Fatalf("got %v, want error_code %d", err, code)
	}
}

// One schema has one id, under one subject registered twice and under two
// subjects; a new schema takes the next id and the subject's next version.
func TestRegisterGivesIDsAndVersions(t *testing.T) {
	s := newState(t)
	a, b := avroRecord(`{"name":"a","type":"int"}`), avroRecord(`{"name":"a","type":"int"},{"name":"b","type":"int","default":0}`)
	if got := s.register("s1", a); got.ID != 1 || got.Version != 1 {
		t.Fatalf("first: %+v", got)
	}
	again, writes, err := s.Register(RegisterRequest{Subject: "s1", Schema: Schema{Text: "  " + a.Text + "\n"}})
	if err != nil || again.ID != 1 || again.Version != 1 || len(writes) != 0 {
		t.Fatalf("the same schema again (type left out, spaced): %+v, %d writes, %v; want id 1 version 1, nothing written", again, len(writes), err)
	}
	if got := s.register("s2", a); got.ID != 1 || got.Version != 1 {
		t.Fatalf("under a second subject: %+v, want id 1 version 1", got)
	}
	if got := s.register("s1", b); got.ID != 2 || got.Version != 2 {
		t.Fatalf("a second schema: %+v, want id 2 version 2", got)
	}
	if subjects, _ := s.SubjectsByID(1, false); !slices.Equal(subjects, []string{"s1", "s2"}) {
		t.Fatalf("subjects of id 1: %v", subjects)
	}
}

// Ids are never reused: a schema hard-deleted and registered again takes a
// new one, and the old one is not found.
func TestIDsAreNeverReused(t *testing.T) {
	s := newState(t)
	a := avroRecord(`{"name":"a","type":"int"}`)
	s.register("s", a)
	for _, permanent := range []bool{false, true} {
		_, writes, err := s.DeleteSubject("s", permanent)
		if err != nil {
			t.Fatal(err)
		}
		s.apply(writes)
	}
	_, err := s.SchemaByID(1)
	wantCode(t, err, CodeSchemaNotFound)
	if got := s.register("s", a); got.ID != 2 || got.Version != 1 {
		t.Fatalf("registered again after a hard delete: %+v, want id 2, version 1", got)
	}
}

// Each level checks the versions it names in the directions it names.
func TestCompatibilityLevels(t *testing.T) {
	a, aDefault := `{"name":"a","type":"int"}`, `{"name":"a","type":"int","default":0}`
	b, bDefault := `{"name":"b","type":"int"}`, `{"name":"b","type":"int","default":0}`
	for _, tc := range []struct {
		name      string
		history   []string
		candidate string
		ok        map[Level]bool // the levels that take it; the rest refuse it
	}{
		{"a field added with a default", []string{a}, a + "," + bDefault,
			map[Level]bool{None: true, Backward: true, BackwardTransitive: true, Forward: true, ForwardTransitive: true, Full: true, FullTransitive: true}},
		{"a field added without a default", []string{a}, a + "," + b,
			map[Level]bool{None: true, Forward: true, ForwardTransitive: true}},
		{"a field without a default removed", []string{a + "," + b}, a,
			map[Level]bool{None: true, Backward: true, BackwardTransitive: true}},
		// v3 reads v2's data, not v1's (b has no default).
		{"only the latest reads back", []string{a, a + "," + bDefault}, b,
			map[Level]bool{None: true, Backward: true}},
		// v2 reads v3's data (b's default), v1 does not; v3 reads v2's, not v1's.
		{"only the latest reads forward", []string{b, a + "," + bDefault}, a,
			map[Level]bool{None: true, Backward: true, Forward: true, Full: true}},
		// Both ways with v2; v1 cannot read v3 (a is gone, without a default).
		{"full with the latest only", []string{a, aDefault + "," + bDefault}, bDefault,
			map[Level]bool{None: true, Backward: true, BackwardTransitive: true, Forward: true, Full: true}},
	} {
		for _, level := range []Level{None, Backward, BackwardTransitive, Forward, ForwardTransitive, Full, FullTransitive} {
			t.Run(tc.name+"/"+string(level), func(t *testing.T) {
				s := newState(t)
				s.apply(s.SetConfig("s", None))
				for _, h := range tc.history {
					s.register("s", avroRecord(h))
				}
				s.apply(s.SetConfig("s", level))
				_, writes, err := s.Register(RegisterRequest{Subject: "s", Schema: avroRecord(tc.candidate)})
				if tc.ok[level] {
					if err != nil {
						t.Fatalf("refused: %v", err)
					}
					return
				}
				wantCode(t, err, CodeIncompatible)
				if len(writes) != 0 {
					t.Fatalf("refused with %d writes", len(writes))
				}
				why, err := s.Check("s", Latest, true, avroRecord(tc.candidate))
				if err != nil || len(why) == 0 {
					t.Fatalf("the compatibility check of all versions: %q, %v; want reasons", why, err)
				}
			})
		}
	}
}

// A schema that does not parse is 42201, naming what is wrong, and nothing
// is written; so is a reference to a version that does not exist.
func TestInvalidSchemasAreRefused(t *testing.T) {
	s := newState(t)
	for _, tc := range []struct {
		name string
		sc   Schema
	}{
		{"avro", Schema{Text: `{"type":"record","name":"R","fields":[{"name":"a","type":"integr"}]}`}},
		{"protobuf", Schema{Type: format.Protobuf, Text: "message M { int32 a = ; }"}},
		{"json", Schema{Type: format.JSON, Text: `{"type":"strin"}`}},
		{"unknown type", Schema{Type: "XML", Text: "<a/>"}},
		{"empty", Schema{Text: ""}},
		{"reference not found", Schema{Text: `"acme.Address"`, References: []Reference{{Name: "acme.Address", Subject: "address", Version: 1}}}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			_, writes, err := s.Register(RegisterRequest{Subject: "s", Schema: tc.sc})
			wantCode(t, err, CodeInvalidSchema)
			if len(writes) != 0 {
				t.Fatalf("%d writes", len(writes))
			}
		})
	}
}

// A schema may use another subject's version; that version is then
// referenced by it and cannot be deleted.
func TestReferences(t *testing.T) {
	s := newState(t)
	addr := s.register("address", Schema{Text: `{"type":"record","name":"Address","namespace":"acme","fields":[{"name":"street","type":"string"}]}`})
	person := s.register("person", Schema{Text: `{"type":"record","name":"Person","namespace":"acme","fields":[{"name":"home","type":"acme.Address"}]}`,
		References: []Reference{{Name: "acme.Address", Subject: "address", Version: Latest}}})
	if got := person.References; len(got) != 1 || got[0].Version != addr.Version {
		t.Fatalf("the reference as stored: %+v, want latest made version %d", got, addr.Version)
	}
	if by, err := s.ReferencedBy("address", 1); err != nil || !slices.Equal(by, []int{person.ID}) {
		t.Fatalf("referenced by: %v, %v", by, err)
	}
	_, _, err := s.DeleteSubject("address", false)
	wantCode(t, err, CodeReferenceExists)
	_, _, err = s.DeleteVersion("address", 1, false)
	wantCode(t, err, CodeReferenceExists)
}

// Deletes follow Confluent's order: soft first, then permanent, each
// refused out of turn with its own code.
func TestDeletes(t *testing.T) {
	s := newState(t)
	s.register("s", avroRecord(`{"name":"a","type":"int"}`))
	s.register("s", avroRecord(`{"name":"a","type":"int"},{"name":"b","type":"int","default":0}`))
	do := func(versions []int, writes []Write, err error) []int {
		t.Helper()
		if err != nil {
			t.Fatal(err)
		}
		s.apply(writes)
		return versions
	}
	one := func(v int, writes []Write, err error) int {
		t.Helper()
		return do([]int{v}, writes, err)[0]
	}
	_, _, err := s.DeleteVersion("s", 1, true)
	wantCode(t, err, CodeVersionNotSoftDeleted)
	if v := one(s.DeleteVersion("s", 1, false)); v != 1 {
		t.Fatalf("soft delete of version 1: %d", v)
	}
	_, _, err = s.DeleteVersion("s", 1, false)
	wantCode(t, err, CodeVersionSoftDeleted)
	if vs, _ := s.Versions("s", false); !slices.Equal(vs, []int{2}) {
		t.Fatalf("live versions: %v", vs)
	}
	if vs, _ := s.Versions("s", true); !slices.Equal(vs, []int{1, 2}) {
		t.Fatalf("versions with the deleted: %v", vs)
	}
	_, _, err = s.DeleteSubject("s", true)
	wantCode(t, err, CodeSubjectNotSoftDeleted)
	if vs := do(s.DeleteSubject("s", false)); !slices.Equal(vs, []int{2}) {
		t.Fatalf("soft delete of the subject: %v, want [2]", vs)
	}
	_, _, err = s.DeleteSubject("s", false)
	wantCode(t, err, CodeSubjectSoftDeleted)
	_, err = s.Versions("s", false)
	wantCode(t, err, CodeSubjectNotFound)
	if subjects := s.Subjects(true); !slices.Equal(subjects, []string{"s"}) {
		t.Fatalf("subjects with the deleted: %v", subjects)
	}
	if got := s.register("s", avroRecord(`{"name":"a","type":"int"}`)); got.Version != 3 || got.ID != 1 {
		t.Fatalf("registered again after a soft delete: %+v, want version 3 with id 1", got)
	}
	do(s.DeleteSubject("s", false))
	if vs := do(s.DeleteSubject("s", true)); !slices.Equal(vs, []int{1, 2, 3}) {
		t.Fatalf("permanent delete: %v", vs)
	}
	if subjects := s.Subjects(true); len(subjects) != 0 {
		t.Fatalf("subjects after a permanent delete: %v", subjects)
	}
	_, _, err = s.DeleteSubject("s", false)
	wantCode(t, err, CodeSubjectNotFound)
}

// READONLY takes nothing; IMPORT takes the client's id and version,
// unchecked, and later ids follow the largest imported one; READWRITE
// takes no id of the client's.
func TestModes(t *testing.T) {
	s := newState(t)
	a := avroRecord(`{"name":"a","type":"int"}`)
	_, _, err := s.Register(RegisterRequest{Subject: "s", Schema: a, ID: 7})
	wantCode(t, err, CodeOperationNotPermitted)

	writes, err := s.SetMode("", Import, false)
	if err != nil {
		t.Fatal(err)
	}
	s.apply(writes)
	ss, writes, err := s.Register(RegisterRequest{Subject: "s", Schema: a, ID: 7, Version: 3})
	if err != nil || ss.ID != 7 || ss.Version != 3 {
		t.Fatalf("import: %+v, %v; want id 7 version 3", ss, err)
	}
	s.apply(writes)
	_, _, err = s.Register(RegisterRequest{Subject: "t", Schema: avroRecord(`{"name":"b","type":"int"}`), ID: 7})
	wantCode(t, err, CodeOperationNotPermitted)
	incompatible := avroRecord(`{"name":"z","type":"string"}`)
	ss, writes, err = s.Register(RegisterRequest{Subject: "s", Schema: incompatible, ID: 9})
	if err != nil {
		t.Fatalf("import of an incompatible schema: %v", err)
	}
	s.apply(writes)

	if _, err := s.SetMode("", Import, false); err == nil {
		t.Fatal("IMPORT over existing subjects without force: taken")
	}
	writes, err = s.SetMode("", ReadWrite, false)
	if err != nil {
		t.Fatal(err)
	}
	s.apply(writes)
	if got := s.register("u", avroRecord(`{"name":"c","type":"int"}`)); got.ID != 10 {
		t.Fatalf("after importing id 9 the next id is %d, want 10", got.ID)
	}
	writes, _ = s.SetMode("u", ReadOnly, false)
	s.apply(writes)
	_, _, err = s.Register(RegisterRequest{Subject: "u", Schema: a})
	wantCode(t, err, CodeOperationNotPermitted)
	_, _, err = s.DeleteSubject("u", false)
	wantCode(t, err, CodeOperationNotPermitted)
	if m, _ := s.Mode("u", false); m != ReadOnly {
		t.Fatalf("u's mode: %s", m)
	}
	_, err = s.Mode("s", false)
	wantCode(t, err, CodeSubjectModeNotSet)
	if m, _ := s.Mode("s", true); m != ReadWrite {
		t.Fatalf("s's mode with the global default: %s", m)
	}
}

// Levels: the global one defaults to BACKWARD; a subject's own one is
// 40408 until set, unless asked with the global default.
func TestConfig(t *testing.T) {
	s := newState(t)
	if l, _ := s.Config("", false); l != Backward {
		t.Fatalf("global: %s", l)
	}
	_, err := s.Config("s", false)
	wantCode(t, err, CodeSubjectLevelNotSet)
	s.apply(s.SetConfig("", Full))
	if l, _ := s.Config("s", true); l != Full {
		t.Fatalf("s with the global default: %s", l)
	}
	s.apply(s.SetConfig("s", None))
	if l, _ := s.Config("s", false); l != None {
		t.Fatalf("s: %s", l)
	}
	prev, writes, err := s.DeleteConfig("s")
	if err != nil || prev != None {
		t.Fatalf("delete s's: %s, %v", prev, err)
	}
	s.apply(writes)
	prev, writes, _ = s.DeleteConfig("")
	s.apply(writes)
	if l, _ := s.Config("", false); prev != Full || l != Backward {
		t.Fatalf("global deleted: was %s, now %s; want FULL then BACKWARD", prev, l)
	}
	_, _, err = s.DeleteConfig("nosuch")
	wantCode(t, err, CodeSubjectNotFound)
}

func TestParseVersion(t *testing.T) {
	for _, tc := range []struct {
		in   string
		want int
		ok   bool
	}{{"1", 1, true}, {"latest", Latest, true}, {"-1", Latest, true}, {"2147483647", 1<<31 - 1, true},
		{"0", 0, false}, {"-2", 0, false}, {"2147483648", 0, false}, {"x", 0, false}, {"", 0, false}} {
		v, err := ParseVersion(tc.in)
		if (err == nil) != tc.ok || v != tc.want {
			t.Errorf("ParseVersion(%q) = %d, %v", tc.in, v, err)
		}
		if err != nil {
			wantCode(t, err, CodeInvalidVersion)
		}
	}
}

// A key the state cannot read is named, not skipped.
func TestLoadStateNamesABadKey(t *testing.T) {
	for _, kv := range []map[string][]byte{
		{"schema/x": []byte(`{}`)},
		{"version/s/0000000001": []byte(`not json`)},
		{"elsewhere": []byte(`{}`)},
	} {
		if _, err := LoadState(kv); err == nil {
			t.Errorf("%q: loaded", kv)
		}
	}
}

// A value carries a schema when its wire header names an id a live version
// of the subject has: not another subject's, not a soft-deleted one's.
func TestCheckWireHeader(t *testing.T) {
	s := newState(t)
	s.register("orders-value", avroRecord(`{"name":"a","type":"int"}`))
	s.register("other-value", avroRecord(`{"name":"b","type":"int"}`))
	s.register("gone-value", avroRecord(`{"name":"c","type":"int"}`))
	_, writes, err := s.DeleteSubject("gone-value", false)
	if err != nil {
		t.Fatal(err)
	}
	s.apply(writes)
	for _, tc := range []struct {
		subject string
		value   []byte
		want    string // "" taken
	}{
		{"orders-value", []byte{0, 0, 0, 0, 1, 'x'}, ""},
		{"orders-value", []byte{0, 0, 0, 0, 1}, ""},
		{"orders-value", []byte{0, 0, 0, 0, 2, 'x'}, "schema id 2"},
		{"gone-value", []byte{0, 0, 0, 0, 3}, "schema id 3"},
		{"orders-value", []byte{1, 0, 0, 0, 1}, "wire header"},
		{"orders-value", []byte{0, 0, 0, 1}, "wire header"},
		{"orders-value", nil, "wire header"},
		{"orders-value", []byte{0, 0xff, 0xff, 0xff, 0xff}, "schema id 4294967295"},
	} {
		err := s.CheckWireHeader(tc.subject, tc.value)
		if (err == nil) != (tc.want == "") || err != nil && !strings.Contains(err.Error(), tc.want) {
			t.Errorf("%s %x: %v, want %q", tc.subject, tc.value, err, tc.want)
		}
	}
}

// Whatever bytes a produced value holds, the check answers (no panic) and
// takes only a header naming a registered id.
func FuzzCheckWireHeader(f *testing.F) {
	s := NewState()
	sc, writes, err := s.Register(RegisterRequest{Subject: "t-value", Schema: Schema{Text: `"string"`}})
	if err != nil {
		f.Fatal(err)
	}
	for _, w := range writes {
		s.apply(w)
	}
	f.Add([]byte{0, 0, 0, 0, 1, 's'})
	f.Fuzz(func(t *testing.T, value []byte) {
		if s.CheckWireHeader("t-value", value) == nil && (len(value) < 5 || value[0] != 0 || value[4] != byte(sc.ID) || value[1]|value[2]|value[3] != 0) {
			t.Fatalf("%x taken", value)
		}
	})
}
