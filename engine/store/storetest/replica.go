package storetest

import (
	"errors"
	"fmt"
	"reflect"
	"strings"
	"testing"

	"strata/engine/record"
	"strata/engine/store"
)

// The replication seam (store.Replica): log end vs high watermark, and
// truncation of a diverged suffix. Every engine implements it.
func replicaTests(opts Options) []contractCase {
	tests := []contractCase{
		{"Replica/HighWatermarkFollowsLogEndUntilManaged", testHighWatermarkFollows},
		{"Replica/ReadersNeverSeePastHighWatermark", testReadersStopAtHighWatermark},
		{"Replica/HighWatermarkNeverMovesBack", testHighWatermarkNeverMovesBack},
		{"Replica/TruncateBelowHighWatermarkIsRefused", testTruncateCommittedRefused},
		{"Replica/TruncateThenAppendContinuesAtNewEnd", testTruncateThenAppend},
	}
	if opts.Reopen != nil {
		tests = append(tests, contractCase{"Replica/SurvivesReopen", func(t *testing.T, s store.Store) { testReplicaReopen(t, s, opts.Reopen) }})
	}
	return tests
}

func replica(t *testing.T, s store.Store) store.Replica {
	t.Helper()
	r, ok := s.(store.Replica)
	if !ok {
		t.Fatalf("%T does not implement store.Replica", s)
	}
	return r
}

// marks checks a shard's low watermark, high watermark and log end.
func marks(t *testing.T, s store.Store, shard string, low, hw, end uint64) {
	t.Helper()
	l, h, err := s.Watermarks(ctx, shard)
	if err != nil || l != low || h != hw {
		t.Fatalf("Watermarks(%s) = %d, %d, %v; want %d, %d", shard, l, h, err, low, hw)
	}
	if e, err := replica(t, s).LogEnd(ctx, shard); err != nil || e != end {
		t.Fatalf("LogEnd(%s) = %d, %v; want %d", shard, e, err, end)
	}
}

func mustSetHW(t *testing.T, s store.Store, shard string, hw uint64) {
	t.Helper()
	if err := replica(t, s).SetHighWatermark(ctx, shard, hw); err != nil {
		t.Fatalf("SetHighWatermark(%s, %d): %v", shard, hw, err)
	}
}

func mustTruncate(t *testing.T, s store.Store, shard string, end uint64) {
	t.Helper()
	if err := replica(t, s).TruncateTo(ctx, shard, end); err != nil {
		t.Fatalf("TruncateTo(%s, %d): %v", shard, end, err)
	}
}

// readToEnd reads every record from the low watermark up to the log end.
func readToEnd(t *testing.T, s store.Store, shard string) []record.Record {
	t.Helper()
	from, _, err := s.Watermarks(ctx, shard)
	if err != nil {
		t.Fatalf("Watermarks(%s): %v", shard, err)
	}
	var out []record.Record
	for {
		recs, err := replica(t, s).ReadToLogEnd(ctx, shard, from, store.Budget{MaxRecords: 3})
		if err != nil {
			t.Fatalf("ReadToLogEnd(%s, %d): %v", shard, from, err)
		}
		if len(recs) == 0 {
			return out
		}
		out = append(out, recs...)
		from = recs[len(recs)-1].Offset + 1
	}
}

func offsetsOf(recs []record.Record) []uint64 {
	out := []uint64{}
	for _, r := range recs {
		out = append(out, r.Offset)
	}
	return out
}

func span(from, to uint64) []uint64 {
	out := []uint64{}
	for o := from; o < to; o++ {
		out = append(out, o)
	}
	return out
}

// stamped makes n records from offset at with the given key and
// timestamps ts0, ts0+step, ...
func stamped(n int, at uint64, key string, ts0, step int64) []record.Record {
	out := make([]record.Record, n)
	for i := range out {
		out[i] = record.Record{Offset: at + uint64(i), Timestamp: ts0 + int64(i)*step, Key: []byte(key),
			Value: []byte(fmt.Sprintf("%s %d", key, i)), Tags: []string{"t-" + key}}
	}
	return out
}

