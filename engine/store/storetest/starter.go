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

// A shard that begins at an offset (store.Starter): the shard a node makes
// when it takes over a partition whose earlier offsets another node holds.
// Every engine implements it.
func starterTests(opts Options) []contractCase {
	tests := []contractCase{
		{"Starter/EmptyShardBeginsAtStart", testStartEmpty},
		{"Starter/AppendsBeginAtStart", testStartAppends},
		{"Starter/AppendAtBeginsAtStart", testStartAppendAt},
		{"Starter/Names", testStartNames},
	}
	if opts.Reopen != nil {
		tests = append(tests, contractCase{"Starter/SurvivesReopen", func(t *testing.T, s store.Store) { testStartReopen(t, s, opts.Reopen) }})
	}
	return tests
}

// starts are the first offsets every case tries: 0 is CreateShard's, 12345
// a segment roll's, 1<<40 far past anything a test appends.
var starts = []uint64{0, 1, 12345, 1 << 40}

func starter(t *testing.T, s store.Store) store.Starter {
	t.Helper()
	st, ok := s.(store.Starter)
	if !ok {
		t.Fatalf("%T does not implement store.Starter", s)
	}
	return st
}

func mustCreateAt(t *testing.T, s store.Store, shard string, start uint64) {
	t.Helper()
	if err := starter(t, s).CreateShardAt(ctx, shard, start); err != nil {
		t.Fatalf("CreateShardAt(%q, %d): %v", shard, start, err)
	}
}

// outOfRange checks that err is an *OutOfRangeError for offset that names
// the readable range [low, high).
func outOfRange(t *testing.T, what string, err error, offset, low, high uint64) {
	t.Helper()
	var oor *store.OutOfRangeError
	if !errors.As(err, &oor) || oor.Offset != offset || oor.Low != low || oor.High != high {
		t.Errorf("%s: %v; want an OutOfRangeError for offset %d, readable %d up to %d", what, err, offset, low, high)
		return
	}
	if want := fmt.Sprintf("%d up to %d", low, high); !strings.Contains(err.Error(), want) {
		t.Errorf("%s: %q does not name the range %q", what, err, want)
	}
}

func startShard(start uint64) string { return fmt.Sprintf("at%d-0", start) }

func testStartEmpty(t *testing.T, s store.Store) {
	for _, start := range starts {
		shard := startShard(start)
		mustCreateAt(t, s, shard, start)
		marks(t, s, shard, start, start, start)
		if recs, err := s.Read(ctx, shard, start, store.Budget{}); err != nil || len(recs) != 0 {
			t.Errorf("start %d: Read at the start of an empty shard: %d records, %v; want none and no error", start, len(recs), err)
		}
		if start > 0 {
			_, err := s.Read(ctx, shard, start-1, store.Budget{})
			outOfRange(t, fmt.Sprintf("start %d: Read below the start", start), err, start-1, start, start)
			_, err = s.Read(ctx, shard, 0, store.Budget{})
			outOfRange(t, fmt.Sprintf("start %d: Read at 0", start), err, 0, start, start)
		}
		_, err := s.Read(ctx, shard, start+1, store.Budget{})
		outOfRange(t, fmt.Sprintf("start %d: Read past the start", start), err, start+1, start, start)
		for _, ts := range []int64{-1, 0, 1_700_000_000_000} {
			if got, err := s.OffsetForTime(ctx, shard, ts); err != nil || got != start {
				t.Errorf("start %d: OffsetForTime(%d) of the empty shard = %d, %v; want %d", start, ts, got, err, start)
			}
		}
		if got, err := s.ReadByKey(ctx, shard, []byte("key-1"), 0, store.Budget{}); err != nil || len(got) != 0 {
			t.Errorf("start %d: ReadByKey of the empty shard: %d records, %v", start, len(got), err)
		}
		// DeleteBefore at or below the start changes nothing; past it is
		// past the high watermark.
		for _, off := range []uint64{0, start} {
			if err := s.DeleteBefore(ctx, shard, off); err != nil {
				t.Errorf("start %d: DeleteBefore(%d): %v", start, off, err)
			}
		}
		if err := s.DeleteBefore(ctx, shard, start+1); !errors.As(err, new(*store.OutOfRangeError)) {
			t.Errorf("start %d: DeleteBefore past the start of an empty shard: %v; want an OutOfRangeError", start, err)
		}
		marks(t, s, shard, start, start, start)
		for _, again := range []struct {
			name   string
			create func() error
		}{
			{"CreateShardAt at the same start", func() error { return starter(t, s).CreateShardAt(ctx, shard, start) }},
			{"CreateShardAt at another start", func() error { return starter(t, s).CreateShardAt(ctx, shard, start+7) }},
			{"CreateShard", func() error { return s.CreateShard(ctx, shard) }},
		} {
			if err := again.create(); !errors.Is(err, store.ErrShardExists) {
				t.Errorf("start %d: %s on an existing shard: %v; want ErrShardExists", start, again.name, err)
			}
		}
		marks(t, s, shard, start, start, start)
	}
}

