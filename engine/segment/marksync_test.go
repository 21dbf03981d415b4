package segment

import (
	"path/filepath"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/cockroachdb/pebble/vfs"
	"github.com/cockroachdb/pebble/vfs/errorfs"

	"strata/engine/store/storetest"
)

// The tick's fsync of the synced marks (fsync=batch) is made apart from
// the workers: an append queued behind a tick whose mark fsync is slow is
// answered without waiting for it, to the shard whose mark it is or to
// another of the same worker, and the tick still fsyncs the mark. Made in
// the worker, each tick held every append queued behind it for one fsync
// per mark written since the last tick (docs/bench.md, "Before and after
// the house's second step").
func TestTheMarksFsyncAtTheTickHoldsNoAppend(t *testing.T) {
	for _, tc := range []struct{ name, next string }{
		{"the same shard", "a-0"},
		{"another shard of the worker", "b-0"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			var armed atomic.Bool
			entered, hold := make(chan struct{}), make(chan struct{})
			var once sync.Once
			release := func() { once.Do(func() { close(hold) }) }
			fs := errorfs.Wrap(vfs.Default, errorfs.InjectorFunc(func(op errorfs.Op, path string) error {
				if op == errorfs.OpFileSync && filepath.Base(path) == syncedFile && armed.CompareAndSwap(true, false) {
					close(entered)
					<-hold
				}
				return nil
			}))
			cfg := testConfig(t.TempDir())
			cfg.Workers = 1 // both shards on the worker that ticks
			cfg.FS = fs
			e := open(t, cfg)
			defer e.Close()
			defer release() // before the Close, which waits for the held fsync
			for _, s := range []string{"a-0", "b-0"} {
				if err := e.CreateShard(ctx, s); err != nil {
					t.Fatal(err)
				}
			}
			if _, err := e.Append(ctx, "a-0", storetest.Records(1, 1)); err != nil {
				t.Fatal(err)
			}
			armed.Store(true)
			e.workers[0].ch <- request{tick: true} // the ticker's request, without waiting for its period
			select {
			case <-entered:
			case <-time.After(10 * time.Second):
				t.Fatal("the tick fsynced no synced mark in 10 s")
			}
			appended := make(chan error, 1)
			go func() { _, err := e.Append(ctx, tc.next, storetest.Records(1, 2)); appended <- err }()
			select {
			case err := <-appended:
				if err != nil {
					t.Fatalf("append to %s: %v", tc.next, err)
				}
			case <-time.After(10 * time.Second):
				release()
				t.Fatalf("an append to %s waited 10 s for the tick's fsync of a-0's synced mark", tc.next)
			}
		})
	}
}
