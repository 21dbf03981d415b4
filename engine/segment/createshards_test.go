package segment

import (
	"context"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	"strata/engine/store"
	"strata/engine/store/storetest"

	"github.com/cockroachdb/pebble/vfs"
	"github.com/cockroachdb/pebble/vfs/errorfs"
)

// createConfig puts topic "sh" in the shared files and every other topic
// in a file per partition, so one CreateShards makes shards of both models.
func createConfig(dir string) Config {
	cfg := testConfig(dir)
	cfg.FileModel = func(topic string) string {
		if topic == "sh" {
			return ModelShared
		}
		return ""
	}
	return cfg
}

func shardNames(topic string, n int) []string {
	out := make([]string, n)
	for i := range out {
		out[i] = store.ShardName(topic, int32(i))
	}
	return out
}

// checkCreated checks that every shard of names is served, empty, takes
// an append at offset 0, and that its records come back after a restart;
// it returns the reopened engine.
func checkCreated(t *testing.T, e *Engine, names []string) *Engine {
	t.Helper()
	want := storetest.Records(2, 5)
	for _, n := range names {
		low, high, err := e.Watermarks(ctx, n)
		if err != nil || low != 0 || high != 0 {
			t.Fatalf("%s after create: watermarks %d-%d, %v; want an empty shard", n, low, high, err)
		}
		if base, err := e.Append(ctx, n, want); err != nil || base != 0 {
			t.Fatalf("append to %s: base %d, %v", n, base, err)
		}
	}
	cfg := e.cfg
	if err := e.Close(); err != nil {
		t.Fatal(err)
	}
	e = open(t, cfg)
	for _, n := range names {
		storetest.Equal(t, storetest.ReadAll(t, e, n, 0), want)
	}
	return e
}

func TestCreateShards(t *testing.T) {
	for _, tc := range []struct {
		name     string
		existing []string // made first, one by one
		create   []string
		wantErr  string // empty: all made
	}{
		{name: "a file per partition", create: shardNames("p", 40)},
		{name: "shared files", create: shardNames("sh", 40)},
		{name: "both models in one batch", create: append(shardNames("p", 10), shardNames("sh", 10)...)},
		{name: "one of them exists", existing: []string{"p-7"}, create: shardNames("p", 12), wantErr: `shard "p-7": shard exists`},
		{name: "a shared one exists", existing: []string{"sh-3"}, create: append(shardNames("p", 4), shardNames("sh", 4)...), wantErr: `shard "sh-3": shard exists`},
		{name: "a name twice", create: append(shardNames("p", 3), "p-1"), wantErr: `shard "p-1" is named twice`},
		{name: "a bad name", create: []string{"p-0", "bad/name-1"}, wantErr: "bad/name-1"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			e := open(t, createConfig(t.TempDir()))
			for _, n := range tc.existing {
				if err := e.CreateShard(ctx, n); err != nil {
					t.Fatal(err)
				}
			}
			err := e.CreateShards(ctx, tc.create)
			if tc.wantErr == "" {
				if err != nil {
					t.Fatalf("CreateShards: %v", err)
				}
				got, _ := e.Shards(ctx)
				want := slices.Sorted(slices.Values(tc.create))
				if !slices.Equal(got, want) {
					t.Fatalf("Shards after CreateShards: %v, want %v", got, want)
				}
				e = checkCreated(t, e, tc.create)
				// Ids of shared shards are distinct: each reads back only its
				// own records (checkCreated), and a second batch continues them.
				more := shardNames("sh2", 3)
				if err := e.CreateShards(ctx, more); err != nil {
					t.Fatal(err)
				}
				checkCreated(t, e, more)
				return
			}
			if err == nil || !strings.Contains(err.Error(), tc.wantErr) {
				t.Fatalf("CreateShards: %v; want an error containing %q", err, tc.wantErr)
			}
			if strings.Contains(tc.wantErr, "exists") && !errors.Is(err, store.ErrShardExists) {
				t.Fatalf("CreateShards: %v is not ErrShardExists", err)
			}
			// None is made, now or after a restart.
			cfg := e.cfg
			for round := 0; round < 2; round++ {
				got, _ := e.Shards(ctx)
				if !slices.Equal(got, slices.Sorted(slices.Values(tc.existing))) && !(len(got) == 0 && len(tc.existing) == 0) {
					t.Fatalf("round %d: Shards after a refused CreateShards: %v, want only %v", round, got, tc.existing)
				}
				e.Close()
				e = open(t, cfg)
			}
		})
	}
}

