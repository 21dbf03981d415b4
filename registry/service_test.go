package registry_test

import (
	"context"
	"errors"
	"fmt"
	"reflect"
	"testing"

	"strata/registry"
	"strata/registry/format"
	"strata/registry/pebblestore"
)

func openStore(t *testing.T, dir string) *pebblestore.Store {
	t.Helper()
	s, err := pebblestore.Open(dir)
	if err != nil {
		t.Fatal(err)
	}
	return s
}

func register(t *testing.T, r *registry.Registry, subject string, sc registry.Schema) registry.SubjectSchema {
	t.Helper()
	var out registry.SubjectSchema
	err := r.Write(context.Background(), func(st *registry.State) ([]registry.Write, error) {
		ss, writes, err := st.Register(registry.RegisterRequest{Subject: subject, Schema: sc})
		out = ss
		return writes, err
	})
	if err != nil {
		t.Fatalf("register under %s: %v", subject, err)
	}
	return out
}

func write(t *testing.T, r *registry.Registry, fn func(*registry.State) ([]registry.Write, error)) {
	t.Helper()
	if err := r.Write(context.Background(), fn); err != nil {
		t.Fatal(err)
	}
}

// snapshot is everything the registry answers, to compare before and
// after a restart.
type snapshot struct {
	Subjects, AllSubjects []string
	Versions              map[string][]int
	Schemas               map[int]registry.Schema
	Global, Subject       registry.Level
	Mode                  registry.Mode
}

func snap(t *testing.T, r *registry.Registry) snapshot {
	t.Helper()
	s := snapshot{Versions: map[string][]int{}, Schemas: map[int]registry.Schema{}}
	r.Read(func(st *registry.State) error {
		s.Subjects, s.AllSubjects = st.Subjects(false), st.Subjects(true)
		for _, subject := range s.AllSubjects {
			s.Versions[subject], _ = st.Versions(subject, true)
		}
		for id := 1; id < 10; id++ {
			if sc, err := st.SchemaByID(id); err == nil {
				s.Schemas[id] = sc
			}
		}
		s.Global, _ = st.Config("", false)
		s.Subject, _ = st.Config("b", false)
		s.Mode, _ = st.Mode("c", false)
		return nil
	})
	return s
}

// A registry reopened on its store answers as before: every schema, id,
// version, deletion, level and mode; and its next id is still new.
func TestRestartKeepsEverything(t *testing.T) {
	ctx := context.Background()
	dir := t.TempDir()
	r, err := registry.Open(ctx, openStore(t, dir))
	if err != nil {
		t.Fatal(err)
	}
	avro := registry.Schema{Type: format.Avro, Text: `{"type":"record","name":"A","fields":[{"name":"a","type":"int"}]}`}
	proto := registry.Schema{Type: format.Protobuf, Text: "syntax = \"proto3\";\nmessage M { int32 a = 1; }"}
	json := registry.Schema{Type: format.JSON, Text: `{"type":"object"}`}
	register(t, r, "a", avro)
	register(t, r, "b", proto)
	register(t, r, "c", json)
	register(t, r, "gone", registry.Schema{Type: format.JSON, Text: `{"type":"string"}`}) // id 4, hard-deleted below
	write(t, r, func(st *registry.State) ([]registry.Write, error) { return st.SetConfig("", registry.Full), nil })
	write(t, r, func(st *registry.State) ([]registry.Write, error) { return st.SetConfig("b", registry.None), nil })
	write(t, r, func(st *registry.State) ([]registry.Write, error) { return st.SetMode("c", registry.ReadOnly, false) })
	for _, permanent := range []bool{false, true} {
		write(t, r, func(st *registry.State) ([]registry.Write, error) {
			_, writes, err := st.DeleteSubject("gone", permanent)
			return writes, err
		})
	}
	write(t, r, func(st *registry.State) ([]registry.Write, error) {
		_, writes, err := st.DeleteSubject("a", false)
		return writes, err
	})
	before := snap(t, r)
	if len(before.Schemas) != 3 || len(before.Subjects) != 2 || len(before.AllSubjects) != 3 || before.Subject != registry.None || before.Mode != registry.ReadOnly {
		t.Fatalf("before the restart: %+v", before)
	}
	if err := r.Close(); err != nil {
		t.Fatal(err)
	}

	r, err = registry.Open(ctx, openStore(t, dir))
	if err != nil {
		t.Fatal(err)
	}
	defer r.Close()
	if after := snap(t, r); !reflect.DeepEqual(after, before) {
		t.Fatalf("after a restart:\n%+v\nbefore:\n%+v", after, before)
	}
	if got := register(t, r, "d", registry.Schema{Type: format.JSON, Text: `{"type":"integer"}`}); got.ID != 5 {
		t.Fatalf("the first id after the restart: %d, want 5 (4 was hard-deleted, never reused)", got.ID)
	}
}

// Two registries over one store (two nodes over one etcd, later): the one
// behind is refused by the store's revision compare, reloads and decides
// again, so the two schemas get two ids and both are kept.
func TestWritersOverOneStoreNeverShareAnID(t *testing.T) {
	ctx := context.Background()
	store := openStore(t, t.TempDir())
	defer store.Close()
	r1, err := registry.Open(ctx, store)
	if err != nil {
		t.Fatal(err)
	}
	r2, err := registry.Open(ctx, store)
	if err != nil {
		t.Fatal(err)
	}
	a := register(t, r1, "x", registry.Schema{Type: format.JSON, Text: `{"type":"string"}`})
	b := register(t, r2, "y", registry.Schema{Type: format.JSON, Text: `{"type":"integer"}`})
	if a.ID != 1 || b.ID != 2 {
		t.Fatalf("ids %d and %d, want 1 and 2", a.ID, b.ID)
	}
	if s := snap(t, r2); len(s.Schemas) != 2 || len(s.Subjects) != 2 {
		t.Fatalf("the second registry after its reload: %+v", s)
	}
}

// bounded is a real store that refuses, as etcd's does, a change of more
// than max keys.
type bounded struct {
	*pebblestore.Store
	max int
}

func (b bounded) Commit(ctx context.Context, rev uint64, writes []registry.Write) (uint64, error) {
	if len(writes) > b.max {
		return 0, fmt.Errorf("%d keys: %w", len(writes), registry.ErrTooLarge)
	}
	return b.Store.Commit(ctx, rev, writes)
}

// A change the store can never take is refused as not permitted (42205,
// HTTP 422), which clients do not retry, not as a store failure (50001,
// 500, which they do); nothing is written.
func TestAChangeTooLargeForTheStoreIsNotPermitted(t *testing.T) {
	ctx := context.Background()
	r, err := registry.Open(ctx, bounded{openStore(t, t.TempDir()), 0})
	if err != nil {
		t.Fatal(err)
	}
	err = r.Write(ctx, func(st *registry.State) ([]registry.Write, error) { return st.SetConfig("", registry.Full), nil })
	var e *registry.Error
	if !errors.As(err, &e) || e.Code != registry.CodeOperationNotPermitted || e.Status() != 422 {
		t.Fatalf("a change too large for the store: %v, want 42205", err)
	}
	if err := r.Read(func(st *registry.State) error {
		if c, err := st.Config("", false); err == nil && c == registry.Full {
			return fmt.Errorf("the refused change was applied: %v", c)
		}
		return nil
	}); err != nil {
		t.Fatal(err)
	}
}
