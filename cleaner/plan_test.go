package cleaner

import (
	"slices"
	"strings"
	"testing"
	"time"
)

var t0 = time.Date(2026, 12, 1, 0, 0, 0, 0, time.UTC)

func seg(no, start, end uint64, bytes int64, newest time.Duration) Segment {
	return Segment{No: no, Start: start, End: end, Bytes: bytes, MinTimestamp: t0, MaxTimestamp: t0.Add(newest)}
}

func active(s Segment) Segment { s.Active = true; return s }
func untimed(s Segment) Segment {
	s.MinTimestamp, s.MaxTimestamp = time.UnixMilli(-1), time.UnixMilli(-1)
	return s
}
func frozen(s Segment) Segment { s.Frozen = true; return s }
func cleaned(s Segment, at time.Duration) Segment {
	s.FirstCleaned = t0.Add(at)
	return s
}

func TestPlanPartition(t *testing.T) {
	cfg := Config{MinDirtyRatio: 0.5, DeleteRetention: 24 * time.Hour}
	cases := []struct {
		name       string
		now        time.Duration // after t0
		p          Partition
		c          Config
		clean      bool
		why        string // a part of Plan.Why
		firstDirty uint64
		end        uint64
		rewrite    []uint64 // segment numbers
		drop       []uint64 // of those, the ones that drop tombstones
	}{
		{name: "the active segment alone is never cleaned",
			p:   Partition{Segments: []Segment{active(seg(1, 0, 100, 1000, 0))}},
			why: "nothing cleanable"},
		{name: "a fresh log is all dirty",
			now:   time.Hour,
			p:     Partition{Segments: []Segment{seg(1, 0, 100, 1000, 0), seg(2, 100, 200, 1000, 0), active(seg(3, 200, 210, 10, 0))}},
			clean: true, why: "dirty ratio 1.00 is above", end: 200, rewrite: []uint64{1, 2}},
		{name: "below the dirty ratio",
			now: time.Hour,
			p:   Partition{FirstDirty: 300, Segments: []Segment{seg(1, 0, 100, 1000, 0), seg(2, 100, 300, 1000, 0), seg(3, 300, 400, 500, 0), active(seg(4, 400, 401, 1, 0))}},
			why: "dirty ratio 0.20 is not above", firstDirty: 300, end: 400},
		{name: "at the dirty ratio it waits: Kafka's test is strictly above",
			now: time.Hour,
			p:   Partition{FirstDirty: 100, Segments: []Segment{seg(1, 0, 100, 1000, 0), seg(2, 100, 200, 1000, 0), active(seg(3, 200, 201, 1, 0))}},
			why: "dirty ratio 0.50 is not above", firstDirty: 100, end: 200},
		{name: "above the dirty ratio the whole cleanable part is rewritten, the clean part too",
			now:   time.Hour,
			p:     Partition{FirstDirty: 100, Segments: []Segment{seg(1, 0, 100, 900, 0), seg(2, 100, 200, 1000, 0), active(seg(3, 200, 201, 1, 0))}},
			clean: true, why: "dirty ratio 0.53 is above", firstDirty: 100, end: 200, rewrite: []uint64{1, 2}},
		{name: "a checkpoint past the log's end (it was truncated) starts the dirty part over",
			now:   time.Hour,
			p:     Partition{FirstDirty: 500, Segments: []Segment{seg(1, 0, 100, 1000, 0), seg(2, 100, 200, 1000, 0), active(seg(3, 200, 201, 1, 0))}},
			clean: true, why: "dirty ratio 1.00 is above", firstDirty: 0, end: 200, rewrite: []uint64{1, 2}},
		{name: "a checkpoint at the active segment's start is the log's end, not past it",
			now: time.Hour,
			p:   Partition{FirstDirty: 200, Segments: []Segment{seg(1, 0, 100, 1000, 0), seg(2, 100, 200, 1000, 0), active(seg(3, 200, 201, 1, 0))}},
			why: "no dirty segment", firstDirty: 200, end: 200},
		{name: "nothing dirty",
			now: time.Hour,
			p:   Partition{FirstDirty: 200, Segments: []Segment{seg(1, 0, 100, 1000, 0), seg(2, 100, 200, 1000, 0), active(seg(3, 200, 201, 1, 0))}},
			why: "no dirty segment", firstDirty: 200, end: 200},
		{name: "min.compaction.lag.ms holds back the segments from the first young one on",
			now: 2 * time.Hour, c: Config{MinDirtyRatio: 0.5, MinLag: time.Hour},
			p:     Partition{Segments: []Segment{seg(1, 0, 100, 1000, 0), seg(2, 100, 200, 1000, 90*time.Minute), seg(3, 200, 300, 1000, 0), active(seg(4, 300, 301, 1, 0))}},
			clean: true, why: "is above", end: 100, rewrite: []uint64{1}},
		{name: "min.compaction.lag.ms asks only the dirty segments: a young clean one holds nothing back",
			now: 2 * time.Hour, c: Config{MinDirtyRatio: 0.5, MinLag: time.Hour},
			p:     Partition{FirstDirty: 100, Segments: []Segment{seg(1, 0, 100, 500, 90*time.Minute), seg(2, 100, 200, 1000, 0), active(seg(3, 200, 201, 1, 0))}},
			clean: true, why: "is above", firstDirty: 100, end: 200, rewrite: []uint64{1, 2}},
		{name: "min.compaction.lag.ms holding back every segment",
			now: 30 * time.Minute, c: Config{MinDirtyRatio: 0.5, MinLag: time.Hour},
			p:   Partition{Segments: []Segment{seg(1, 0, 100, 1000, 0), active(seg(2, 100, 101, 1, 0))}},
			why: "nothing cleanable"},
		{name: "max.compaction.lag.ms makes a partition due below its dirty ratio",
			now: 3 * time.Hour, c: Config{MinDirtyRatio: 0.9, MaxLag: 2 * time.Hour},
			p:     Partition{FirstDirty: 200, Segments: []Segment{seg(1, 0, 200, 9000, 0), seg(2, 200, 300, 1000, 30*time.Minute), active(seg(3, 300, 301, 1, 0))}},
			clean: true, why: "older than max.compaction.lag.ms", firstDirty: 200, end: 300, rewrite: []uint64{1, 2}},
		{name: "max.compaction.lag.ms not yet reached",
			now: 2 * time.Hour, c: Config{MinDirtyRatio: 0.9, MaxLag: 2 * time.Hour},
			p:   Partition{FirstDirty: 200, Segments: []Segment{seg(1, 0, 200, 9000, 0), seg(2, 200, 300, 1000, 30*time.Minute), active(seg(3, 300, 301, 1, 0))}},
			why: "not above", firstDirty: 200, end: 300},
		{name: "max.compaction.lag.ms counts from a segment's first record, not its newest",
			now: 3 * time.Hour, c: Config{MinDirtyRatio: 0.9, MaxLag: 2 * time.Hour},
			p:     Partition{FirstDirty: 200, Segments: []Segment{seg(1, 0, 200, 9000, 0), seg(2, 200, 300, 1000, 2*time.Hour), active(seg(3, 300, 301, 1, 0))}},
			clean: true, why: "older than max.compaction.lag.ms", firstDirty: 200, end: 300, rewrite: []uint64{1, 2}},
		{name: "a segment without timestamps (-1: the producer set none) is never overdue",
			now: 3 * time.Hour, c: Config{MinDirtyRatio: 0.9, MaxLag: 2 * time.Hour},
			p:   Partition{FirstDirty: 200, Segments: []Segment{seg(1, 0, 200, 9000, 0), untimed(seg(2, 200, 300, 1000, 0)), active(seg(3, 300, 301, 1, 0))}},
			why: "not above", firstDirty: 200, end: 300},
		{name: "tombstones go from segments first cleaned delete.retention.ms ago",
			now: 50 * time.Hour,
			p: Partition{FirstDirty: 200, Segments: []Segment{cleaned(seg(1, 0, 100, 100, 0), time.Hour), cleaned(seg(2, 100, 200, 100, 0), 40*time.Hour),
				seg(3, 200, 300, 1000, 0), active(seg(4, 300, 301, 1, 0))}},
			clean: true, why: "is above", firstDirty: 200, end: 300, rewrite: []uint64{1, 2, 3}, drop: []uint64{1}},
		{name: "a frozen segment keeps every tombstone above it: the value it deleted may be in the cold copy",
			now: 50 * time.Hour,
			p: Partition{FirstDirty: 200, Segments: []Segment{frozen(seg(1, 0, 100, 100, 0)), cleaned(seg(2, 100, 200, 100, 0), time.Hour),
				seg(3, 200, 300, 1000, 0), active(seg(4, 300, 301, 1, 0))}},
			clean: true, why: "is above", firstDirty: 200, end: 300, rewrite: []uint64{2, 3}},
		{name: "the checkpoint below the first cleanable segment starts at that segment",
			now:   time.Hour,
			p:     Partition{Segments: []Segment{frozen(seg(1, 0, 100, 100, 0)), seg(2, 100, 200, 100, 0), active(seg(3, 200, 201, 1, 0))}},
			clean: true, why: "is above", firstDirty: 100, end: 200, rewrite: []uint64{2}},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			c := tc.c
			if c == (Config{}) {
				c = cfg
			}
			plan := PlanPartition(t0.Add(tc.now), tc.p, c)
			if plan.Clean != tc.clean || !strings.Contains(plan.Why, tc.why) {
				t.Fatalf("clean %v (%s); want %v (%s)", plan.Clean, plan.Why, tc.clean, tc.why)
			}
			if tc.end != 0 && (plan.FirstDirty != tc.firstDirty || plan.End != tc.end) {
				t.Errorf("dirty [%d, %d); want [%d, %d)", plan.FirstDirty, plan.End, tc.firstDirty, tc.end)
			}
			var rewrite, drop []uint64
			for _, r := range plan.Rewrite {
				rewrite = append(rewrite, r.No)
				if r.DropTombstones {
					drop = append(drop, r.No)
				}
			}
			if !slices.Equal(rewrite, tc.rewrite) || !slices.Equal(drop, tc.drop) {
				t.Errorf("rewrite %v dropping tombstones in %v; want %v and %v", rewrite, drop, tc.rewrite, tc.drop)
			}
		})
	}
}

