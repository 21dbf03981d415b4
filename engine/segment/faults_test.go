package segment

import (
	"errors"
	"fmt"
	"path/filepath"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/cockroachdb/pebble/vfs"
	"github.com/cockroachdb/pebble/vfs/errorfs"

	"strata/engine/record"
	"strata/engine/store/storetest"
)

// faultWorkload is what TestFaultAtEveryOperation fails at each step of:
// creating a shard, appends under fsync=batch that roll by size, a roll by
// RollAt, more appends and a close. It stops at the first error and says
// which appends were acknowledged, and which one failed.
type faultWorkload struct {
	acked  [][]record.Record // acknowledged appends, in order, offsets set
	failed []record.Record   // the append that failed, if one did
	err    error             // the first error
}

func runFaultWorkload(t *testing.T, e *Engine) (w faultWorkload) {
	t.Helper()
	defer func() {
		if err := e.Close(); err != nil && w.err == nil {
			w.err = err
		}
	}()
	if w.err = e.CreateShard(ctx, "s-0"); w.err != nil {
		return w
	}
	next := uint64(0)
	appendOne := func(n int) bool {
		recs := make([]record.Record, 3)
		for i := range recs {
			recs[i] = record.Record{Key: []byte(fmt.Sprintf("k%d", n)), Value: []byte(fmt.Sprintf("append-%d-record-%d", n, i)), Timestamp: int64(1000 * n)}
		}
		base, err := e.Append(ctx, "s-0", append([]record.Record(nil), recs...))
		if err != nil {
			w.err, w.failed = err, recs
			return false
		}
		if base != next {
			t.Fatalf("append %d acknowledged at offset %d, want %d", n, base, next)
		}
		for i := range recs {
			recs[i].Offset = base + uint64(i)
		}
		next += uint64(len(recs))
		w.acked = append(w.acked, recs)
		return true
	}
	for n := 0; n < 6; n++ {
		if !appendOne(n) {
			return w
		}
	}
	if w.err = e.RollAt(ctx, "s-0", next); w.err != nil {
		return w
	}
	for n := 6; n < 8; n++ {
		if !appendOne(n) {
			return w
		}
	}
	return w
}

// faultEligible says which operations TestFaultAtEveryOperation fails: the
// engine's own write-side operations (creates, writes, fsyncs including a
// directory's, mkdir, rename, removes). The Pebble databases' operations
// are left alone: Pebble treats a failed WAL write or sync as fatal
// (Logger.Fatalf, a panic here), which is a crash the kill tests cover.
func faultEligible(root string, op errorfs.Op, path string) bool {
	if rel, err := filepath.Rel(root, path); err == nil {
		first, _, _ := strings.Cut(rel, string(filepath.Separator))
		if first == "index" || first == "manifest" {
			return false
		}
	}
	return op.OpKind() == errorfs.OpKindWrite && op != errorfs.OpFileClose && op != errorfs.OpLock
}

// A failure injected at each write-side operation of the workload in turn
// (errorfs): after it, the engine reopened on the real files holds every
// acknowledged append, at its offsets, and of the append that failed either
// all records or none; and it takes appends again.
func TestFaultAtEveryOperation(t *testing.T) { faultAtEveryOperation(t, "") }

// The same with the shard in the shared files, 600-byte files: the
// workload's commits, file seals and new files fail in turn.
func TestSharedFaultAtEveryOperation(t *testing.T) { faultAtEveryOperation(t, ModelShared) }

