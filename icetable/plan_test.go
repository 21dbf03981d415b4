package icetable

import (
	"fmt"
	"maps"
	"testing"

	"strata/tiering"
)

// obj is a manifest entry for offsets start to end of partition 0's folder.
func obj(start, end uint64) tiering.ManifestEntry {
	return tiering.ManifestEntry{Key: fmt.Sprintf("%020d-%020d.parquet", start, end), StartOffset: start, EndOffset: end,
		Records: end - start + 1, SegmentChecksum: uint32(start)}
}

func TestPlanCommit(t *testing.T) {
	for _, tc := range []struct {
		name      string
		committed map[int32]Range
		tiered    map[int32][]tiering.ManifestEntry
		logStart  map[int32]uint64
		// want: the added objects as "partition:start-end", the offsets after
		add      []string
		offsets  map[int32]Range
		hide     map[int32]uint64
		waiting  map[int32]uint64
		overlaps []string
	}{
		{name: "nothing tiered, nothing committed", offsets: map[int32]Range{}},
		{name: "a new table takes every object in order",
			tiered:  map[int32][]tiering.ManifestEntry{0: {obj(100, 199), obj(0, 99)}, 1: {obj(0, 9)}},
			add:     []string{"0:0-99", "0:100-199", "1:0-9"},
			offsets: map[int32]Range{0: {0, 199}, 1: {0, 9}}},
		{name: "a retried commit skips what the table holds",
			committed: map[int32]Range{0: {0, 99}},
			tiered:    map[int32][]tiering.ManifestEntry{0: {obj(0, 99), obj(100, 199)}},
			add:       []string{"0:100-199"},
			offsets:   map[int32]Range{0: {0, 199}}},
		{name: "a commit that landed though it said it failed: nothing again",
			committed: map[int32]Range{0: {0, 199}},
			tiered:    map[int32][]tiering.ManifestEntry{0: {obj(0, 99), obj(100, 199)}},
			offsets:   map[int32]Range{0: {0, 199}}},
		{name: "a gap after the table waits, and so does what follows it",
			committed: map[int32]Range{0: {0, 99}},
			tiered:    map[int32][]tiering.ManifestEntry{0: {obj(0, 99), obj(200, 299), obj(300, 399)}},
			offsets:   map[int32]Range{0: {0, 99}},
			waiting:   map[int32]uint64{0: 100}},
		{name: "a gap in a new table: the objects before it go in",
			tiered:  map[int32][]tiering.ManifestEntry{0: {obj(0, 99), obj(200, 299)}},
			add:     []string{"0:0-99"},
			offsets: map[int32]Range{0: {0, 99}},
			waiting: map[int32]uint64{0: 100}},
		{name: "an object across the committed end is refused, with what follows",
			committed: map[int32]Range{0: {0, 99}},
			tiered:    map[int32][]tiering.ManifestEntry{0: {obj(50, 149), obj(150, 199)}},
			offsets:   map[int32]Range{0: {0, 99}},
			overlaps:  []string{"0:50-149"}},
		{name: "an object across the committed start is the table's (a log start inside it hid its first rows)",
			committed: map[int32]Range{0: {100, 199}},
			tiered:    map[int32][]tiering.ManifestEntry{0: {obj(50, 149), obj(150, 199), obj(200, 299)}},
			add:       []string{"0:200-299"},
			offsets:   map[int32]Range{0: {100, 299}}},
		{name: "retention: a log start past whole files moves the table's start",
			committed: map[int32]Range{0: {0, 299}, 1: {0, 9}},
			tiered:    map[int32][]tiering.ManifestEntry{0: {obj(0, 99), obj(100, 199), obj(200, 299)}},
			logStart:  map[int32]uint64{0: 200},
			offsets:   map[int32]Range{0: {200, 299}, 1: {0, 9}},
			hide:      map[int32]uint64{0: 200}},
		{name: "DeleteRecords: a log start inside a kept file",
			committed: map[int32]Range{0: {0, 199}},
			tiered:    map[int32][]tiering.ManifestEntry{0: {obj(0, 99), obj(100, 199)}},
			logStart:  map[int32]uint64{0: 150},
			offsets:   map[int32]Range{0: {150, 199}},
			hide:      map[int32]uint64{0: 150}},
		{name: "a log start at or below the table's start removes nothing (a replayed delete)",
			committed: map[int32]Range{0: {150, 199}},
			tiered:    map[int32][]tiering.ManifestEntry{0: {obj(100, 199)}},
			logStart:  map[int32]uint64{0: 120},
			offsets:   map[int32]Range{0: {150, 199}}},
		{name: "retention took every file: the table is empty above its floor, and the expired object is not added back",
			committed: map[int32]Range{0: {0, 199}},
			tiered:    map[int32][]tiering.ManifestEntry{0: {obj(0, 99), obj(100, 199)}},
			logStart:  map[int32]uint64{0: 200},
			offsets:   map[int32]Range{0: {200, 199}},
			hide:      map[int32]uint64{0: 200}},
		{name: "after an empty floor the next object goes in",
			committed: map[int32]Range{0: {200, 199}},
			tiered:    map[int32][]tiering.ManifestEntry{0: {obj(100, 199), obj(200, 299)}},
			add:       []string{"0:200-299"},
			offsets:   map[int32]Range{0: {200, 299}}},
		{name: "a log start past the table and past objects not yet committed",
			committed: map[int32]Range{0: {0, 99}},
			tiered:    map[int32][]tiering.ManifestEntry{0: {obj(0, 99), obj(100, 199), obj(200, 299)}},
			logStart:  map[int32]uint64{0: 250},
			add:       []string{"0:200-299"},
			offsets:   map[int32]Range{0: {250, 299}},
			hide:      map[int32]uint64{0: 250}},
		{name: "a new partition whose log start is inside its first object: added, rows below hidden",
			tiered:   map[int32][]tiering.ManifestEntry{0: {obj(0, 99), obj(100, 199)}},
			logStart: map[int32]uint64{0: 150},
			add:      []string{"0:100-199"},
			offsets:  map[int32]Range{0: {150, 199}},
			hide:     map[int32]uint64{0: 150}},
		{name: "a partition's table starts at its first object (retention took the ones before)",
			tiered:  map[int32][]tiering.ManifestEntry{3: {obj(500, 599)}},
			add:     []string{"3:500-599"},
			offsets: map[int32]Range{3: {500, 599}}},
		{name: "objects below the table's start are not added back",
			committed: map[int32]Range{0: {500, 599}},
			tiered:    map[int32][]tiering.ManifestEntry{0: {obj(0, 99), obj(600, 699)}},
			add:       []string{"0:600-699"},
			offsets:   map[int32]Range{0: {500, 699}}},
		{name: "partitions are planned apart; one with no new objects keeps its offsets",
			committed: map[int32]Range{0: {0, 99}, 1: {0, 49}, 2: {0, 9}},
			tiered:    map[int32][]tiering.ManifestEntry{0: {obj(300, 399)}, 1: {obj(50, 99)}},
			add:       []string{"1:50-99"},
			offsets:   map[int32]Range{0: {0, 99}, 1: {0, 99}, 2: {0, 9}},
			waiting:   map[int32]uint64{0: 100}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			before := maps.Clone(tc.committed)
			p := PlanCommit(tc.committed, tc.tiered, tc.logStart)
			names := func(fs []File) []string {
				var out []string
				for _, f := range fs {
					out = append(out, fmt.Sprintf("%d:%d-%d", f.Partition, f.StartOffset, f.EndOffset))
				}
				return out
			}
			if g, w := fmt.Sprint(names(p.Add)), fmt.Sprint(tc.add); g != w {
				t.Errorf("adds %s, want %s", g, w)
			}
			if !maps.Equal(p.Offsets, tc.offsets) {
				t.Errorf("offsets after: %v, want %v", p.Offsets, tc.offsets)
			}
			if !maps.Equal(p.Hide, tc.hide) {
				t.Errorf("hides below %v, want %v", p.Hide, tc.hide)
			}
			if !maps.Equal(p.Waiting, tc.waiting) {
				t.Errorf("waiting: %v, want %v", p.Waiting, tc.waiting)
			}
			if g, w := fmt.Sprint(names(p.Overlaps)), fmt.Sprint(tc.overlaps); g != w {
				t.Errorf("overlaps %s, want %s", g, w)
			}
			if !maps.Equal(tc.committed, before) {
				t.Errorf("the plan changed its input: %v, was %v", tc.committed, before)
			}
			// The summary says what the next plan starts from.
			back, err := Committed(p.Summary())
			if err != nil || !maps.Equal(back, p.Offsets) {
				t.Errorf("Committed(Summary()) = %v, %v; want %v", back, err, p.Offsets)
			}
			// The commit's last snapshot holds what the plan says.
			if steps := p.Steps(); p.Changes() && (len(steps) == 0 || !maps.Equal(steps[len(steps)-1].Offsets, p.Offsets)) {
				t.Errorf("the commit's snapshots %+v; want the last to hold the plan's offsets %v", steps, p.Offsets)
			}
			// Planning again from the result adds nothing: a retry is a no-op.
			if again := PlanCommit(back, tc.tiered, tc.logStart); again.Changes() {
				t.Errorf("planned again from its own summary, it adds %v and hides below %v", names(again.Add), again.Hide)
			}
		})
	}
}