func testStartAppends(t *testing.T, s store.Store) {
	for _, start := range starts {
		shard := startShard(start)
		mustCreateAt(t, s, shard, start)
		want := Records(30, 20)
		if base := mustAppend(t, s, shard, append([]record.Record(nil), want[:10]...)); base != start {
			t.Fatalf("start %d: the first Append's base offset is %d", start, base)
		}
		if base := mustAppend(t, s, shard, append([]record.Record(nil), want[10:]...)); base != start+10 {
			t.Fatalf("start %d: the second Append's base offset is %d, want %d", start, base, start+10)
		}
		for i := range want {
			want[i].Offset = start + uint64(i)
		}
		end := start + 30
		marks(t, s, shard, start, end, end)
		recs, err := s.Read(ctx, shard, start, store.Budget{MaxRecords: 1})
		if err != nil || len(recs) != 1 {
			t.Fatalf("start %d: Read at the start: %d records, %v", start, len(recs), err)
		}
		Equal(t, recs, want[:1])
		Equal(t, ReadAll(t, s, shard, start), want)
		Equal(t, ReadAll(t, s, shard, start+17), want[17:])
		if start > 0 {
			_, err = s.Read(ctx, shard, start-1, store.Budget{})
			outOfRange(t, fmt.Sprintf("start %d: Read below the start", start), err, start-1, start, end)
		}
		_, err = s.Read(ctx, shard, end+1, store.Budget{})
		outOfRange(t, fmt.Sprintf("start %d: Read past the log end", start), err, end+1, start, end)
		for _, tc := range []struct {
			ts   int64
			want uint64
		}{
			{0, start},
			{want[0].Timestamp, start},
			{want[12].Timestamp, firstAtOrAfter(want, want[12].Timestamp)},
			{want[29].Timestamp + 1, end},
		} {
			if got, err := s.OffsetForTime(ctx, shard, tc.ts); err != nil || got != tc.want {
				t.Errorf("start %d: OffsetForTime(%d) = %d, %v; want %d", start, tc.ts, got, err, tc.want)
			}
		}
		var wantKey []uint64
		for _, r := range want {
			if string(r.Key) == "key-3" {
				wantKey = append(wantKey, r.Offset)
			}
		}
		// From 0: an index search from below the start finds the shard's own.
		if got, err := s.ReadByKey(ctx, shard, []byte("key-3"), 0, store.Budget{}); err != nil || !reflect.DeepEqual(offsetsOf(got), wantKey) {
			t.Errorf("start %d: ReadByKey(key-3, from 0) = %v, %v; want %v", start, offsetsOf(got), err, wantKey)
		}
		if got, err := s.ReadByTag(ctx, shard, "tag-2", start+25, store.Budget{}); err != nil || len(got) == 0 || got[0].Offset < start+25 {
			t.Errorf("start %d: ReadByTag(tag-2, from start+25) = %v, %v", start, offsetsOf(got), err)
		}
		if err := s.DeleteBefore(ctx, shard, start+5); err != nil {
			t.Fatal(err)
		}
		marks(t, s, shard, start+5, end, end)
		Equal(t, ReadAll(t, s, shard, start+5), want[5:])
	}
}

// firstAtOrAfter is the offset of the first record stamped at or after ts
// (the records' timestamps are not always increasing).
func firstAtOrAfter(recs []record.Record, ts int64) uint64 {
	for _, r := range recs {
		if r.Timestamp >= ts {
			return r.Offset
		}
	}
	return recs[len(recs)-1].Offset + 1
}

// A follower's shard made at the leader's start: managed from its first
// SetHighWatermark, copying with AppendAt from the start.
func testStartAppendAt(t *testing.T, s store.Store) {
	r := replica(t, s)
	for _, start := range starts {
		shard := startShard(start)
		mustCreateAt(t, s, shard, start)
		mustSetHW(t, s, shard, 0) // below the start: the high watermark stays there
		marks(t, s, shard, start, start, start)
		for _, tc := range []struct {
			name  string
			first uint64
			ok    bool
		}{
			{"at 0", 0, false},
			{"past the start", start + 1, false},
			{"at the start", start, true},
		} {
			if tc.first == 0 && start == 0 && !tc.ok {
				continue // at 0 is at the start
			}
			err := r.AppendAt(ctx, shard, stamped(3, tc.first, "a", 1000, 1000))
			if tc.ok != (err == nil) {
				t.Fatalf("start %d: AppendAt %s: %v; want ok %v", start, tc.name, err, tc.ok)
			}
			if err != nil && !strings.Contains(err.Error(), fmt.Sprintf("next offset is %d", start)) {
				t.Errorf("start %d: AppendAt %s: %q does not name the next offset %d", start, tc.name, err, start)
			}
		}
		marks(t, s, shard, start, start, start+3)
		Equal(t, readToEnd(t, s, shard), stamped(3, start, "a", 1000, 1000))
		if start > 0 {
			if err := r.TruncateTo(ctx, shard, start-1); !errors.Is(err, store.ErrCommitted) {
				t.Errorf("start %d: TruncateTo below the start, where the high watermark is: %v; want ErrCommitted", start, err)
			}
		}
		mustSetHW(t, s, shard, start+2)
		mustTruncate(t, s, shard, start+2)
		marks(t, s, shard, start, start+2, start+2)
		if base := mustAppend(t, s, shard, stamped(1, 0, "b", 5000, 1)); base != start+2 {
			t.Errorf("start %d: after TruncateTo(start+2) the next base offset is %d", start, base)
		}
		if got, err := s.OffsetForTime(ctx, shard, 1500); err != nil || got != start+1 {
			t.Errorf("start %d: OffsetForTime(1500) = %d, %v; want %d", start, got, err, start+1)
		}
	}
}

