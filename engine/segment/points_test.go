package segment

import (
	"bytes"
	"context"
	"fmt"
	"slices"
	"testing"

	"strata/engine/record"
	"strata/engine/store"
)

// Lookups through the in-memory offset points find every record, whatever
// happened to the segments: rolls, a truncation that rewrites offsets at
// other byte positions, a memory budget that takes the points of older
// segments away, a restart (no points: the durable index). The budget is
// never exceeded, and the active segment keeps its points while older ones
// give theirs up.
func TestInMemoryOffsetPoints(t *testing.T) {
	ctx := context.Background()
	value := func(off uint64) []byte {
		return []byte(fmt.Sprintf("value-%d-%s", off, bytes.Repeat([]byte("v"), int(off%200))))
	}
	for _, tc := range []struct {
		name     string
		memBytes int64
		// maxSealedPoints: how many sealed segments may keep their
		// points (-1: all must).
		maxSealedPoints int
	}{
		{"room for all", 0, -1},
		// A 128 KiB segment has 33 points (264 bytes once sealed); the
		// active one's array grows to 64 (512 bytes), also after a restart
		// (recovery makes its points), which leaves room for one sealed
		// segment's.
		{"room for about two segments", 900, 2},
	} {
		t.Run(tc.name, func(t *testing.T) {
			dir := t.TempDir()
			cfg := testConfig(dir)
			cfg.MaxSegmentBytes, cfg.RollCheckInterval, cfg.IndexMemoryBytes = 128<<10, 100, tc.memBytes
			cfg.IndexInterval = 50 // several durable points per segment
			e := open(t, cfg)
			want := map[uint64][]byte{}
			if err := e.CreateShard(ctx, "p-0"); err != nil {
				t.Fatal(err)
			}
			// A managed high watermark, as a replica's: a truncation may
			// only cut above it.
			if err := e.SetHighWatermark(ctx, "p-0", 0); err != nil {
				t.Fatal(err)
			}
			// appendN appends n records and raises the high watermark to
			// them, unless hold.
			appendN := func(e *Engine, n int, hold bool) {
				recs := make([]record.Record, 0, 50)
				for i := 0; i < n; i++ {
					end, _ := e.LogEnd(ctx, "p-0")
					off := end + uint64(len(recs))
					recs = append(recs, record.Record{Value: value(off)})
					want[off] = recs[len(recs)-1].Value
					if len(recs) == cap(recs) || i == n-1 {
						if _, err := e.Append(ctx, "p-0", recs); err != nil {
							t.Fatal(err)
						}
						recs = recs[:0]
					}
				}
				if !hold {
					end, _ := e.LogEnd(ctx, "p-0")
					if err := e.SetHighWatermark(ctx, "p-0", end); err != nil {
						t.Fatal(err)
					}
				}
			}
			check := func(e *Engine, when string) {
				t.Helper()
				_, high, _ := e.Watermarks(ctx, "p-0")
				for off := uint64(0); off < high; off++ {
					got, err := e.Read(ctx, "p-0", off, store.Budget{MaxRecords: 1})
					if err != nil || len(got) != 1 || got[0].Offset != off || !bytes.Equal(got[0].Value, want[off]) {
						t.Fatalf("%s: read offset %d: %d records, %v", when, off, len(got), err)
					}
				}
				if used := e.points.used.Load(); used > e.points.limit {
					t.Fatalf("%s: in-memory points hold %d bytes, over the budget of %d", when, used, e.points.limit)
				}
			}
			appendN(e, 8000, false)
			longer := value
			value = func(off uint64) []byte { return bytes.Repeat([]byte{'c'}, 1000) } // points every 4 records
			appendN(e, 40, true)                                                       // one append: no roll check crossed
			value = longer
			check(e, "after appends")
			sh := e.shards["p-0"]
			if len(sh.segments) < 3 {
				t.Fatalf("%d segments, want rolls", len(sh.segments))
			}
			if sh.active().points.pub.Load() == nil {
				t.Fatal("the active segment has no in-memory points")
			}
			var with []uint64
			for _, s := range sh.segments[:len(sh.segments)-1] {
				if s.points.pub.Load() != nil {
					with = append(with, s.no)
				}
			}
			if sealed := len(sh.segments) - 1; (tc.maxSealedPoints < 0 && len(with) != sealed) ||
				(tc.maxSealedPoints >= 0 && (len(with) > tc.maxSealedPoints || (len(with) > 0 && with[0] == 0))) {
				t.Fatalf("sealed segments with points: %v of %d; want all (-1) or at most %d, not the oldest", with, sealed, tc.maxSealedPoints)
			}

			// Cut the 40 records above the high watermark, write others there.
			_, high, _ := e.Watermarks(ctx, "p-0")
			if err := e.TruncateTo(ctx, "p-0", high); err != nil {
				t.Fatal(err)
			}
			for off := high; off < high+40; off++ {
				delete(want, off)
			}
			value = func(off uint64) []byte { return []byte(fmt.Sprintf("again-%d", off)) }
			appendN(e, 300, false)
			check(e, "after a truncation")

			before := slices.Clone(*sh.active().points.pub.Load())
			if err := e.Close(); err != nil {
				t.Fatal(err)
			}
			e = open(t, cfg)
			defer e.Close()
			sh = e.shards["p-0"]
			for _, s := range sh.segments[:len(sh.segments)-1] {
				if s.points.pub.Load() != nil {
					t.Fatalf("sealed segment %d has points right after a restart", s.no)
				}
			}
			// Recovery's scan of the active segment made the points its
			// writer had made.
			if p := sh.active().points.pub.Load(); p == nil || !slices.Equal(*p, before) {
				t.Fatalf("the active segment's points after a restart are not those from before (%d points)", len(before))
			}
			check(e, "after a restart")
			// The reads loaded the sealed segments' points from the durable
			// index (as many as the budget holds).
			loaded := 0
			for _, s := range sh.segments[:len(sh.segments)-1] {
				if p := s.points.pub.Load(); p != nil {
					loaded++
					if (*p)[0].rel != 0 || len(*p) < 2 {
						t.Fatalf("segment %d: loaded points %v, want one at its first record and one per %d records", s.no, *p, cfg.IndexInterval)
					}
				}
			}
			if sealed := len(sh.segments) - 1; (tc.maxSealedPoints < 0 && loaded != sealed) || (tc.maxSealedPoints >= 0 && loaded == 0) {
				t.Fatalf("after a restart and reads, %d of %d sealed segments have points", loaded, sealed)
			}
			appendN(e, 1000, false)
			check(e, "after appends after the restart")
		})
	}
}
