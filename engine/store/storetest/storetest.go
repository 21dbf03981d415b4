// Package storetest is the suite every storage engine must pass.
package storetest

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"reflect"
	"strings"
	"sync"
	"testing"

	"strata/engine/record"
	"strata/engine/store"
)

// Options adapts the suite to an engine.
type Options struct {
	// Reopen closes s and opens the same data again; nil for engines that
	// keep nothing across a restart.
	Reopen func(t *testing.T, s store.Store) store.Store
}

// contractCase is one case of the suite, run on a fresh store.
type contractCase struct {
	name string
	fn   func(t *testing.T, s store.Store)
}

// Run runs the suite against stores made by open, each empty.
func Run(t *testing.T, open func(t *testing.T) store.Store, opts Options) {
	tests := []contractCase{
		{"ShardNames", testShardNames},
		{"RoundTrip", testRoundTrip},
		{"ConcurrentBatchesKeepOrder", testConcurrentBatches},
		{"Budgets", testBudgets},
		{"OutOfRange", testOutOfRange},
		{"OffsetForTime", testOffsetForTime},
		{"ByKeyAndTag", testByKeyAndTag},
		{"DeleteBefore", testDeleteBefore},
		{"DeleteShard", testDeleteShard},
	}
	if opts.Reopen != nil {
		tests = append(tests, contractCase{"SurvivesReopen", func(t *testing.T, s store.Store) { testReopen(t, s, opts.Reopen) }})
	}
	tests = append(tests, replicaTests(opts)...)
	tests = append(tests, starterTests(opts)...)
	tests = append(tests, epochsTests(opts)...)
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			s := open(t)
			t.Cleanup(func() { s.Close() })
			tc.fn(t, s)
		})
	}
}

var ctx = context.Background()

// Records makes n varied records: keys cycle through 7 values, tags
// through 3, a tombstone every 11th, timestamps not always increasing.
func Records(n int, seed int) []record.Record {
	out := make([]record.Record, n)
	for i := range out {
		v := seed*1_000_000 + i
		r := record.Record{
			Timestamp:    int64(1_700_000_000_000 + v*10 - (v%5)*7),
			Key:          []byte(fmt.Sprintf("key-%d", v%7)),
			Value:        []byte(fmt.Sprintf("value %d %s", v, strings.Repeat("x", v%50))),
			Headers:      []record.Header{{Key: "h", Value: []byte(fmt.Sprint(v))}},
			Tags:         []string{fmt.Sprintf("tag-%d", v%3)},
			ProtocolData: []byte{byte(v)},
		}
		if v%11 == 0 {
			r.Value = nil
			r.Headers = nil
		}
		if v%13 == 0 {
			r.Key = nil
		}
		out[i] = r
	}
	return out
}

func mustCreate(t *testing.T, s store.Store, shard string) {
	t.Helper()
	if err := s.CreateShard(ctx, shard); err != nil {
		t.Fatalf("CreateShard(%q): %v", shard, err)
	}
}

func mustAppend(t *testing.T, s store.Store, shard string, recs []record.Record) uint64 {
	t.Helper()
	base, err := s.Append(ctx, shard, recs)
	if err != nil {
		t.Fatalf("Append(%s, %d records): %v", shard, len(recs), err)
	}
	return base
}

// ReadAll reads every record of a shard from offset from.
func ReadAll(t *testing.T, s store.Store, shard string, from uint64) []record.Record {
	t.Helper()
	var out []record.Record
	for {
		recs, err := s.Read(ctx, shard, from, store.Budget{MaxRecords: 500})
		if err != nil {
			t.Fatalf("Read(%s, %d): %v", shard, from, err)
		}
		if len(recs) == 0 {
			return out
		}
		out = append(out, recs...)
		from = recs[len(recs)-1].Offset + 1
	}
}

// Equal compares records as stored (offsets included).
func Equal(t *testing.T, got, want []record.Record) {
	t.Helper()
	if len(got) != len(want) {
		t.Fatalf("read %d records, want %d", len(got), len(want))
	}
	for i := range want {
		if !reflect.DeepEqual(got[i], want[i]) {
			t.Fatalf("record %d:\n got %+v\nwant %+v", i, got[i], want[i])
		}
	}
}