func TestMapped(t *testing.T) {
	plan := PlanPartition(t0.Add(time.Hour), Partition{FirstDirty: 100, Segments: []Segment{
		seg(1, 0, 100, 100, 0), seg(2, 100, 200, 100, 0), seg(3, 200, 300, 100, 0), seg(4, 300, 400, 100, 0), active(seg(5, 400, 401, 1, 0)),
	}}, Config{MinDirtyRatio: 0.5})
	for _, tc := range []struct {
		mapped  uint64
		end     uint64
		rewrite []uint64
		err     string
	}{
		{mapped: 400, end: 400, rewrite: []uint64{1, 2, 3, 4}},
		{mapped: 350, end: 300, rewrite: []uint64{1, 2, 3}},
		{mapped: 300, end: 300, rewrite: []uint64{1, 2, 3}},
		{mapped: 299, end: 200, rewrite: []uint64{1, 2}},
		{mapped: 150, err: "before the end of the first dirty segment"},
	} {
		got, err := plan.Mapped(tc.mapped)
		if tc.err != "" {
			if err == nil || !strings.Contains(err.Error(), tc.err) || got.Clean {
				t.Errorf("mapped to %d: %+v, %v; want no cleaning and an error saying %q", tc.mapped, got, err, tc.err)
			}
			continue
		}
		var rewrite []uint64
		for _, r := range got.Rewrite {
			rewrite = append(rewrite, r.No)
		}
		if err != nil || got.End != tc.end || !slices.Equal(rewrite, tc.rewrite) {
			t.Errorf("mapped to %d: end %d rewriting %v (%v); want end %d rewriting %v", tc.mapped, got.End, rewrite, err, tc.end, tc.rewrite)
		}
	}
}

