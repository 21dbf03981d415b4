// Package storetest is the contract every registry.Store passes: the
// revision compare that keeps two writers from taking one id, atomic
// batches, deletes, and a reopened store keeping all of it.
package storetest

import (
	"context"
	"errors"
	"maps"
	"sync"
	"testing"

	"strata/registry"
)

// Open returns a fresh empty store and a function that closes it and
// opens it again on the same data.
type Open func(t *testing.T) (registry.Store, func() registry.Store)

// Run runs the contract's tests on the backend open opens.
func Run(t *testing.T, open Open) {
	ctx := context.Background()
	load := func(t *testing.T, s registry.Store) (map[string][]byte, uint64) {
		t.Helper()
		kv, rev, err := s.Load(ctx)
		if err != nil {
			t.Fatal(err)
		}
		return kv, rev
	}
	t.Run("EmptyAtRevisionZero", func(t *testing.T) {
		s, _ := open(t)
		if kv, rev := load(t, s); len(kv) != 0 || rev != 0 {
			t.Fatalf("a new store: %d keys at revision %d, want none at 0", len(kv), rev)
		}
	})
	t.Run("CommitIsAtomicAndCompared", func(t *testing.T) {
		s, _ := open(t)
		rev, err := s.Commit(ctx, 0, []registry.Write{{Key: "a", Value: []byte("1")}, {Key: "b/c", Value: []byte("2")}})
		if err != nil || rev != 1 {
			t.Fatalf("first commit: revision %d, %v; want 1", rev, err)
		}
		if _, err := s.Commit(ctx, 0, []registry.Write{{Key: "a", Value: []byte("stale")}, {Key: "d", Value: []byte("3")}}); !errors.Is(err, registry.ErrConflict) {
			t.Fatalf("a commit over a stale revision: %v, want ErrConflict", err)
		}
		kv, rev := load(t, s)
		if want := map[string][]byte{"a": []byte("1"), "b/c": []byte("2")}; rev != 1 || !maps.EqualFunc(kv, want, func(a, b []byte) bool { return string(a) == string(b) }) {
			t.Fatalf("after a refused commit: %q at %d, want %q at 1", kv, rev, want)
		}
		if rev, err = s.Commit(ctx, 1, []registry.Write{{Key: "a"}, {Key: "b/c", Value: []byte("4")}}); err != nil || rev != 2 {
			t.Fatalf("delete and overwrite: revision %d, %v; want 2", rev, err)
		}
		if kv, _ := load(t, s); len(kv) != 1 || string(kv["b/c"]) != "4" {
			t.Fatalf("after delete and overwrite: %q, want only b/c=4", kv)
		}
	})
	t.Run("OneWriterAtARevisionWins", func(t *testing.T) {
		s, _ := open(t)
		var wg sync.WaitGroup
		errs := make([]error, 8)
		for i := range errs {
			wg.Go(func() {
				_, errs[i] = s.Commit(ctx, 0, []registry.Write{{Key: "next_id", Value: []byte{byte('0' + i)}}})
			})
		}
		wg.Wait()
		won := 0
		for _, err := range errs {
			switch {
			case err == nil:
				won++
			case !errors.Is(err, registry.ErrConflict):
				t.Fatal(err)
			}
		}
		if _, rev := load(t, s); won != 1 || rev != 1 {
			t.Fatalf("%d of 8 writers at revision 0 won, store at %d; want 1 at 1", won, rev)
		}
	})
	t.Run("ReopenKeepsEverything", func(t *testing.T) {
		s, reopen := open(t)
		if _, err := s.Commit(ctx, 0, []registry.Write{{Key: "x", Value: []byte("1")}, {Key: "y", Value: []byte{}}}); err != nil {
			t.Fatal(err)
		}
		if _, err := s.Commit(ctx, 1, []registry.Write{{Key: "x", Value: []byte("2")}}); err != nil {
			t.Fatal(err)
		}
		s = reopen()
		kv, rev := load(t, s)
		if rev != 2 || len(kv) != 2 || string(kv["x"]) != "2" || kv["y"] == nil {
			t.Fatalf("reopened: %q at %d, want x=2 and an empty y at 2", kv, rev)
		}
	})
}
