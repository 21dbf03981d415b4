package pebblecat

import (
	"testing"

	"strata/catalog"
	"strata/catalog/catalogtest"
)

func TestContract(t *testing.T) {
	catalogtest.Run(t, func(t *testing.T) (catalog.Catalog, func() catalog.Catalog) {
		dir := t.TempDir()
		open := func() catalog.Catalog {
			c, err := Open(dir)
			if err != nil {
				t.Fatal(err)
			}
			return c
		}
		return open(), open
	})
}
