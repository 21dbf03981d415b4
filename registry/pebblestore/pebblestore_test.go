package pebblestore

import (
	"testing"

	"strata/registry"
	"strata/registry/storetest"
)

func TestContract(t *testing.T) {
	storetest.Run(t, func(t *testing.T) (registry.Store, func() registry.Store) {
		dir := t.TempDir()
		open := func() *Store {
			s, err := Open(dir)
			if err != nil {
				t.Fatal(err)
			}
			return s
		}
		cur := open()
		t.Cleanup(func() { cur.Close() })
		return cur, func() registry.Store {
			cur.Close()
			cur = open()
			return cur
		}
	})
}