func testStartNames(t *testing.T, s store.Store) {
	for _, bad := range []string{"", "..", "a/b", strings.Repeat("x", store.MaxShardLen+1)} {
		if err := starter(t, s).CreateShardAt(ctx, bad, 10); err == nil {
			t.Errorf("CreateShardAt(%.30q) succeeded", bad)
		}
	}
	mustCreateAt(t, s, "late-3", 10)
	mustCreate(t, s, "early-3")
	names, err := s.Shards(ctx)
	if err != nil || strings.Join(names, ",") != "early-3,late-3" {
		t.Errorf("Shards() = %q, %v", names, err)
	}
	// Deleted and made again at another start: nothing of the first is left.
	mustAppend(t, s, "late-3", Records(4, 21))
	if err := s.DeleteShard(ctx, "late-3"); err != nil {
		t.Fatal(err)
	}
	mustCreateAt(t, s, "late-3", 2)
	marks(t, s, "late-3", 2, 2, 2)
	if got, _ := s.ReadByKey(ctx, "late-3", []byte("key-1"), 0, store.Budget{}); len(got) != 0 {
		t.Errorf("the shard made again at 2 finds %v by key", offsetsOf(got))
	}
	if base := mustAppend(t, s, "late-3", Records(1, 22)); base != 2 {
		t.Errorf("the shard made again at 2 appends at %d", base)
	}
}

func testStartReopen(t *testing.T, s store.Store, reopen func(*testing.T, store.Store) store.Store) {
	const start = 12345
	mustCreateAt(t, s, "empty-0", start)
	mustCreateAt(t, s, "full-0", start)
	want := Records(40, 23)
	mustAppend(t, s, "full-0", append([]record.Record(nil), want[:25]...))
	mustAppend(t, s, "full-0", append([]record.Record(nil), want[25:]...))
	mustCreateAt(t, s, "managed-0", start)
	mustSetHW(t, s, "managed-0", start)
	if err := replica(t, s).AppendAt(ctx, "managed-0", stamped(4, start, "m", 1000, 1)); err != nil {
		t.Fatal(err)
	}
	for i := range want {
		want[i].Offset = start + uint64(i)
	}

	s = reopen(t, s)
	t.Cleanup(func() { s.Close() })
	marks(t, s, "empty-0", start, start, start)
	marks(t, s, "full-0", start, start+40, start+40)
	marks(t, s, "managed-0", start, start, start+4)
	Equal(t, ReadAll(t, s, "full-0", start), want)
	_, err := s.Read(ctx, "empty-0", start-1, store.Budget{})
	outOfRange(t, "after reopen, Read below the start of the empty shard", err, start-1, start, start)
	if got, err := s.OffsetForTime(ctx, "empty-0", 0); err != nil || got != start {
		t.Errorf("after reopen OffsetForTime of the empty shard = %d, %v; want %d", got, err, start)
	}
	if got, err := s.OffsetForTime(ctx, "full-0", want[30].Timestamp); err != nil || got != firstAtOrAfter(want, want[30].Timestamp) {
		t.Errorf("after reopen OffsetForTime = %d, %v; want %d", got, err, firstAtOrAfter(want, want[30].Timestamp))
	}
	if base := mustAppend(t, s, "empty-0", Records(2, 24)); base != start {
		t.Errorf("after reopen the empty shard appends at %d, want %d", base, start)
	}
	if base := mustAppend(t, s, "full-0", Records(2, 25)); base != start+40 {
		t.Errorf("after reopen the shard appends at %d, want %d", base, start+40)
	}
	if err := replica(t, s).AppendAt(ctx, "managed-0", stamped(1, start+4, "m", 2000, 1)); err != nil {
		t.Errorf("after reopen AppendAt at the log end: %v", err)
	}
	marks(t, s, "managed-0", start, start, start+5)
}
