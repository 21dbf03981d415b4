package segment

import (
	"errors"
	"os"
	"strings"
	"syscall"
	"testing"

	"strata/engine/store"
	"strata/engine/store/storetest"
)

// openFDs counts this process's open file descriptors (less the one that
// lists them).
func openFDs(t *testing.T) int {
	t.Helper()
	fds, err := os.ReadDir("/proc/self/fd")
	if err != nil {
		t.Fatal(err)
	}
	return len(fds) - 1
}

// A node with many file-per-partition shards holds one descriptor per
// shard, its active segment's: the synced mark is opened only to be
// written or fsynced. With a descriptor per mark as well, 10,000
// partitions passed a limit of 20,000 and every produce failed with "too
// many open files". The limit is lowered under what a second descriptor
// per shard would need, and every shard takes appends under both
// policies that write marks, then a restart reads them all back.
func TestShardsHoldOneDescriptorEach(t *testing.T) {
	for _, fsync := range []FsyncPolicy{FsyncBatch, FsyncInterval} {
		t.Run(string(fsync), func(t *testing.T) {
			const shards = 400
			cfg := testConfig(t.TempDir())
			cfg.Fsync = fsync
			e := open(t, cfg)
			names := shardNames("many", shards)
			late := store.ShardName("late", 0)
			if err := e.CreateShards(ctx, append(names, late)); err != nil {
				t.Fatal(err)
			}
			var old syscall.Rlimit
			if err := syscall.Getrlimit(syscall.RLIMIT_NOFILE, &old); err != nil {
				t.Fatal(err)
			}
			// Room for Pebble's files and the test, not for a second
			// descriptor per shard.
			lowered := old
			lowered.Cur = uint64(openFDs(t) + shards/2)
			if err := syscall.Setrlimit(syscall.RLIMIT_NOFILE, &lowered); err != nil {
				t.Fatal(err)
			}
			t.Cleanup(func() { syscall.Setrlimit(syscall.RLIMIT_NOFILE, &old) })
			recs := storetest.Records(3, 10)
			for round := 0; round < 2; round++ {
				for _, n := range names {
					if _, err := e.Append(ctx, n, recs); err != nil {
						t.Fatalf("round %d: append to %s with the descriptor limit at %d: %v", round, n, lowered.Cur, err)
					}
				}
			}
			// At the limit, a mark that cannot be opened is a storage
			// error (KAFKA_STORAGE_ERROR, which clients retry), naming
			// the cause, and the shard takes the append once it can.
			full := old
			full.Cur = uint64(openFDs(t))
			if err := syscall.Setrlimit(syscall.RLIMIT_NOFILE, &full); err != nil {
				t.Fatal(err)
			}
			_, err := e.Append(ctx, late, recs)
			syscall.Setrlimit(syscall.RLIMIT_NOFILE, &lowered)
			if !errors.Is(err, store.ErrStorage) || !strings.Contains(err.Error(), "too many open files") {
				t.Fatalf("append with no descriptor to spare: %v; want a storage error saying too many open files", err)
			}
			if base, err := e.Append(ctx, late, recs); err != nil || base != 0 {
				t.Fatalf("append once a descriptor is free: base %d, %v; want 0", base, err)
			}
			if err := e.Close(); err != nil {
				t.Fatal(err)
			}
			e = open(t, cfg)
			for _, n := range names {
				low, high, err := e.Watermarks(ctx, n)
				if err != nil || low != 0 || high != 6 {
					t.Fatalf("%s after a restart: watermarks %d-%d, %v; want 0-6", n, low, high, err)
				}
			}
			if low, high, err := e.Watermarks(ctx, late); err != nil || low != 0 || high != 3 {
				t.Fatalf("%s after a restart: watermarks %d-%d, %v; want 0-3", late, low, high, err)
			}
		})
	}
}

// A roll that cannot open its next segment (no descriptor to spare) fails
// the shard with a storage error (KAFKA_STORAGE_ERROR, which clients
// retry), not an error of no kind (UNKNOWN_SERVER_ERROR), and what the
// shard held reads back after a restart.
func TestARollWithoutADescriptorIsAStorageError(t *testing.T) {
	cfg := testConfig(t.TempDir())
	cfg.MaxSegmentBytes = 64 // one append fills a segment: the next rolls
	e := open(t, cfg)
	const shard = "rolls-0"
	if err := e.CreateShard(ctx, shard); err != nil {
		t.Fatal(err)
	}
	recs := storetest.Records(10, 1)
	if _, err := e.Append(ctx, shard, recs); err != nil {
		t.Fatal(err)
	}
	appended := uint64(len(recs))
	var old syscall.Rlimit
	if err := syscall.Getrlimit(syscall.RLIMIT_NOFILE, &old); err != nil {
		t.Fatal(err)
	}
	full := old
	full.Cur = uint64(openFDs(t))
	if err := syscall.Setrlimit(syscall.RLIMIT_NOFILE, &full); err != nil {
		t.Fatal(err)
	}
	_, err := e.Append(ctx, shard, recs)
	syscall.Setrlimit(syscall.RLIMIT_NOFILE, &old)
	if !errors.Is(err, store.ErrStorage) || !strings.Contains(err.Error(), "too many open files") {
		t.Fatalf("an append whose roll has no descriptor: %v; want a storage error saying too many open files", err)
	}
	if err := e.Close(); err != nil {
		t.Log(err) // the failed shard's close may say so too
	}
	e = open(t, cfg)
	if low, high, err := e.Watermarks(ctx, shard); err != nil || low != 0 || high != appended {
		t.Fatalf("after a restart: watermarks %d-%d, %v; want 0-%d", low, high, err, appended)
	}
	if _, err := e.Append(ctx, shard, recs); err != nil {
		t.Fatalf("an append after the restart: %v", err)
	}
}
