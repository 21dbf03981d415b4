package pebblestore

import (
	"testing"

	"strata/engine/store"
	"strata/engine/store/storetest"
)

func TestContract(t *testing.T) {
	storetest.Run(t, func(t *testing.T) store.Store {
		s, err := Open(t.TempDir())
		if err != nil {
			t.Fatal(err)
		}
		return s
	}, storetest.Options{Reopen: func(t *testing.T, s store.Store) store.Store {
		dir := s.(*Store).dir
		if err := s.Close(); err != nil {
			t.Fatal(err)
		}
		again, err := Open(dir)
		if err != nil {
			t.Fatal(err)
		}
		return again
	}})
}