func TestKeep(t *testing.T) {
	m := NewOffsetMap(1 << 10)
	m.Put([]byte("a"), 10)
	m.Put([]byte("b"), 12)
	m.Put([]byte{}, 11)
	keep, drop := Rewrite{}, Rewrite{DropTombstones: true}
	for _, tc := range []struct {
		name string
		r    Rewrite
		rec  Record
		want bool
	}{
		{"an older value of a mapped key goes", keep, Record{Offset: 3, Key: []byte("a")}, false},
		{"the newest value of a key stays", keep, Record{Offset: 10, Key: []byte("a")}, true},
		{"a key the map does not hold stays (it is only in the clean part)", keep, Record{Offset: 1, Key: []byte("c")}, true},
		{"a record past the mapped part stays", keep, Record{Offset: 13, Key: []byte("a")}, true},
		{"a keyless record goes", keep, Record{Offset: 4}, false},
		{"the empty key is a key: its older value goes", keep, Record{Offset: 2, Key: []byte{}}, false},
		{"and its newest stays", keep, Record{Offset: 11, Key: []byte{}}, true},
		{"a newest tombstone stays within delete.retention.ms", keep, Record{Offset: 12, Key: []byte("b"), Tombstone: true}, true},
		{"a newest tombstone goes after it", drop, Record{Offset: 12, Key: []byte("b"), Tombstone: true}, false},
		{"a value stays where tombstones go", drop, Record{Offset: 10, Key: []byte("a")}, true},
		{"a superseded tombstone goes", keep, Record{Offset: 5, Key: []byte("b"), Tombstone: true}, false},
	} {
		if got := Keep(m, tc.r, tc.rec); got != tc.want {
			t.Errorf("%s: kept %v", tc.name, got)
		}
	}
}

func TestKeepBatch(t *testing.T) {
	for _, tc := range []struct {
		name          string
		kept          int
		producersLast bool
		want          bool
	}{
		{"a batch with a record left stays", 1, false, true},
		{"an emptied batch goes", 0, false, false},
		{"a producer's last batch stays emptied, for its sequence", 0, true, true},
	} {
		if got := KeepBatch(tc.kept, tc.producersLast); got != tc.want {
			t.Errorf("%s: kept %v", tc.name, got)
		}
	}
}
