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

// In etcd a delete is a compare-and-swap on what it read: a commit that
// comes between survives. OffsetDelete's partitions go from what the
// commit left (and it gives up, saying so, if commits keep coming);
// DeleteGroups deletes nothing and says the offsets changed, since a
// group committed to is in use.
func TestEtcdDeleteKeepsACommitInBetween(t *testing.T) {
	prefix := "/" + testsvc.UniquePrefix(t)
	s, other := OpenEtcd(etcdClient(t), prefix), OpenEtcd(etcdClient(t), prefix)
	commit := func(group, topic string, p int32) {
		t.Helper()
		if err := other.Commit(group, map[string]map[int32]Committed{topic: {p: {Offset: 10}}}); err != nil {
			t.Fatal(err)
		}
	}
	commits := 0
	commitBetween := func(group string, times int) {
		commits = 0
		s.betweenReadAndSwap = func() {
			if commits < times {
				commits++
				commit(group, "late", int32(commits))
			}
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
	for _, g := range []string{"od", "dg", "busy"} {
		commit(g, "a", 0)
		commit(g, "a", 1)
	}

	for _, tc := range []struct {
		name, group string
		between     int // commits that come between a read and its swap
		del         func(group string) error
		wantErr     error
		want        map[string]map[int32]Committed
	}{
		{"OffsetDelete retries from what the commit left", "od", 1,
			func(g string) error { return s.Delete(g, map[string][]int32{"a": {0}}) }, nil,
			map[string]map[int32]Committed{"a": {1: {Offset: 10}}, "late": {1: {Offset: 10}}}},
		{"OffsetDelete gives up while commits keep coming", "busy", casAttempts,
			func(g string) error { return s.Delete(g, map[string][]int32{"a": {0}}) }, ErrChanged,
			map[string]map[int32]Committed{"a": {0: {Offset: 10}, 1: {Offset: 10}}, "late": func() map[int32]Committed {
				m := map[int32]Committed{}
				for p := int32(1); p <= casAttempts; p++ {
					m[p] = Committed{Offset: 10}
				}
				return m
			}()}},
		{"DeleteGroups of a group committed to meanwhile deletes nothing", "dg", 1,
			s.DeleteGroup, ErrChanged,
			map[string]map[int32]Committed{"a": {0: {Offset: 10}, 1: {Offset: 10}}, "late": {1: {Offset: 10}}}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			commitBetween(tc.group, tc.between)
			if err := tc.del(tc.group); !errors.Is(err, tc.wantErr) {
				t.Fatalf("delete: %v; want %v", err, tc.wantErr)
			}
			if got := committed(tc.group); !reflect.DeepEqual(got, tc.want) {
				t.Fatalf("left %v; want %v", got, tc.want)
			}
		})
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