// DeleteTopics: a deleted partition leaves the table, offsets and all, so
// one made again under its name starts afresh; a replay forgets nothing.
func TestPlanForget(t *testing.T) {
	committed := map[int32]Range{0: {0, 99}, 1: {50, 199}}
	p := PlanForget(committed, []int32{1, 7})
	if fmt.Sprint(p.Forget) != "[1]" || !maps.Equal(p.Offsets, map[int32]Range{0: {0, 99}}) || len(p.Add) != 0 {
		t.Fatalf("forget 1 and 7: %+v", p)
	}
	back, err := Committed(p.Summary())
	if err != nil {
		t.Fatal(err)
	}
	if again := PlanForget(back, []int32{1, 7}); again.Changes() {
		t.Fatalf("a replayed forget: %+v", again)
	}
	if again := PlanCommit(back, map[int32][]tiering.ManifestEntry{1: {obj(0, 9)}}, nil); fmt.Sprint(again.Offsets[1]) != "{0 9}" {
		t.Fatalf("the partition made again: %+v", again)
	}
	if len(committed) != 2 {
		t.Fatalf("the plan changed its input: %v", committed)
	}
}

// A commit's snapshots each say what they hold: an append's summary
// carries the offsets of the files it has, a later hide's the floor.
func TestStepsSayWhatEachSnapshotHolds(t *testing.T) {
	for _, tc := range []struct {
		name      string
		committed map[int32]Range
		tiered    map[int32][]tiering.ManifestEntry
		logStart  map[int32]uint64
		want      []string // each step: its kind, partition and offsets after
	}{
		{name: "a partition new to the table, its log start inside its first object",
			tiered: map[int32][]tiering.ManifestEntry{0: {obj(0, 99), obj(100, 199)}}, logStart: map[int32]uint64{0: 40},
			want: []string{"append: map[0:{0 199}]", "hide 0 below 40: map[0:{40 199}]"}},
		{name: "a log start past the table's files, inside an object added",
			committed: map[int32]Range{0: {0, 99}, 1: {0, 9}},
			tiered:    map[int32][]tiering.ManifestEntry{0: {obj(0, 99), obj(100, 199), obj(200, 299)}},
			logStart:  map[int32]uint64{0: 250},
			want: []string{"hide 0 below 250: map[0:{250 249} 1:{0 9}]", "append: map[0:{200 299} 1:{0 9}]",
				"hide 0 below 250: map[0:{250 299} 1:{0 9}]"}},
		{name: "a log start inside a file the table holds, and an object added after",
			committed: map[int32]Range{0: {0, 99}},
			tiered:    map[int32][]tiering.ManifestEntry{0: {obj(0, 99), obj(100, 199)}},
			logStart:  map[int32]uint64{0: 50},
			want:      []string{"hide 0 below 50: map[0:{50 99}]", "append: map[0:{50 199}]"}},
		{name: "a floor with no file, moved inside an object added",
			committed: map[int32]Range{0: {100, 99}},
			tiered:    map[int32][]tiering.ManifestEntry{0: {obj(150, 299)}},
			logStart:  map[int32]uint64{0: 200},
			want:      []string{"append: map[0:{150 299}]", "hide 0 below 200: map[0:{200 299}]"}},
		{name: "two partitions' log starts, one delete each",
			committed: map[int32]Range{0: {0, 99}, 1: {0, 99}},
			logStart:  map[int32]uint64{0: 50, 1: 200},
			want:      []string{"hide 0 below 50: map[0:{50 99} 1:{0 99}]", "hide 1 below 200: map[0:{50 99} 1:{200 199}]"}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			p := PlanCommit(tc.committed, tc.tiered, tc.logStart)
			var got []string
			for _, s := range p.Steps() {
				switch s.Kind {
				case StepAppend:
					got = append(got, fmt.Sprintf("append: %v", s.Offsets))
					if s.Summary(p)["strata.segments.0"] == "" {
						t.Errorf("the append's summary %v names no segment", s.Summary(p))
					}
				case StepHide:
					got = append(got, fmt.Sprintf("hide %d below %d: %v", s.Partition, s.Below, s.Offsets))
					if seg := s.Summary(p)["strata.segments.0"]; seg != "" {
						t.Errorf("a delete's summary names segments %s", seg)
					}
				}
			}
			if fmt.Sprint(got) != fmt.Sprint(tc.want) {
				t.Errorf("steps:\n%v\nwant\n%v", got, tc.want)
			}
		})
	}
}

