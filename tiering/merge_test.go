package tiering

import (
	"fmt"
	"slices"
	"testing"
	"time"

	"strata/catalog"
)

func TestPlanMerges(t *testing.T) {
	now := time.Date(2026, 12, 4, 12, 0, 0, 0, time.UTC)
	// cold is segment no, offsets [100·no, 100·no+99], alone in object
	// "o{no}" of size bytes, tiered 2h ago, its records 2h old.
	cold := func(no uint64, bytes int64) catalog.Segment {
		at := now.Add(-2 * time.Hour)
		return catalog.Segment{No: no, State: catalog.Remote, StartOffset: 100 * no, EndOffset: 100*no + 99,
			ObjectKey: fmt.Sprintf("o%d", no), ObjectSize: bytes, TieredAt: at, MinTimestamp: at.UnixMilli(), MaxTimestamp: at.UnixMilli()}
	}
	in := func(s catalog.Segment, key string, bytes int64) catalog.Segment {
		s.ObjectKey, s.ObjectSize = key, bytes
		return s
	}
	state := func(s catalog.Segment, st catalog.State) catalog.Segment { s.State = st; return s }
	tiered := func(s catalog.Segment, ago time.Duration) catalog.Segment { s.TieredAt = now.Add(-ago); return s }
	recordsAt := func(s catalog.Segment, ago time.Duration) catalog.Segment {
		s.MinTimestamp, s.MaxTimestamp = now.Add(-ago).UnixMilli(), now.Add(-ago).UnixMilli()
		return s
	}
	shift := func(s catalog.Segment, by uint64) catalog.Segment { s.StartOffset += by; s.EndOffset += by; return s }
	p := MergePolicy{TargetBytes: 100, MinAge: time.Hour, MinObjects: 2}
	for _, tc := range []struct {
		name string
		segs []catalog.Segment
		p    MergePolicy
		want [][]string // each merge's object keys
	}{
		{name: "no target, no merging", segs: []catalog.Segment{cold(0, 10), cold(1, 10)}, p: MergePolicy{}},
		{name: "small objects pack up to the target",
			segs: []catalog.Segment{cold(0, 40), cold(1, 40), cold(2, 30), cold(3, 45), cold(4, 45)},
			want: [][]string{{"o0", "o1"}, {"o2", "o3"}}},
		{name: "one small object alone waits for another",
			segs: []catalog.Segment{cold(0, 40), cold(1, 90)}},
		{name: "a merge fills up to exactly the target",
			segs: []catalog.Segment{cold(0, 30), cold(1, 30), cold(2, 40)}, want: [][]string{{"o0", "o1", "o2"}}},
		{name: "an object of half the target or more is done: it ends the run and is never rewritten",
			segs: []catalog.Segment{cold(0, 10), cold(1, 50), cold(2, 10), cold(3, 10)}, want: [][]string{{"o2", "o3"}}},
		{name: "MinObjects: fewer small objects wait, until there are that many",
			segs: []catalog.Segment{cold(0, 10), cold(1, 10)}, p: MergePolicy{TargetBytes: 100, MinObjects: 3}},
		{name: "MinObjects reached",
			segs: []catalog.Segment{cold(0, 10), cold(1, 10), cold(2, 10)}, p: MergePolicy{TargetBytes: 100, MinObjects: 3},
			want: [][]string{{"o0", "o1", "o2"}}},
		{name: "MinObjects: fewer objects that make half the target merge",
			segs: []catalog.Segment{cold(0, 30), cold(1, 25)}, p: MergePolicy{TargetBytes: 100, MinObjects: 3},
			want: [][]string{{"o0", "o1"}}},
		{name: "a merge grows its biggest object by half at least: a merged object waits for neighbours that make it so",
			segs: []catalog.Segment{cold(0, 40), cold(1, 5), cold(2, 5), cold(3, 5)},
			want: [][]string{{"o1", "o2", "o3"}}},
		{name: "neighbours of half its size merge with it",
			segs: []catalog.Segment{cold(0, 40), cold(1, 10), cold(2, 10)},
			want: [][]string{{"o0", "o1", "o2"}}},
		{name: "an object holding offsets below the log start is left to retention: deleted records are not written again",
			segs: []catalog.Segment{cold(0, 10), cold(1, 10), cold(2, 10), cold(3, 10)}, p: MergePolicy{TargetBytes: 100, MinObjects: 2, LogStart: 150},
			want: [][]string{{"o2", "o3"}}},
		{name: "a segment with a local copy ends the run: a merge is one run of offsets only in the bucket",
			segs: []catalog.Segment{cold(0, 10), state(cold(1, 10), catalog.Uploading), cold(2, 10), cold(3, 10), state(cold(4, 10), catalog.Cold), cold(5, 10), state(cold(6, 10), catalog.Sealed)},
			want: [][]string{{"o2", "o3"}}},
		{name: "an object tiered less than MinAge ago waits: the partition is not quiet yet",
			segs: []catalog.Segment{cold(0, 10), cold(1, 10), tiered(cold(2, 10), time.Minute), cold(3, 10)},
			want: [][]string{{"o0", "o1"}}},
		{name: "an object merged before counts once, whatever its segments",
			segs: []catalog.Segment{in(cold(0, 0), "m", 40), in(cold(1, 0), "m", 40), cold(2, 30), cold(3, 20)},
			want: [][]string{{"m", "o2", "o3"}}},
		{name: "a gap in the offsets ends the run",
			segs: []catalog.Segment{cold(0, 10), shift(cold(1, 10), 5), cold(2, 10)}},
		{name: "MaxSpan: records more than it apart are not merged, so retention is kept close",
			segs: []catalog.Segment{recordsAt(cold(0, 10), 2*time.Hour), recordsAt(cold(1, 10), time.Hour), recordsAt(cold(2, 10), 10*time.Minute), recordsAt(cold(3, 10), time.Minute)},
			p:    MergePolicy{TargetBytes: 100, MinAge: time.Hour, MaxSpan: 90 * time.Minute, MinObjects: 2},
			want: [][]string{{"o0", "o1"}, {"o2", "o3"}}},
		{name: "MaxObjects bounds one merge's reads",
			segs: []catalog.Segment{cold(0, 1), cold(1, 1), cold(2, 1), cold(3, 1), cold(4, 1)},
			p:    MergePolicy{TargetBytes: 100, MaxObjects: 2, MinObjects: 2},
			want: [][]string{{"o0", "o1"}, {"o2", "o3"}}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			pol := tc.p
			if pol == (MergePolicy{}) && tc.name != "no target, no merging" {
				pol = p
			}
			var got [][]string
			for _, m := range PlanMerges(now, tc.segs, pol) {
				got = append(got, m.Objects)
				// Each object counts once, and every segment of a merged
				// object goes with it.
				var bytes int64
				seen := map[string]bool{}
				for _, s := range tc.segs {
					if !slices.Contains(m.Objects, s.ObjectKey) {
						continue
					}
					if !slices.ContainsFunc(m.Segments, func(x catalog.Segment) bool { return x.No == s.No }) {
						t.Errorf("merge %v leaves out segment %d of its object %s", m.Objects, s.No, s.ObjectKey)
					}
					if !seen[s.ObjectKey] {
						seen[s.ObjectKey], bytes = true, bytes+s.ObjectSize
					}
				}
				if bytes != m.Bytes || m.Bytes > pol.TargetBytes {
					t.Errorf("merge %v: %d bytes; its objects hold %d, the target is %d", m.Objects, m.Bytes, bytes, pol.TargetBytes)
				}
			}
			if fmt.Sprint(got) != fmt.Sprint(tc.want) {
				t.Errorf("merges %v; want %v", got, tc.want)
			}
		})
	}
}

