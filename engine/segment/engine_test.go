package segment

import (
	"io"
	"log/slog"
	"testing"

	"strata/engine/store"
	"strata/engine/store/storetest"
)

func testConfig(dir string) Config {
	return Config{Dir: dir, Workers: 4, Logger: slog.New(slog.NewTextHandler(io.Discard, nil))}
}

func open(t *testing.T, cfg Config) *Engine {
	t.Helper()
	e, err := Open(cfg)
	if err != nil {
		t.Fatal(err)
	}
	return e
}

func TestContract(t *testing.T) {
	storetest.Run(t, func(t *testing.T) store.Store {
		return open(t, testConfig(t.TempDir()))
	}, storetest.Options{Reopen: func(t *testing.T, s store.Store) store.Store {
		e := s.(*Engine)
		if err := e.Close(); err != nil {
			t.Fatal(err)
		}
		return open(t, e.cfg)
	}})
}

// Small segments and a sparse index of 7: every read crosses segments and
// index entries, and the contract must still hold.
func TestContractSmallSegments(t *testing.T) {
	storetest.Run(t, func(t *testing.T) store.Store {
		cfg := testConfig(t.TempDir())
		cfg.MaxSegmentBytes = 2048
		cfg.RollCheckInterval = 5
		cfg.IndexInterval = 7
		return open(t, cfg)
	}, storetest.Options{Reopen: func(t *testing.T, s store.Store) store.Store {
		e := s.(*Engine)
		e.Close()
		return open(t, e.cfg)
	}})
}