func testShardNames(t *testing.T, s store.Store) {
	for _, bad := range []string{"", ".", "..", "a/b", "../etc", "a b", "a\x00b", strings.Repeat("x", store.MaxShardLen+1)} {
		if err := s.CreateShard(ctx, bad); err == nil {
			t.Errorf("CreateShard(%.30q) succeeded", bad)
		}
	}
	mustCreate(t, s, "orders-0")
	if err := s.CreateShard(ctx, "orders-0"); !errors.Is(err, store.ErrShardExists) {
		t.Errorf("creating a shard twice: %v, want ErrShardExists", err)
	}
	if _, err := s.Append(ctx, "nope-0", Records(1, 0)); !errors.Is(err, store.ErrUnknownShard) {
		t.Errorf("Append to an unknown shard: %v, want ErrUnknownShard", err)
	}
	if _, err := s.Read(ctx, "nope-0", 0, store.Budget{}); !errors.Is(err, store.ErrUnknownShard) {
		t.Errorf("Read of an unknown shard: %v, want ErrUnknownShard", err)
	}
	mustCreate(t, s, "a.b_c-1")
	names, err := s.Shards(ctx)
	if err != nil || strings.Join(names, ",") != "a.b_c-1,orders-0" {
		t.Errorf("Shards() = %q, %v", names, err)
	}
}

func testRoundTrip(t *testing.T, s store.Store) {
	mustCreate(t, s, "t-0")
	want := Records(300, 1)
	var next uint64
	for _, n := range []int{1, 99, 200} {
		batch := append([]record.Record(nil), want[next:next+uint64(n)]...)
		if base := mustAppend(t, s, "t-0", batch); base != next {
			t.Fatalf("base offset %d, want %d", base, next)
		}
		next += uint64(n)
	}
	for i := range want {
		want[i].Offset = uint64(i)
	}
	Equal(t, ReadAll(t, s, "t-0", 0), want)
	Equal(t, ReadAll(t, s, "t-0", 123), want[123:])
	low, high, err := s.Watermarks(ctx, "t-0")
	if err != nil || low != 0 || high != 300 {
		t.Fatalf("Watermarks = %d, %d, %v; want 0, 300", low, high, err)
	}
}

// The design's old bug (docs/design.md): base offsets scrambled across batches. Many writers, many
// shards: every base offset must match the order on disk.
func testConcurrentBatches(t *testing.T, s store.Store) {
	const shards, writers, batches = 8, 4, 25
	for i := 0; i < shards; i++ {
		mustCreate(t, s, fmt.Sprintf("c-%d", i))
	}
	type sent struct {
		base uint64
		recs []record.Record
	}
	var mu sync.Mutex
	got := map[string][]sent{}
	var wg sync.WaitGroup
	for w := 0; w < writers; w++ {
		wg.Add(1)
		go func(w int) {
			defer wg.Done()
			for b := 0; b < batches; b++ {
				shard := fmt.Sprintf("c-%d", (w+b)%shards)
				recs := Records(1+(w*7+b)%9, w*1000+b)
				base, err := s.Append(ctx, shard, append([]record.Record(nil), recs...))
				if err != nil {
					t.Error(err)
					return
				}
				mu.Lock()
				got[shard] = append(got[shard], sent{base, recs})
				mu.Unlock()
			}
		}(w)
	}
	wg.Wait()
	for shard, sends := range got {
		stored := ReadAll(t, s, shard, 0)
		total := 0
		for _, snd := range sends {
			total += len(snd.recs)
			for i, r := range snd.recs {
				at := snd.base + uint64(i)
				if at >= uint64(len(stored)) || !bytes.Equal(stored[at].Value, r.Value) || stored[at].Offset != at {
					t.Fatalf("%s: the batch acknowledged at base %d does not sit there on disk (record %d)", shard, snd.base, i)
				}
			}
		}
		if total != len(stored) {
			t.Fatalf("%s: %d records acknowledged, %d stored", shard, total, len(stored))
		}
	}
}