func testHighWatermarkFollows(t *testing.T, s store.Store) {
	r := replica(t, s)
	mustCreate(t, s, "f-0")
	mustAppend(t, s, "f-0", Records(5, 10))
	marks(t, s, "f-0", 0, 5, 5)
	if err := r.AppendAt(ctx, "f-0", stamped(3, 5, "k", 1000, 1)); err != nil {
		t.Fatal(err)
	}
	marks(t, s, "f-0", 0, 8, 8)
	if err := r.AppendAt(ctx, "f-0", stamped(2, 9, "k", 1000, 1)); err == nil || !strings.Contains(err.Error(), "next offset is 8") {
		t.Fatalf("AppendAt past the log end: %v; want an error naming the next offset", err)
	}
	gap := stamped(2, 8, "k", 1000, 1)
	gap[1].Offset = 10
	if err := r.AppendAt(ctx, "f-0", gap); err == nil {
		t.Fatal("AppendAt with a gap in its offsets succeeded")
	}
	marks(t, s, "f-0", 0, 8, 8)
	// Unmanaged, every record is committed: nothing can be cut.
	if err := r.TruncateTo(ctx, "f-0", 7); !errors.Is(err, store.ErrCommitted) {
		t.Fatalf("TruncateTo below an unmanaged high watermark: %v; want ErrCommitted", err)
	}
	mustTruncate(t, s, "f-0", 8)
	mustTruncate(t, s, "f-0", 100)
	marks(t, s, "f-0", 0, 8, 8)
	if got := len(ReadAll(t, s, "f-0", 0)); got != 8 {
		t.Fatalf("read %d records, want 8", got)
	}
}

func testReadersStopAtHighWatermark(t *testing.T, s store.Store) {
	r := replica(t, s)
	mustCreate(t, s, "h-0")
	mustSetHW(t, s, "h-0", 0) // managed from here on
	want := stamped(20, 0, "a", 1000, 1000)
	for i := range want {
		if i%2 == 1 {
			want[i].Key, want[i].Tags = []byte("b"), []string{"t-b"}
		}
	}
	mustAppend(t, s, "h-0", append([]record.Record(nil), want...))
	marks(t, s, "h-0", 0, 0, 20)
	if recs, err := s.Read(ctx, "h-0", 0, store.Budget{}); err != nil || len(recs) != 0 {
		t.Fatalf("Read at a high watermark of 0: %d records, %v; want none", len(recs), err)
	}
	mustSetHW(t, s, "h-0", 12)
	marks(t, s, "h-0", 0, 12, 20)
	var oor *store.OutOfRangeError
	for _, tc := range []struct {
		name string
		read func() ([]record.Record, error)
		want []uint64
	}{
		{"Read from 0", func() ([]record.Record, error) { return s.Read(ctx, "h-0", 0, store.Budget{}) }, span(0, 12)},
		{"Read at the high watermark", func() ([]record.Record, error) { return s.Read(ctx, "h-0", 12, store.Budget{}) }, span(0, 0)},
		{"ReadByKey", func() ([]record.Record, error) { return s.ReadByKey(ctx, "h-0", []byte("b"), 0, store.Budget{}) },
			[]uint64{1, 3, 5, 7, 9, 11}},
		{"ReadByTag", func() ([]record.Record, error) { return s.ReadByTag(ctx, "h-0", "t-a", 5, store.Budget{}) },
			[]uint64{6, 8, 10}},
		{"ReadToLogEnd sees past it", func() ([]record.Record, error) {
			return r.ReadToLogEnd(ctx, "h-0", 10, store.Budget{})
		}, span(10, 20)},
	} {
		recs, err := tc.read()
		if got := offsetsOf(recs); err != nil || !reflect.DeepEqual(got, tc.want) {
			t.Errorf("%s: offsets %v, %v; want %v", tc.name, got, err, tc.want)
		}
	}
	for _, tc := range []struct {
		ts   int64
		want uint64
	}{{0, 0}, {5000, 4}, {12000, 11}, {12001, 12}, {15000, 12}, {99000, 12}} {
		if got, err := s.OffsetForTime(ctx, "h-0", tc.ts); err != nil || got != tc.want {
			t.Errorf("OffsetForTime(%d) = %d, %v; want %d (none at or above the high watermark 12)", tc.ts, got, err, tc.want)
		}
	}
	if _, err := s.Read(ctx, "h-0", 13, store.Budget{}); !errors.As(err, &oor) || oor.High != 12 {
		t.Errorf("Read above the high watermark: %v; want an OutOfRangeError up to 12", err)
	}
	if _, err := r.ReadToLogEnd(ctx, "h-0", 21, store.Budget{}); !errors.As(err, &oor) || oor.High != 20 {
		t.Errorf("ReadToLogEnd above the log end: %v; want an OutOfRangeError up to 20", err)
	}
	if err := s.DeleteBefore(ctx, "h-0", 13); !errors.As(err, &oor) {
		t.Errorf("DeleteBefore past the high watermark: %v; want an OutOfRangeError", err)
	}
	// A managed high watermark stays where it is while the log grows.
	mustAppend(t, s, "h-0", stamped(3, 0, "c", 30000, 1))
	marks(t, s, "h-0", 0, 12, 23)
	mustSetHW(t, s, "h-0", 23)
	if got := offsetsOf(ReadAll(t, s, "h-0", 0)); !reflect.DeepEqual(got, span(0, 23)) {
		t.Errorf("after the high watermark reached the log end, Read gives %v", got)
	}
}