// A quiet partition tiering one small object at a time: merging as
// planned, each run after each upload, rewrites a record a few times on
// its way to a done object (each rewrite grows the object holding it by
// half), not once per new neighbour, and leaves few objects to scan.
func TestMergingBoundsRewrites(t *testing.T) {
	now := time.Date(2026, 12, 4, 12, 0, 0, 0, time.UTC)
	p := MergePolicy{TargetBytes: 8192}
	var segs []catalog.Segment
	rewrites := map[uint64]int{} // by segment (one record each)
	merged := 0
	for no := range uint64(3000) {
		segs = append(segs, catalog.Segment{No: no, State: catalog.Remote, StartOffset: no, EndOffset: no,
			ObjectKey: fmt.Sprint("o", no), ObjectSize: 1})
		for _, m := range PlanMerges(now, segs, p) {
			merged++
			key := fmt.Sprint("m", merged)
			for i := range segs {
				if slices.Contains(m.Objects, segs[i].ObjectKey) {
					segs[i].ObjectKey, segs[i].ObjectSize = key, m.Bytes
					rewrites[segs[i].No]++
				}
			}
		}
	}
	most, objects := 0, map[string]bool{}
	for _, s := range segs {
		most = max(most, rewrites[s.No])
		objects[s.ObjectKey] = true
	}
	// log1.5(4096), the growth to a done object of half the target.
	if most > 21 || len(objects) > 100 {
		t.Fatalf("a record rewritten up to %d times, %d objects left of 3000 uploaded", most, len(objects))
	}
	t.Logf("3000 uploads: %d merges, a record rewritten at most %d times, %d objects left", merged, most, len(objects))
}
