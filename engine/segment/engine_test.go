package segment

import (
	"context"
	"fmt"
	"io"
	"log/slog"
	"slices"
	"testing"
	"time"

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
	// A test that returns or fails early must not leave the engine running:
	// Pebble's background work writing into a folder t.TempDir is
	// removing failed the cleanup ("directory not empty"). Close twice is
	// a no-op.
	t.Cleanup(func() { e.Close() })
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

// Shards spread evenly over the workers, whatever their names hash to, on
// create, after a delete and after a restart: every worker writes and
// fsyncs its own files at the same time as the others.
func TestShardsSpreadOverWorkers(t *testing.T) {
	perWorker := func(e *Engine) []int {
		n := make([]int, len(e.workers))
		for _, sh := range e.shards {
			n[sh.worker.id]++
		}
		for i, w := range e.workers {
			if w.shards != n[i] {
				t.Fatalf("worker %d counts %d shards, but %d are mapped to it", i, w.shards, n[i])
			}
		}
		return n
	}
	spread := func(n []int) int { return slices.Max(n) - slices.Min(n) }
	for _, tc := range []struct {
		shards, workers int
	}{{16, 16}, {4, 16}, {40, 8}, {10, 3}} {
		t.Run(fmt.Sprintf("%d shards on %d workers", tc.shards, tc.workers), func(t *testing.T) {
			cfg := testConfig(t.TempDir())
			cfg.Workers = tc.workers
			e := open(t, cfg)
			ctx := context.Background()
			for i := 0; i < tc.shards; i++ {
				if err := e.CreateShard(ctx, fmt.Sprintf("a-%d", i)); err != nil {
					t.Fatal(err)
				}
			}
			if n := perWorker(e); spread(n) > 1 {
				t.Fatalf("shards per worker %v: want at most one apart", n)
			}
			for i := 0; i < tc.shards; i += 3 {
				if err := e.DeleteShard(ctx, fmt.Sprintf("a-%d", i)); err != nil {
					t.Fatal(err)
				}
			}
			for i := 0; i < tc.shards; i += 3 {
				if err := e.CreateShard(ctx, fmt.Sprintf("b-%d", i)); err != nil {
					t.Fatal(err)
				}
			}
			if n := perWorker(e); spread(n) > 1 {
				t.Fatalf("after deletes and creates, shards per worker %v: want at most one apart", n)
			}
			if err := e.Close(); err != nil {
				t.Fatal(err)
			}
			e = open(t, cfg)
			defer e.Close()
			if n := perWorker(e); spread(n) > 1 {
				t.Fatalf("after a restart, shards per worker %v: want at most one apart", n)
			}
		})
	}
}

// sharedConfig puts every shard in the shared files (strata.file.model=shared).
func sharedConfig(dir string) Config {
	cfg := testConfig(dir)
	cfg.FileModel = func(string) string { return ModelShared }
	return cfg
}

// The contract holds for shards in the shared files, with small segments
// and small shared files too: reads cross chunks, segments and files.
func TestContractShared(t *testing.T) {
	for _, tc := range []struct {
		name string
		cfg  func(*Config)
	}{
		{"default", func(*Config) {}},
		{"small segments and files", func(c *Config) {
			c.MaxSegmentBytes, c.RollCheckInterval, c.SharedFileBytes = 2048, 5, 4096
		}},
		{"fsync interval", func(c *Config) { c.Fsync, c.FsyncInterval = FsyncInterval, 5*time.Millisecond }},
	} {
		t.Run(tc.name, func(t *testing.T) {
			storetest.Run(t, func(t *testing.T) store.Store {
				cfg := sharedConfig(t.TempDir())
				tc.cfg(&cfg)
				return open(t, cfg)
			}, storetest.Options{Reopen: func(t *testing.T, s store.Store) store.Store {
				e := s.(*Engine)
				if err := e.Close(); err != nil {
					t.Fatal(err)
				}
				return open(t, e.cfg)
			}})
		})
	}
}