func testBudgets(t *testing.T, s store.Store) {
	mustCreate(t, s, "b-0")
	recs := Records(50, 2)
	big := record.Record{Value: bytes.Repeat([]byte("B"), 10_000)}
	mustAppend(t, s, "b-0", append([]record.Record{big}, recs...))
	got, err := s.Read(ctx, "b-0", 0, store.Budget{MaxBytes: 100})
	if err != nil || len(got) != 1 || len(got[0].Value) != 10_000 {
		t.Fatalf("a first record larger than MaxBytes: got %d records, %v; want it alone", len(got), err)
	}
	got, _ = s.Read(ctx, "b-0", 1, store.Budget{MaxRecords: 7})
	if len(got) != 7 || got[0].Offset != 1 {
		t.Fatalf("MaxRecords 7 from 1: %d records from %d", len(got), got[0].Offset)
	}
	size := 0
	for i := 1; i <= 10; i++ {
		size += record.Size(&recs[i-1])
	}
	got, _ = s.Read(ctx, "b-0", 1, store.Budget{MaxBytes: size})
	if len(got) != 10 {
		t.Fatalf("MaxBytes of exactly 10 records' size: %d records", len(got))
	}
}

func testOutOfRange(t *testing.T, s store.Store) {
	mustCreate(t, s, "r-0")
	mustAppend(t, s, "r-0", Records(10, 3))
	if recs, err := s.Read(ctx, "r-0", 10, store.Budget{}); err != nil || len(recs) != 0 {
		t.Fatalf("Read at the high watermark: %d records, %v; want none and no error", len(recs), err)
	}
	_, err := s.Read(ctx, "r-0", 11, store.Budget{})
	var oor *store.OutOfRangeError
	if !errors.As(err, &oor) || oor.Low != 0 || oor.High != 10 || !strings.Contains(err.Error(), "0 up to 10") {
		t.Fatalf("Read above the high watermark: %v; want an OutOfRangeError stating 0 and 10", err)
	}
}

func testOffsetForTime(t *testing.T, s store.Store) {
	mustCreate(t, s, "ts-0")
	ts := []int64{100, 300, 200, 300, 500, 400, 2000, 1500, 5000}
	var recs []record.Record
	for _, v := range ts {
		recs = append(recs, record.Record{Timestamp: v, Value: []byte{1}})
	}
	mustAppend(t, s, "ts-0", recs)
	for _, tc := range []struct {
		ts   int64
		want uint64
	}{{0, 0}, {100, 0}, {101, 1}, {250, 1}, {301, 4}, {450, 4}, {501, 6}, {1600, 6}, {2001, 8}, {5000, 8}, {5001, 9}} {
		got, err := s.OffsetForTime(ctx, "ts-0", tc.ts)
		if err != nil || got != tc.want {
			t.Errorf("OffsetForTime(%d) = %d, %v; want %d", tc.ts, got, err, tc.want)
		}
	}
}

func testByKeyAndTag(t *testing.T, s store.Store) {
	mustCreate(t, s, "k-0")
	recs := Records(100, 4)
	mustAppend(t, s, "k-0", append([]record.Record(nil), recs...))
	key := []byte("key-3")
	var wantKey, wantTag []uint64
	for i, r := range recs {
		if bytes.Equal(r.Key, key) && r.Key != nil && i >= 20 {
			wantKey = append(wantKey, uint64(i))
		}
		if r.Tags[0] == "tag-1" && i >= 20 {
			wantTag = append(wantTag, uint64(i))
		}
	}
	offsets := func(rs []record.Record) []uint64 {
		var o []uint64
		for _, r := range rs {
			o = append(o, r.Offset)
		}
		return o
	}
	got, err := s.ReadByKey(ctx, "k-0", key, 20, store.Budget{})
	if err != nil || !reflect.DeepEqual(offsets(got), wantKey) {
		t.Errorf("ReadByKey(key-3, from 20) = %v, %v; want %v", offsets(got), err, wantKey)
	}
	got, err = s.ReadByTag(ctx, "k-0", "tag-1", 20, store.Budget{MaxRecords: 5})
	if err != nil || !reflect.DeepEqual(offsets(got), wantTag[:5]) {
		t.Errorf("ReadByTag(tag-1, from 20, max 5) = %v, %v; want %v", offsets(got), err, wantTag[:5])
	}
	if got, _ := s.ReadByKey(ctx, "k-0", []byte("absent"), 0, store.Budget{}); len(got) != 0 {
		t.Errorf("ReadByKey of an absent key returned %d records", len(got))
	}
}