func testHighWatermarkNeverMovesBack(t *testing.T, s store.Store) {
	r := replica(t, s)
	// A shard whose high watermark followed its log end keeps it there.
	mustCreate(t, s, "m-0")
	mustAppend(t, s, "m-0", Records(5, 11))
	mustSetHW(t, s, "m-0", 2)
	marks(t, s, "m-0", 0, 5, 5)
	mustAppend(t, s, "m-0", Records(5, 12))
	marks(t, s, "m-0", 0, 5, 10) // managed now: the new records wait
	for _, tc := range []struct {
		set     uint64
		wantErr error
		hw      uint64
	}{
		{7, nil, 7},
		{3, nil, 7}, // back: ignored
		{7, nil, 7},
		{11, store.ErrPastLogEnd, 7},
		{10, nil, 10},
		{9, nil, 10},
	} {
		err := r.SetHighWatermark(ctx, "m-0", tc.set)
		if !errors.Is(err, tc.wantErr) || (err == nil) != (tc.wantErr == nil) {
			t.Fatalf("SetHighWatermark(%d): %v; want %v", tc.set, err, tc.wantErr)
		}
		if err != nil && !strings.Contains(err.Error(), "m-0") {
			t.Fatalf("SetHighWatermark(%d): %q does not name the shard", tc.set, err)
		}
		marks(t, s, "m-0", 0, tc.hw, 10)
	}
	if err := r.SetHighWatermark(ctx, "nope-0", 0); !errors.Is(err, store.ErrUnknownShard) {
		t.Fatalf("SetHighWatermark of an unknown shard: %v", err)
	}
}

func testTruncateCommittedRefused(t *testing.T, s store.Store) {
	r := replica(t, s)
	mustCreate(t, s, "c-0")
	mustSetHW(t, s, "c-0", 0)
	mustAppend(t, s, "c-0", Records(10, 13))
	mustSetHW(t, s, "c-0", 6)
	err := r.TruncateTo(ctx, "c-0", 5)
	if !errors.Is(err, store.ErrCommitted) {
		t.Fatalf("TruncateTo below the high watermark: %v; want ErrCommitted", err)
	}
	for _, part := range []string{"c-0", "offset 5", "high watermark is 6"} {
		if !strings.Contains(err.Error(), part) {
			t.Errorf("the refusal %q does not say %q", err, part)
		}
	}
	marks(t, s, "c-0", 0, 6, 10)
	if got := len(readToEnd(t, s, "c-0")); got != 10 {
		t.Fatalf("a refused truncation cut records: %d left", got)
	}
	if err := r.TruncateTo(ctx, "nope-0", 5); !errors.Is(err, store.ErrUnknownShard) {
		t.Fatalf("TruncateTo of an unknown shard: %v", err)
	}
}

