package offsets

import (
	"reflect"
	"testing"
)

// Committed positions come back per group, topic and partition, a later
// commit replaces an earlier one, and they survive a reopen.
func TestCommitAndReadBack(t *testing.T) {
	dir := t.TempDir()
	s, err := Open(dir)
	if err != nil {
		t.Fatal(err)
	}
	if err := s.Commit("g", map[string]map[int32]Committed{"a": {0: {Offset: 5}, 1: {Offset: 7, Metadata: "m"}}, "a.b": {0: {Offset: 1}}}); err != nil {
		t.Fatal(err)
	}
	if err := s.Commit("g", map[string]map[int32]Committed{"a": {0: {Offset: 9, LeaderEpoch: 2}}}); err != nil {
		t.Fatal(err)
	}
	if err := s.Commit("g2", map[string]map[int32]Committed{"a": {0: {Offset: 100}}}); err != nil {
		t.Fatal(err)
	}
	want := map[string]map[int32]Committed{"a": {0: {Offset: 9, LeaderEpoch: 2}, 1: {Offset: 7, Metadata: "m"}}, "a.b": {0: {Offset: 1}}}
	check := func(s *Store) {
		t.Helper()
		got, err := s.Group("g")
		if err != nil || !reflect.DeepEqual(got, want) {
			t.Fatalf("group g: %v, %v; want %v", got, err, want)
		}
		if c, ok, err := s.Get("g2", "a", 0); err != nil || !ok || c.Offset != 100 {
			t.Fatalf("g2 a/0: %+v %v %v", c, ok, err)
		}
		if _, ok, _ := s.Get("g", "a", 3); ok {
			t.Fatal("a partition never committed has a position")
		}
	}
	check(s)
	s.Close()
	if s, err = Open(dir); err != nil {
		t.Fatal(err)
	}
	defer s.Close()
	check(s)
}