func testDeleteBefore(t *testing.T, s store.Store) {
	mustCreate(t, s, "d-0")
	mustAppend(t, s, "d-0", Records(20, 5))
	if err := s.DeleteBefore(ctx, "d-0", 12); err != nil {
		t.Fatal(err)
	}
	low, high, _ := s.Watermarks(ctx, "d-0")
	if low != 12 || high != 20 {
		t.Fatalf("after DeleteBefore(12): watermarks %d, %d", low, high)
	}
	var oor *store.OutOfRangeError
	if _, err := s.Read(ctx, "d-0", 11, store.Budget{}); !errors.As(err, &oor) || oor.Low != 12 {
		t.Fatalf("Read below the low watermark: %v", err)
	}
	if got := ReadAll(t, s, "d-0", 12); len(got) != 8 || got[0].Offset != 12 {
		t.Fatalf("Read from the low watermark: %d records", len(got))
	}
	if err := s.DeleteBefore(ctx, "d-0", 5); err != nil {
		t.Fatalf("DeleteBefore below the low watermark: %v", err)
	}
	if low, _, _ := s.Watermarks(ctx, "d-0"); low != 12 {
		t.Fatalf("DeleteBefore lowered the low watermark to %d", low)
	}
	if err := s.DeleteBefore(ctx, "d-0", 21); !errors.As(err, &oor) {
		t.Fatalf("DeleteBefore past the high watermark: %v", err)
	}
}

func testReopen(t *testing.T, s store.Store, reopen func(*testing.T, store.Store) store.Store) {
	mustCreate(t, s, "p-0")
	want := Records(500, 6)
	mustAppend(t, s, "p-0", append([]record.Record(nil), want[:250]...))
	mustAppend(t, s, "p-0", append([]record.Record(nil), want[250:]...))
	if err := s.DeleteBefore(ctx, "p-0", 3); err != nil {
		t.Fatal(err)
	}
	s = reopen(t, s)
	t.Cleanup(func() { s.Close() })
	for i := range want {
		want[i].Offset = uint64(i)
	}
	Equal(t, ReadAll(t, s, "p-0", 3), want[3:])
	if low, high, _ := s.Watermarks(ctx, "p-0"); low != 3 || high != 500 {
		t.Fatalf("after reopen: watermarks %d, %d; want 3, 500", low, high)
	}
	more := Records(3, 7)
	if base := mustAppend(t, s, "p-0", append([]record.Record(nil), more...)); base != 500 {
		t.Fatalf("after reopen the next base offset is %d, want 500", base)
	}
	for i := range more {
		more[i].Offset = 500 + uint64(i)
	}
	Equal(t, ReadAll(t, s, "p-0", 3), append(want[3:], more...))
	if got, _ := s.ReadByKey(ctx, "p-0", []byte("key-2"), 0, store.Budget{MaxRecords: 3}); len(got) != 3 {
		t.Fatalf("after reopen ReadByKey found %d records", len(got))
	}
}

func testDeleteShard(t *testing.T, s store.Store) {
	mustCreate(t, s, "gone-0")
	mustCreate(t, s, "kept-0")
	mustAppend(t, s, "gone-0", Records(30, 1))
	mustAppend(t, s, "kept-0", Records(5, 2))
	if err := s.DeleteShard(ctx, "gone-0"); err != nil {
		t.Fatal(err)
	}
	if _, err := s.Read(ctx, "gone-0", 0, store.Budget{}); !errors.Is(err, store.ErrUnknownShard) {
		t.Fatalf("read of a deleted shard: %v", err)
	}
	if err := s.DeleteShard(ctx, "gone-0"); !errors.Is(err, store.ErrUnknownShard) {
		t.Fatalf("deleting twice: %v", err)
	}
	// A new shard of the same name starts empty, indexes included.
	mustCreate(t, s, "gone-0")
	if _, high, _ := s.Watermarks(ctx, "gone-0"); high != 0 {
		t.Fatalf("re-created shard starts at %d", high)
	}
	fresh := Records(3, 9)
	mustAppend(t, s, "gone-0", append([]record.Record(nil), fresh...))
	if got, _ := s.ReadByKey(ctx, "gone-0", fresh[1].Key, 0, store.Budget{}); len(got) != 1 || got[0].Offset != 1 {
		t.Fatalf("key index of the re-created shard: %d records", len(got))
	}
	if got := ReadAll(t, s, "kept-0", 0); len(got) != 5 {
		t.Fatalf("the other shard lost records: %d", len(got))
	}
}