// A batch of shards is spread evenly over the I/O workers, as shards made
// one by one are.
func TestCreateShardsSpreadsOverWorkers(t *testing.T) {
	e := open(t, testConfig(t.TempDir()))
	if err := e.CreateShards(ctx, shardNames("p", 4*5)); err != nil {
		t.Fatal(err)
	}
	for i, w := range e.workers {
		if w.shards != 5 {
			t.Errorf("worker %d has %d shards; want 5 each (20 over 4 workers)", i, w.shards)
		}
	}
}

// createSteps are the crash points of a shard's creation, in order.
var createSteps = []string{"create:manifest", "create:mkdir", "create:files", "create:segment"}

// createChild runs in a child process: it makes a batch of shards of both
// models, killing itself with SIGKILL at the step named.
func createChild(dir, step string) {
	dieAt(step)
	e, err := Open(createConfig(dir))
	if err == nil {
		err = e.CreateShards(ctx, crashBatch)
	}
	fmt.Fprintln(os.Stderr, "the child finished without reaching", step, err)
	os.Exit(3)
}

var crashBatch = append(shardNames("p", 25), shardNames("sh", 25)...)

// Kill the process at every step of a batched create: after a restart all
// of the batch's shards are there, empty, taking appends that last through
// another restart (the manifest commit comes first, so a crash after it
// leaves every shard for recovery to finish), and the shard that was there
// before is untouched.
func TestCreateShardsCrashAtEveryStep(t *testing.T) {
	for _, step := range createSteps {
		t.Run(step, func(t *testing.T) {
			dir := t.TempDir()
			e := open(t, createConfig(dir))
			old := fill(t, e, "old-0", 20)
			e.Close()
			runKilled(t, "STRATA_CREATE_DIR="+dir, "STRATA_CREATE_STEP="+step)
			e = open(t, createConfig(dir))
			got, _ := e.Shards(ctx)
			want := slices.Sorted(slices.Values(append([]string{"old-0"}, crashBatch...)))
			if !slices.Equal(got, want) {
				t.Fatalf("after a crash at %s the shards are %v; want old-0 and the whole batch", step, got)
			}
			storetest.Equal(t, storetest.ReadAll(t, e, "old-0", 0), old)
			e = checkCreated(t, e, crashBatch)
			storetest.Equal(t, storetest.ReadAll(t, e, "old-0", 0), old)
		})
	}
}

// holdAt stops a create at step until the returned release is called;
// reached is closed when it gets there.
func holdAt(t *testing.T, step string) (reached chan struct{}, release func()) {
	reached, gate := make(chan struct{}), make(chan struct{})
	crashPoint = func(at string) {
		if at == step {
			close(reached)
			<-gate
		}
	}
	var once sync.Once
	release = func() { once.Do(func() { close(gate) }) }
	t.Cleanup(func() { release(); crashPoint = func(string) {} })
	return reached, release
}