func TestSummaryNamesTheSegmentsAdded(t *testing.T) {
	p := PlanCommit(nil, map[int32][]tiering.ManifestEntry{2: {obj(0, 99), obj(100, 199)}}, nil)
	s := p.Summary()
	if g, w := s["strata.segments.2"], "0-99:00000000,100-199:00000064"; g != w {
		t.Fatalf("strata.segments.2 = %q, want %q", g, w)
	}
	if g := s["strata.offsets.2"]; g != "0-199" {
		t.Fatalf("strata.offsets.2 = %q", g)
	}
}

func TestCommittedRefusesWhatItCannotRead(t *testing.T) {
	for _, v := range []map[string]string{
		{"strata.offsets.0": "12"},
		{"strata.offsets.x": "0-1"},
		{"strata.offsets.-1": "0-1"},
		{"strata.offsets.0": "9-3"},
		{"strata.offsets.0": "a-3"},
		{"strata.offsets.0": "9-7"},
	} {
		if got, err := Committed(v); err == nil {
			t.Errorf("Committed(%v) = %v, want an error", v, got)
		}
	}
	if got, err := Committed(map[string]string{"strata.offsets.0": "9-8"}); err != nil || !got[0].Empty() {
		t.Errorf("an empty range above its floor: %v, %v", got, err)
	}
	got, err := Committed(map[string]string{"added-data-files": "3", "operation": "append"})
	if err != nil || len(got) != 0 {
		t.Errorf("a summary strata did not write: %v, %v; want nothing committed", got, err)
	}
}