func faultAtEveryOperation(t *testing.T, model string) {
	cfg := func(dir string, fs vfs.FS) Config {
		c := testConfig(dir)
		c.Workers, c.FS, c.MaxSegmentBytes, c.RollCheckInterval, c.IndexInterval = 1, fs, 400, 1, 2
		if model == ModelShared {
			c.FileModel = func(string) string { return ModelShared }
			c.SharedFileBytes = 600
		}
		return c
	}
	// A run without a failure counts the operations.
	dir := t.TempDir()
	var ops atomic.Int32
	counting := errorfs.Wrap(vfs.Default, errorfs.InjectorFunc(func(op errorfs.Op, path string) error {
		if faultEligible(dir, op, path) {
			ops.Add(1)
		}
		return nil
	}))
	e := open(t, cfg(dir, counting))
	ops.Store(0) // from after the open
	if w := runFaultWorkload(t, e); w.err != nil || len(w.acked) != 8 {
		t.Fatalf("the workload without a failure: %d appends acknowledged, %v", len(w.acked), w.err)
	}
	total := int(ops.Load())
	if total < 20 {
		t.Fatalf("the workload made %d write-side operations; expected more (creates, rolls, writes, fsyncs)", total)
	}
	start := time.Now()
	for i := 0; i < total; i++ {
		t.Run(fmt.Sprint(i), func(t *testing.T) {
			dir := t.TempDir()
			var armed atomic.Bool
			var failedOp atomic.Value
			at := errorfs.OnIndex(int32(i))
			faulty := errorfs.Wrap(vfs.Default, errorfs.InjectorFunc(func(op errorfs.Op, path string) error {
				if !armed.Load() || !faultEligible(dir, op, path) {
					return nil
				}
				err := at.MaybeError(op, path)
				if err != nil {
					rel, _ := filepath.Rel(dir, path)
					failedOp.Store(opName(op) + " " + rel)
				}
				return err
			}))
			e := open(t, cfg(dir, faulty))
			armed.Store(true)
			w := runFaultWorkload(t, e)
			what, _ := failedOp.Load().(string)
			if what == "" {
				t.Fatalf("no operation failed (the workload's operations changed?)")
			}
			if w.err != nil && !errors.Is(w.err, errorfs.ErrInjected) {
				t.Fatalf("failing %s: the workload failed with %v, not the injected error", what, w.err)
			}
			t.Logf("failed %s: %d appends acknowledged, then %v", what, len(w.acked), w.err)

			e = open(t, cfg(dir, vfs.Default))
			defer e.Close()
			var want []record.Record
			for _, a := range w.acked {
				want = append(want, a...)
			}
			names, _ := e.Shards(ctx)
			if len(names) == 0 {
				if len(want) > 0 {
					t.Fatalf("failing %s: the shard is gone after a reopen, with %d acknowledged records", what, len(want))
				}
				if err := e.CreateShard(ctx, "s-0"); err != nil {
					t.Fatalf("failing %s: creating the shard after a reopen: %v", what, err)
				}
			}
			got := storetest.ReadAll(t, e, "s-0", 0)
			if len(got) > len(want) {
				// Only the failed append may follow, and wholly.
				extra := append([]record.Record(nil), w.failed...)
				for j := range extra {
					extra[j].Offset = uint64(len(want) + j)
				}
				if len(got) != len(want)+len(extra) {
					t.Fatalf("failing %s: %d records after a reopen; %d acknowledged, and the failed append had %d: part of it is there",
						what, len(got), len(want), len(w.failed))
				}
				want = append(want, extra...)
			}
			storetest.Equal(t, got, want)
			base, err := e.Append(ctx, "s-0", storetest.Records(2, 5))
			if err != nil || base != uint64(len(got)) {
				t.Fatalf("failing %s: an append after a reopen: base %d, %v; want %d", what, base, err, len(got))
			}
		})
	}
	t.Logf("%d operations failed in turn in %v", total, time.Since(start))
}

func opName(op errorfs.Op) string {
	switch op {
	case errorfs.OpCreate:
		return "create"
	case errorfs.OpRemove:
		return "remove"
	case errorfs.OpRemoveAll:
		return "remove-all"
	case errorfs.OpRename:
		return "rename"
	case errorfs.OpMkdirAll:
		return "mkdir"
	case errorfs.OpFileWrite:
		return "write"
	case errorfs.OpFileWriteAt:
		return "write-at"
	case errorfs.OpFileSync:
		return "sync"
	}
	return fmt.Sprintf("op %d", op)
}