// While a batch makes its files, the engine serves its other shards
// (appends, reads); the batch's names are taken (ErrShardExists) but not
// yet served; a Close waits for the batch, which then fails, and the
// next start has all of it.
func TestCreateShardsWhileServing(t *testing.T) {
	for _, then := range []string{"finish", "close"} {
		t.Run(then, func(t *testing.T) {
			cfg := createConfig(t.TempDir())
			e := open(t, cfg)
			old := fill(t, e, "other-0", 5)
			reached, release := holdAt(t, "create:files")
			batch := append(shardNames("p", 8), shardNames("sh", 8)...)
			created := make(chan error, 1)
			go func() { created <- e.CreateShards(ctx, batch) }()
			select {
			case <-reached:
			case <-time.After(30 * time.Second):
				t.Fatal("the create never reached its files")
			}
			actx, cancel := context.WithTimeout(ctx, 10*time.Second)
			defer cancel()
			if base, err := e.Append(actx, "other-0", storetest.Records(1, 3)); err != nil || base != 5 {
				t.Fatalf("append to another shard during the create: base %d, %v", base, err)
			}
			storetest.Equal(t, storetest.ReadAll(t, e, "other-0", 0)[:5], old)
			if err := e.CreateShard(ctx, "p-3"); !errors.Is(err, store.ErrShardExists) {
				t.Fatalf("CreateShard of a name being created: %v; want ErrShardExists", err)
			}
			if got, _ := e.Shards(ctx); !slices.Equal(got, []string{"other-0"}) {
				t.Fatalf("Shards during the create: %v; want only other-0", got)
			}
			switch then {
			case "finish":
				release()
				if err := <-created; err != nil {
					t.Fatalf("CreateShards: %v", err)
				}
				checkCreated(t, e, batch)
			case "close":
				closed := make(chan error, 1)
				go func() { closed <- e.Close() }()
				select {
				case err := <-closed:
					t.Fatalf("Close returned (%v) while a create was making its files", err)
				case <-time.After(100 * time.Millisecond):
				}
				release()
				if err := <-created; !errors.Is(err, store.ErrClosed) {
					t.Fatalf("CreateShards across a Close: %v; want ErrClosed", err)
				}
				if err := <-closed; err != nil {
					t.Fatalf("Close: %v", err)
				}
				e = open(t, cfg)
				checkCreated(t, e, batch)
			}
		})
	}
}

// A create that fails once its shards are in the manifest (here: one
// shard's folder cannot be made) is undone: no shard of it is listed,
// now or after a restart, and the folders it made are gone, so a topic
// reported as not created does not come back at the next start.
func TestCreateShardsFailureIsUndone(t *testing.T) {
	dir := t.TempDir()
	cfg := createConfig(dir)
	names := append(shardNames("p", 8), shardNames("sh", 4)...)
	cfg.FS = errorfs.Wrap(vfs.Default, errorfs.InjectorFunc(func(op errorfs.Op, path string) error {
		if op == errorfs.OpMkdirAll && filepath.Base(path) == "p-5" {
			return errorfs.ErrInjected
		}
		return nil
	}))
	e := open(t, cfg)
	if err := e.CreateShard(ctx, "kept-0"); err != nil {
		t.Fatal(err)
	}
	if err := e.CreateShards(ctx, names); !errors.Is(err, errorfs.ErrInjected) {
		t.Fatalf("CreateShards with p-5's folder refused: %v; want the injected error", err)
	}
	for round := 0; round < 2; round++ {
		got, _ := e.Shards(ctx)
		if !slices.Equal(got, []string{"kept-0"}) {
			t.Fatalf("round %d: Shards after a failed CreateShards: %v, want only kept-0", round, got)
		}
		for _, n := range names {
			if _, err := os.Stat(filepath.Join(dir, n)); !errors.Is(err, os.ErrNotExist) {
				t.Fatalf("round %d: the folder of %s, of the failed create: %v; want none", round, n, err)
			}
		}
		e.Close()
		cfg.FS = vfs.Default
		e = open(t, cfg)
	}
	// The names are free again.
	if err := e.CreateShards(ctx, names); err != nil {
		t.Fatal(err)
	}
	checkCreated(t, e, names)
}
