package storetest

import (
	"errors"
	"reflect"
	"strings"
	"testing"

	"strata/engine/store"
)

// The leader-epoch history (store.Epochs): Assign's rules, and the history
// following the log through truncation, retention, deletion and a restart.
func epochsTests(opts Options) []contractCase {
	tests := []contractCase{
		{"Epochs/AssignRules", testAssignRules},
		{"Epochs/TruncateToDropsLaterEpochs", testEpochsTruncate},
		{"Epochs/DeleteBeforeTrimsFromStart", testEpochsDeleteBefore},
		{"Epochs/DeleteShardRemovesThem", testEpochsDeleteShard},
		{"Epochs/ShardMadeAtAStart", testEpochsStarter},
	}
	if opts.Reopen != nil {
		tests = append(tests, contractCase{"Epochs/SurvivesReopen", func(t *testing.T, s store.Store) { testEpochsReopen(t, s, opts.Reopen) }})
	}
	return tests
}

func epochs(t *testing.T, s store.Store) store.Epochs {
	t.Helper()
	e, ok := s.(store.Epochs)
	if !ok {
		t.Fatalf("%T does not implement store.Epochs", s)
	}
	return e
}

func ep(epoch int32, start uint64) store.EpochEntry {
	return store.EpochEntry{Epoch: epoch, Start: start}
}

func mustAssign(t *testing.T, s store.Store, shard string, epoch int32, start uint64) {
	t.Helper()
	if err := epochs(t, s).AssignEpoch(ctx, shard, epoch, start); err != nil {
		t.Fatalf("AssignEpoch(%s, %d, %d): %v", shard, epoch, start, err)
	}
}

// history checks a shard's history (nil: none).
func history(t *testing.T, s store.Store, shard string, want ...store.EpochEntry) {
	t.Helper()
	got, err := epochs(t, s).LeaderEpochs(ctx, shard)
	if err != nil || !reflect.DeepEqual(got, want) {
		t.Fatalf("LeaderEpochs(%s) = %v, %v; want %v", shard, got, err, want)
	}
}

func testAssignRules(t *testing.T, s store.Store) {
	mustCreate(t, s, "ep-0")
	history(t, s, "ep-0")
	if _, err := epochs(t, s).LeaderEpochs(ctx, "nope-0"); !errors.Is(err, store.ErrUnknownShard) {
		t.Fatalf("LeaderEpochs of an unknown shard: %v, want ErrUnknownShard", err)
	}
	if err := epochs(t, s).AssignEpoch(ctx, "nope-0", 1, 0); !errors.Is(err, store.ErrUnknownShard) {
		t.Fatalf("AssignEpoch on an unknown shard: %v, want ErrUnknownShard", err)
	}
	mustAssign(t, s, "ep-0", 1, 0)
	mustAppend(t, s, "ep-0", Records(5, 30))
	mustAssign(t, s, "ep-0", 3, 5)
	mustAppend(t, s, "ep-0", Records(3, 31))
	for _, tc := range []struct {
		name  string
		epoch int32
		start uint64
		is    error  // nil: accepted
		says  string // the error names both epochs or offsets
		want  []store.EpochEntry
	}{
		{"the same epoch later is a no-op", 3, 8, nil, "", []store.EpochEntry{ep(1, 0), ep(3, 5)}},
		{"an older epoch", 2, 8, store.ErrEpochOrder, "epoch 2 at offset 8: older than the latest epoch 3", nil},
		{"the same epoch earlier", 3, 4, store.ErrEpochOrder, "epoch 3 at offset 4: the epoch already starts at 5", nil},
		{"a newer epoch before the latest start", 4, 4, store.ErrEpochOrder, "epoch 4 at offset 4: before epoch 3's start 5", nil},
		{"past the log end", 4, 9, store.ErrPastLogEnd, "leader epoch 4 at offset 9 refused: the log ends at 8", nil},
		{"a negative epoch", -1, 8, nil, "the epoch must be >= 0", nil},
		{"a newer epoch at the log end", 4, 8, nil, "", []store.EpochEntry{ep(1, 0), ep(3, 5), ep(4, 8)}},
		{"a newer epoch at the latest start replaces it", 6, 8, nil, "", []store.EpochEntry{ep(1, 0), ep(3, 5), ep(6, 8)}},
	} {
		err := epochs(t, s).AssignEpoch(ctx, "ep-0", tc.epoch, tc.start)
		if tc.says == "" {
			if err != nil {
				t.Fatalf("%s: AssignEpoch(%d, %d): %v", tc.name, tc.epoch, tc.start, err)
			}
			history(t, s, "ep-0", tc.want...)
			continue
		}
		if err == nil || (tc.is != nil && !errors.Is(err, tc.is)) || !strings.Contains(err.Error(), tc.says) || !strings.Contains(err.Error(), "ep-0") {
			t.Fatalf("%s: AssignEpoch(%d, %d) = %v; want an error naming the shard and saying %q (%v)", tc.name, tc.epoch, tc.start, err, tc.says, tc.is)
		}
	}
	history(t, s, "ep-0", ep(1, 0), ep(3, 5), ep(6, 8))
}