// The summary comes from the bucket, which other writers share: whatever
// it holds, Committed returns ranges or an error, never panics, and what it
// accepts writes back to the same.
func FuzzCommitted(f *testing.F) {
	f.Add("strata.offsets.0", "0-99", "strata.segments.0", "0-99:0000002a")
	f.Add("strata.offsets.7", "18446744073709551615-18446744073709551615", "operation", "append")
	f.Add("strata.offsets.-1", "5-", "strata.offsets.", "-")
	f.Fuzz(func(t *testing.T, k1, v1, k2, v2 string) {
		got, err := Committed(map[string]string{k1: v1, k2: v2})
		if err != nil {
			return
		}
		back, err := Committed(Plan{Offsets: got}.Summary())
		if err != nil || !maps.Equal(back, got) {
			t.Fatalf("Committed(%q=%q, %q=%q) = %v, which writes back as %v (%v)", k1, v1, k2, v2, got, back, err)
		}
	})
}

func FuzzMetadataVersion(f *testing.F) {
	f.Add("00003-0f4c5f5e-5b9d-4d3a-9d7e-3f5e7c1a2b3c")
	f.Add("-")
	f.Fuzz(func(t *testing.T, stem string) {
		if v, err := metadataVersion(stem); err == nil && v < 0 {
			t.Fatalf("metadataVersion(%q) = %d", stem, v)
		}
	})
}
