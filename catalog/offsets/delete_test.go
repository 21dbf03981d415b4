package offsets

import (
	"errors"
	"reflect"
	"testing"

	"strata/internal/testsvc"
)

// deleter is what both stores offer for Kafka's OffsetDelete, DeleteGroups
// and ListGroups.
type deleter interface {
	Commit(group string, positions map[string]map[int32]Committed) error
	Group(group string) (map[string]map[int32]Committed, error)
	Delete(group string, partitions map[string][]int32) error
	DeleteGroup(group string) error
	Groups() ([]string, error)
}

// On Pebble and in etcd alike: deleting some partitions' positions keeps
// the others, deleting a group's last position or the whole group takes it
// out of the list, and a group whose name begins another's is its own.
func TestDeleteOffsetsAndGroups(t *testing.T) {
	stores := map[string]func(t *testing.T) deleter{
		"pebble": func(t *testing.T) deleter {
			s, err := Open(t.TempDir())
			if err != nil {
				t.Fatal(err)
			}
			t.Cleanup(func() { s.Close() })
			return s
		},
		"etcd": func(t *testing.T) deleter { return OpenEtcd(etcdClient(t), "/"+testsvc.UniquePrefix(t)) },
	}
	for name, open := range stores {
		t.Run(name, func(t *testing.T) {
			s := open(t)
			for _, g := range []string{"g", "g2", "billing", "g.x"} {
				if err := s.Commit(g, map[string]map[int32]Committed{"a": {0: {Offset: 1}, 1: {Offset: 2}}, "b": {0: {Offset: 3}}}); err != nil {
					t.Fatal(err)
				}
			}
			groups := func(want ...string) {
				t.Helper()
				if got, err := s.Groups(); err != nil || !reflect.DeepEqual(got, want) {
					t.Fatalf("groups: %q, %v; want %q", got, err, want)
				}
			}
			groups("billing", "g", "g.x", "g2")

			if err := s.Delete("g", map[string][]int32{"a": {1, 7}, "never": {0}}); err != nil {
				t.Fatal(err)
			}
			want := map[string]map[int32]Committed{"a": {0: {Offset: 1}}, "b": {0: {Offset: 3}}}
			if got, err := s.Group("g"); err != nil || !reflect.DeepEqual(got, want) {
				t.Fatalf("g after deleting a/1: %v, %v; want %v", got, err, want)
			}
			if got, _ := s.Group("g2"); len(got["a"]) != 2 {
				t.Fatalf("deleting g's offsets touched g2: %v", got)
			}

			if err := s.Delete("g2", map[string][]int32{"a": {0, 1}, "b": {0}}); err != nil {
				t.Fatal(err)
			}
			groups("billing", "g", "g.x")
			if err := s.DeleteGroup("g"); err != nil {
				t.Fatal(err)
			}
			if err := s.DeleteGroup("never"); err != nil {
				t.Fatalf("deleting a group without offsets: %v", err)
			}
			groups("billing", "g.x")
			if got, err := s.Group("g"); err != nil || len(got) != 0 {
				t.Fatalf("deleted group g still has %v, %v", got, err)
			}
			if got, _ := s.Group("g.x"); len(got) != 2 {
				t.Fatalf("deleting g touched g.x: %v", got)
			}
		})
	}
}

// In etcd a commit that comes between a delete's read and its write
// survives: OffsetDelete removes only the keys it names, so the commit's
// partitions stay; DeleteGroups deletes nothing and says the offsets
// changed, since a group committed to is in use.
func TestEtcdDeleteKeepsACommitInBetween(t *testing.T) {
	prefix := "/" + testsvc.UniquePrefix(t)
	s, other := OpenEtcd(etcdClient(t), prefix), OpenEtcd(etcdClient(t), prefix)
	commit := func(group, topic string, p int32) {
		t.Helper()
		if err := other.Commit(group, map[string]map[int32]Committed{topic: {p: {Offset: 10}}}); err != nil {
			t.Fatal(err)
		}
	}
	committed := func(group string) map[string]map[int32]Committed {
		t.Helper()
		got, err := s.Group(group)
		if err != nil {
			t.Fatal(err)
		}
		return got
	}
	for _, g := range []string{"od", "dg"} {
		commit(g, "a", 0)
		commit(g, "a", 1)
	}
	commit("od", "late", 1)
	if err := s.Delete("od", map[string][]int32{"a": {0}}); err != nil {
		t.Fatal(err)
	}
	if got, want := committed("od"), (map[string]map[int32]Committed{"a": {1: {Offset: 10}}, "late": {1: {Offset: 10}}}); !reflect.DeepEqual(got, want) {
		t.Fatalf("OffsetDelete of od a/0 left %v; want %v", got, want)
	}

	s.betweenReadAndSwap = func() { commit("dg", "late", 1) }
	if err := s.DeleteGroup("dg"); !errors.Is(err, ErrChanged) {
		t.Fatalf("DeleteGroups of a group committed to meanwhile: %v; want %v", err, ErrChanged)
	}
	if got, want := committed("dg"), (map[string]map[int32]Committed{"a": {0: {Offset: 10}, 1: {Offset: 10}}, "late": {1: {Offset: 10}}}); !reflect.DeepEqual(got, want) {
		t.Fatalf("DeleteGroups that failed left %v; want %v", got, want)
	}

	// Once nobody commits in between, the group goes.
	s.betweenReadAndSwap = nil
	if err := s.DeleteGroup("dg"); err != nil {
		t.Fatal(err)
	}
	if got := committed("dg"); len(got) != 0 {
		t.Fatalf("deleted group dg still has %v", got)
	}
}