func testTruncateThenAppend(t *testing.T, s store.Store) {
	r := replica(t, s)
	mustCreate(t, s, "x-0")
	mustSetHW(t, s, "x-0", 0)
	// Offsets 0..9, one time bucket each; the leader's log diverges at 7.
	old := stamped(10, 0, "a", 1000, 1000)
	if err := r.AppendAt(ctx, "x-0", append([]record.Record(nil), old...)); err != nil {
		t.Fatal(err)
	}
	mustSetHW(t, s, "x-0", 4)
	mustTruncate(t, s, "x-0", 7)
	marks(t, s, "x-0", 0, 4, 7)
	Equal(t, readToEnd(t, s, "x-0"), old[:7])
	// The new leader's records continue at 7, with later timestamps than
	// the records cut but a key and tag of their own.
	fresh := stamped(3, 7, "b", 10_000, 1)
	if base := mustAppend(t, s, "x-0", append([]record.Record(nil), fresh...)); base != 7 {
		t.Fatalf("after TruncateTo(7) the next base offset is %d", base)
	}
	more := stamped(2, 10, "b", 10_003, 1)
	if err := r.AppendAt(ctx, "x-0", append([]record.Record(nil), more...)); err != nil {
		t.Fatal(err)
	}
	mustSetHW(t, s, "x-0", 12)
	want := append(append(append([]record.Record(nil), old[:7]...), fresh...), more...)
	Equal(t, ReadAll(t, s, "x-0", 0), want)
	for _, tc := range []struct {
		name string
		read func() ([]record.Record, error)
		want []uint64
	}{
		{"ReadByKey a (the cut ones gone)", func() ([]record.Record, error) {
			return s.ReadByKey(ctx, "x-0", []byte("a"), 0, store.Budget{})
		}, span(0, 7)},
		{"ReadByKey b", func() ([]record.Record, error) { return s.ReadByKey(ctx, "x-0", []byte("b"), 0, store.Budget{}) }, span(7, 12)},
		{"ReadByTag t-a", func() ([]record.Record, error) { return s.ReadByTag(ctx, "x-0", "t-a", 5, store.Budget{}) }, span(5, 7)},
	} {
		recs, err := tc.read()
		if got := offsetsOf(recs); err != nil || !reflect.DeepEqual(got, tc.want) {
			t.Errorf("%s: offsets %v, %v; want %v", tc.name, got, err, tc.want)
		}
	}
	// The cut records' time entries (9000 at offset 9, say) must not send
	// the search past offset 7, the first at or after 9500 now.
	for _, tc := range []struct {
		ts   int64
		want uint64
	}{{7000, 6}, {7001, 7}, {9500, 7}, {10_001, 8}, {10_004, 11}, {10_005, 12}} {
		if got, err := s.OffsetForTime(ctx, "x-0", tc.ts); err != nil || got != tc.want {
			t.Errorf("OffsetForTime(%d) after truncation = %d, %v; want %d", tc.ts, got, err, tc.want)
		}
	}
	// Down to the high watermark, even when it is the low one: the whole
	// log, as a follower whose every record diverged.
	mustCreate(t, s, "y-0")
	mustSetHW(t, s, "y-0", 0)
	mustAppend(t, s, "y-0", Records(3, 14))
	mustTruncate(t, s, "y-0", 0)
	marks(t, s, "y-0", 0, 0, 0)
	if base := mustAppend(t, s, "y-0", Records(2, 15)); base != 0 {
		t.Fatalf("after TruncateTo(0) the next base offset is %d", base)
	}
	marks(t, s, "y-0", 0, 0, 2)
}

func testReplicaReopen(t *testing.T, s store.Store, reopen func(*testing.T, store.Store) store.Store) {
	mustCreate(t, s, "rp-0")
	mustSetHW(t, s, "rp-0", 0)
	old := stamped(10, 0, "a", 1000, 1000)
	mustAppend(t, s, "rp-0", append([]record.Record(nil), old...))
	mustSetHW(t, s, "rp-0", 4)
	mustTruncate(t, s, "rp-0", 7)
	fresh := stamped(2, 7, "b", 20_000, 1)
	mustAppend(t, s, "rp-0", append([]record.Record(nil), fresh...))
	mustCreate(t, s, "un-0") // never managed
	mustAppend(t, s, "un-0", Records(3, 16))

	s = reopen(t, s)
	t.Cleanup(func() { s.Close() })
	marks(t, s, "rp-0", 0, 4, 9)
	want := append(append([]record.Record(nil), old[:7]...), fresh...)
	Equal(t, readToEnd(t, s, "rp-0"), want)
	Equal(t, ReadAll(t, s, "rp-0", 0), want[:4])
	mustSetHW(t, s, "rp-0", 9)
	if got, _ := s.ReadByKey(ctx, "rp-0", []byte("a"), 0, store.Budget{}); !reflect.DeepEqual(offsetsOf(got), span(0, 7)) {
		t.Errorf("after reopen ReadByKey(a) = %v", offsetsOf(got))
	}
	if got, _ := s.OffsetForTime(ctx, "rp-0", 9500); got != 7 {
		t.Errorf("after reopen OffsetForTime(9500) = %d, want 7", got)
	}
	if base := mustAppend(t, s, "rp-0", stamped(1, 0, "c", 30_000, 1)); base != 9 {
		t.Fatalf("after reopen the next base offset is %d, want 9", base)
	}
	marks(t, s, "rp-0", 0, 9, 10) // still managed
	mustAppend(t, s, "un-0", Records(2, 17))
	marks(t, s, "un-0", 0, 5, 5) // still following the log end
}
