package segment

import (
	"fmt"
	"os"
	"path/filepath"
	"reflect"
	"strings"
	"syscall"
	"testing"

	"strata/engine/store"
)

// epochsChild builds a shard with the history 1@0 2@10 and 15 records,
// then changes the history (step "assign-…": AssignEpoch(3, 15); step
// "truncate-…": TruncateTo(10)) and dies by SIGKILL at the point the step
// names: "…-synced" after the temp file is synced, before the rename;
// "…-renamed" after the rename, before the folder's sync.
func epochsChild(dir, step string) {
	action, at, _ := strings.Cut(step, "-")
	crashPoint = func(p string) {
		if p == "epochs:"+at {
			syscall.Kill(os.Getpid(), syscall.SIGKILL)
			select {}
		}
	}
	e, err := Open(truncateConfig(dir))
	must := func(err error) {
		if err != nil {
			fmt.Fprintln(os.Stderr, err)
			os.Exit(1)
		}
	}
	must(err)
	armed := crashPoint
	crashPoint = func(string) {}
	must(e.CreateShard(ctx, "ep-0"))
	must(e.SetHighWatermark(ctx, "ep-0", 0))
	must(e.AssignEpoch(ctx, "ep-0", 1, 0))
	must(e.AppendAt(ctx, "ep-0", replicaRecords(10, 0, "a", 0)))
	must(e.AssignEpoch(ctx, "ep-0", 2, 10))
	must(e.AppendAt(ctx, "ep-0", replicaRecords(5, 10, "b", 50_000)))
	crashPoint = armed
	switch action {
	case "assign":
		must(e.AssignEpoch(ctx, "ep-0", 3, 15))
	case "truncate":
		must(e.TruncateTo(ctx, "ep-0", 10))
	}
	fmt.Fprintln(os.Stderr, "the crash point was not reached")
	os.Exit(1)
}

// A crash while the history is rewritten leaves the old history or the new
// one, never a torn file; a truncation's history is cut before its log, so
// a crash in between leaves no entry for records that are gone, and the
// repeated TruncateTo finishes the cut.
func TestEpochsSurviveCrash(t *testing.T) {
	old := []store.EpochEntry{{Epoch: 1, Start: 0}, {Epoch: 2, Start: 10}}
	for _, tc := range []struct {
		step    string
		want    []store.EpochEntry
		logEnd  uint64
		tmpGone bool
	}{
		{"assign-synced", old, 15, true},
		{"assign-renamed", append(old[:2:2], store.EpochEntry{Epoch: 3, Start: 15}), 15, true},
		{"truncate-synced", old, 15, true},
		{"truncate-renamed", old[:1], 15, true},
	} {
		t.Run(tc.step, func(t *testing.T) {
			dir := t.TempDir()
			runKilled(t, "STRATA_EPOCHS_DIR="+dir, "STRATA_EPOCHS_STEP="+tc.step)
			e := open(t, truncateConfig(dir))
			defer e.Close()
			got, err := e.LeaderEpochs(ctx, "ep-0")
			if err != nil || !reflect.DeepEqual(got, tc.want) {
				t.Fatalf("after the crash the history is %v, %v; want %v", got, err, tc.want)
			}
			if end, _ := e.LogEnd(ctx, "ep-0"); end != tc.logEnd {
				t.Fatalf("after the crash the log ends at %d, want %d", end, tc.logEnd)
			}
			if _, err := os.Stat(filepath.Join(dir, "ep-0", epochsTmpFile)); !os.IsNotExist(err) {
				t.Fatalf("the temp file is left after recovery: %v", err)
			}
			// What the interrupted call did, done again, lands where it
			// would have without the crash.
			if strings.HasPrefix(tc.step, "truncate") {
				if err := e.TruncateTo(ctx, "ep-0", 10); err != nil {
					t.Fatal(err)
				}
				if got, _ := e.LeaderEpochs(ctx, "ep-0"); !reflect.DeepEqual(got, old[:1]) {
					t.Fatalf("truncated again: history %v, want %v", got, old[:1])
				}
				if end, _ := e.LogEnd(ctx, "ep-0"); end != 10 {
					t.Fatalf("truncated again: log end %d, want 10", end)
				}
				return
			}
			if err := e.AssignEpoch(ctx, "ep-0", 3, 15); err != nil {
				t.Fatal(err)
			}
			if got, _ := e.LeaderEpochs(ctx, "ep-0"); !reflect.DeepEqual(got, append(old[:2:2], store.EpochEntry{Epoch: 3, Start: 15})) {
				t.Fatalf("assigned again: history %v", got)
			}
		})
	}
}

// A damaged history file reads as no history (with a warning), not as a
// shard that cannot start; entries past a recovered log end are dropped.
func TestDamagedEpochsFile(t *testing.T) {
	cfg := testConfig(t.TempDir())
	e := open(t, cfg)
	for _, shard := range []string{"d-0", "p-0"} {
		if err := e.CreateShard(ctx, shard); err != nil {
			t.Fatal(err)
		}
		if err := e.AssignEpoch(ctx, shard, 1, 0); err != nil {
			t.Fatal(err)
		}
		if _, err := e.Append(ctx, shard, replicaRecords(4, 0, "k", 0)); err != nil {
			t.Fatal(err)
		}
	}
	if err := e.AssignEpoch(ctx, "p-0", 2, 4); err != nil {
		t.Fatal(err)
	}
	e.Close()
	if err := os.WriteFile(filepath.Join(cfg.Dir, "d-0", epochsFile), []byte("SLEH garbage"), 0o644); err != nil {
		t.Fatal(err)
	}
	// p-0's history says epoch 2 starts at 4; a log cut back to 3 (records
	// an fsync interval lost) leaves that entry past the log end.
	f := filepath.Join(cfg.Dir, "p-0", "0.msg")
	b, err := os.ReadFile(f)
	if err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(f, b[:len(b)*3/4], 0o644); err != nil {
		t.Fatal(err)
	}
	e = open(t, cfg)
	defer e.Close()
	if got, err := e.LeaderEpochs(ctx, "d-0"); err != nil || got != nil {
		t.Fatalf("with a damaged file: history %v, %v; want none", got, err)
	}
	if err := e.AssignEpoch(ctx, "d-0", 5, 4); err != nil {
		t.Fatalf("AssignEpoch after a damaged file: %v", err)
	}
	end, _ := e.LogEnd(ctx, "p-0")
	if got, _ := e.LeaderEpochs(ctx, "p-0"); end >= 4 || !reflect.DeepEqual(got, []store.EpochEntry{{Epoch: 1, Start: 0}}) {
		t.Fatalf("log end %d, history %v; want below 4 and only epoch 1", end, got)
	}
}