func testEpochsTruncate(t *testing.T, s store.Store) {
	mustCreate(t, s, "et-0")
	mustSetHW(t, s, "et-0", 0)
	mustAssign(t, s, "et-0", 1, 0)
	mustAppend(t, s, "et-0", Records(5, 32))
	mustAssign(t, s, "et-0", 2, 5)
	mustAppend(t, s, "et-0", Records(5, 33))
	mustAssign(t, s, "et-0", 4, 10) // a leader that wrote nothing yet
	mustSetHW(t, s, "et-0", 3)
	for _, tc := range []struct {
		end  uint64
		want []store.EpochEntry
		log  uint64
	}{
		{12, []store.EpochEntry{ep(1, 0), ep(2, 5), ep(4, 10)}, 10}, // past the log end: nothing changes
		{10, []store.EpochEntry{ep(1, 0), ep(2, 5)}, 10},            // no record cut, the entry at the end goes
		{7, []store.EpochEntry{ep(1, 0), ep(2, 5)}, 7},
		{5, []store.EpochEntry{ep(1, 0)}, 5},
		{3, []store.EpochEntry{ep(1, 0)}, 3},
	} {
		mustTruncate(t, s, "et-0", tc.end)
		history(t, s, "et-0", tc.want...)
		marks(t, s, "et-0", 0, 3, tc.log)
	}
	// The history goes on from the cut.
	mustAssign(t, s, "et-0", 5, 3)
	mustAppend(t, s, "et-0", Records(2, 34))
	history(t, s, "et-0", ep(1, 0), ep(5, 3))
	if err := replica(t, s).TruncateTo(ctx, "et-0", 2); !errors.Is(err, store.ErrCommitted) {
		t.Fatalf("TruncateTo below the high watermark: %v", err)
	}
	history(t, s, "et-0", ep(1, 0), ep(5, 3))
}

func testEpochsDeleteBefore(t *testing.T, s store.Store) {
	mustCreate(t, s, "ed-0")
	mustAssign(t, s, "ed-0", 1, 0)
	mustAppend(t, s, "ed-0", Records(4, 35))
	mustAssign(t, s, "ed-0", 2, 4)
	mustAppend(t, s, "ed-0", Records(4, 36))
	mustAssign(t, s, "ed-0", 7, 8)
	mustAppend(t, s, "ed-0", Records(4, 37))
	for _, tc := range []struct {
		low  uint64
		want []store.EpochEntry
	}{
		{2, []store.EpochEntry{ep(1, 2), ep(2, 4), ep(7, 8)}}, // the epoch covering the low watermark is kept
		{4, []store.EpochEntry{ep(2, 4), ep(7, 8)}},
		{9, []store.EpochEntry{ep(7, 9)}},
		{12, []store.EpochEntry{ep(7, 12)}}, // nothing left: the latest epoch still answers
	} {
		if err := s.DeleteBefore(ctx, "ed-0", tc.low); err != nil {
			t.Fatal(err)
		}
		history(t, s, "ed-0", tc.want...)
	}
	mustAssign(t, s, "ed-0", 8, 12)
	history(t, s, "ed-0", ep(8, 12)) // epoch 7 wrote nothing still kept: replaced
}

func testEpochsDeleteShard(t *testing.T, s store.Store) {
	mustCreate(t, s, "ex-0")
	mustAssign(t, s, "ex-0", 3, 0)
	mustAppend(t, s, "ex-0", Records(2, 38))
	mustAssign(t, s, "ex-0", 4, 2)
	if err := s.DeleteShard(ctx, "ex-0"); err != nil {
		t.Fatal(err)
	}
	if _, err := epochs(t, s).LeaderEpochs(ctx, "ex-0"); !errors.Is(err, store.ErrUnknownShard) {
		t.Fatalf("LeaderEpochs of a deleted shard: %v, want ErrUnknownShard", err)
	}
	mustCreate(t, s, "ex-0")
	history(t, s, "ex-0")
	mustAssign(t, s, "ex-0", 1, 0) // an epoch older than the deleted shard's
	history(t, s, "ex-0", ep(1, 0))
}

func testEpochsStarter(t *testing.T, s store.Store) {
	mustCreateAt(t, s, "es-0", 100)
	history(t, s, "es-0")
	if err := epochs(t, s).AssignEpoch(ctx, "es-0", 1, 101); !errors.Is(err, store.ErrPastLogEnd) {
		t.Fatalf("AssignEpoch past a new shard's start: %v, want ErrPastLogEnd", err)
	}
	mustAssign(t, s, "es-0", 2, 100)
	mustAppend(t, s, "es-0", Records(3, 39))
	history(t, s, "es-0", ep(2, 100))
}

func testEpochsReopen(t *testing.T, s store.Store, reopen func(*testing.T, store.Store) store.Store) {
	mustCreate(t, s, "er-0")
	mustSetHW(t, s, "er-0", 0)
	mustAssign(t, s, "er-0", 1, 0)
	mustAppend(t, s, "er-0", Records(4, 40))
	mustAssign(t, s, "er-0", 2, 4)
	mustAppend(t, s, "er-0", Records(4, 41))
	mustAssign(t, s, "er-0", 3, 8)
	mustAppend(t, s, "er-0", Records(2, 42))
	mustTruncate(t, s, "er-0", 8)
	mustAssign(t, s, "er-0", 4, 8) // at the log end, nothing written under it yet
	mustSetHW(t, s, "er-0", 4)
	if err := s.DeleteBefore(ctx, "er-0", 1); err != nil {
		t.Fatal(err)
	}
	mustCreate(t, s, "none-0")
	mustAppend(t, s, "none-0", Records(2, 43))

	s = reopen(t, s)
	t.Cleanup(func() { s.Close() })
	history(t, s, "er-0", ep(1, 1), ep(2, 4), ep(4, 8))
	history(t, s, "none-0")
	mustAssign(t, s, "er-0", 4, 8)
	if err := epochs(t, s).AssignEpoch(ctx, "er-0", 3, 8); !errors.Is(err, store.ErrEpochOrder) {
		t.Fatalf("after reopen, an older epoch: %v, want ErrEpochOrder", err)
	}
	mustAppend(t, s, "er-0", Records(1, 44))
	mustAssign(t, s, "er-0", 5, 9)
	history(t, s, "er-0", ep(1, 1), ep(2, 4), ep(4, 8), ep(5, 9))
}
