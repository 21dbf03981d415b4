package segment

import (
	"context"
	"fmt"
	"os"
	"path/filepath"
	"reflect"
	"slices"
	"sort"
	"strings"
	"testing"
	"time"

	"strata/cleaner"
	"strata/engine/index"
	"strata/engine/record"
	"strata/engine/store"
	"strata/engine/store/storetest"
)

// cleanConfig is an engine whose segments seal every few records, so a
// log of a few hundred records has many sealed segments to clean.
func cleanConfig(dir string) Config {
	cfg := testConfig(dir)
	cfg.MaxSegmentBytes = 4096
	cfg.RollCheckInterval = 10
	cfg.IndexInterval = 7
	return cfg
}

// cleanNow cleans everything sealed: no lag, any dirty ratio.
var cleanNow = CleanOptions{Config: cleaner.Config{MinDirtyRatio: 0, DeleteRetention: 24 * time.Hour}, MapBytes: 1 << 20}

// fillCompacted appends n records of storetest.Records (7 keys, tombstones,
// some without a key) in batches of 5 and returns them, offsets set.
func fillCompacted(t *testing.T, e *Engine, shard string, n int) []record.Record {
	t.Helper()
	if err := e.CreateShard(ctx, shard); err != nil {
		t.Fatal(err)
	}
	var all []record.Record
	for i := 0; len(all) < n; i++ {
		recs := storetest.Records(5, i)
		base, err := e.Append(ctx, shard, recs)
		if err != nil {
			t.Fatal(err)
		}
		for j := range recs {
			recs[j].Offset = base + uint64(j)
		}
		all = append(all, recs...)
	}
	return all
}

// compacted is what a cleaning of the records below end keeps, as the
// issue defines it: each key's newest record (a tombstone too, unless
// tombstones are dropped), no record without a key; from end on, all.
func compacted(all []record.Record, end uint64, dropTombstones bool) []record.Record {
	newest := map[string]uint64{}
	for _, r := range all {
		if r.Offset < end && r.Key != nil {
			newest[string(r.Key)] = r.Offset
		}
	}
	var out []record.Record
	for _, r := range all {
		switch {
		case r.Offset >= end:
		case r.Key == nil, newest[string(r.Key)] != r.Offset, r.Value == nil && dropTombstones:
			continue
		}
		out = append(out, r)
	}
	return out
}

func activeStart(t *testing.T, e *Engine, shard string) uint64 {
	t.Helper()
	segs, err := e.Segments(shard)
	if err != nil {
		t.Fatal(err)
	}
	return segs[len(segs)-1].StartOffset
}

// checkCompacted reads the shard as a consumer would (from offset 0, and
// from every offset, including those in gaps) and by key, and checks its
// files: one per segment, the generation the manifest names.
func checkCompacted(t *testing.T, e *Engine, shard string, want []record.Record) {
	t.Helper()
	storetest.Equal(t, storetest.ReadAll(t, e, shard, 0), want)
	_, high, err := e.Watermarks(ctx, shard)
	if err != nil {
		t.Fatal(err)
	}
	for off := uint64(0); off < high; off++ {
		// A fetch at an offset a cleaning removed gets the next record.
		i := sort.Search(len(want), func(i int) bool { return want[i].Offset >= off })
		got, err := e.Read(ctx, shard, off, store.Budget{MaxRecords: 1})
		if err != nil {
			t.Fatalf("read at %d: %v", off, err)
		}
		switch {
		case i == len(want) && len(got) != 0:
			t.Fatalf("read at %d: %d records past the last one kept", off, len(got))
		case i < len(want) && (len(got) != 1 || !reflect.DeepEqual(got[0], want[i])):
			t.Fatalf("read at %d: got %+v, want the record at %d", off, got, want[i].Offset)
		}
	}
	for k := 0; k < 7; k++ {
		key := []byte(fmt.Sprintf("key-%d", k))
		var wantKey []record.Record
		for _, r := range want {
			if string(r.Key) == string(key) {
				wantKey = append(wantKey, r)
			}
		}
		got, err := e.ReadByKey(ctx, shard, key, 0, store.Budget{})
		if err != nil {
			t.Fatal(err)
		}
		storetest.Equal(t, got, wantKey)
	}
	segs, err := e.Segments(shard)
	if err != nil {
		t.Fatal(err)
	}
	checkIndexPoints(t, e, shard, high, segs)
	var files []string
	for _, s := range segs {
		if s.Reindex {
			t.Errorf("segment %d still flagged for a reindex", s.No)
		}
		files = append(files, filepath.Base(cleanedPath("", s.No, s.Cleaned)))
	}
	ents, err := os.ReadDir(filepath.Join(e.cfg.Dir, shard))
	if err != nil {
		t.Fatal(err)
	}
	var have []string
	for _, ent := range ents {
		if _, _, ok := parseSegmentFile(ent.Name()); ok {
			have = append(have, ent.Name())
		}
	}
	sort.Strings(files)
	sort.Strings(have)
	if !slices.Equal(files, have) {
		t.Errorf("segment files %v, the manifest names %v", have, files)
	}
}

func TestCleanKeepsEachKeysNewestRecord(t *testing.T) {
	dir := t.TempDir()
	now := time.Date(2026, 12, 1, 0, 0, 0, 0, time.UTC)
	cfg := cleanConfig(dir)
	cfg.Now = func() time.Time { return now }
	e := open(t, cfg)
	all := fillCompacted(t, e, "c-0", 400)
	end := activeStart(t, e, "c-0")
	if end < 200 {
		t.Fatalf("only offsets below %d are sealed", end)
	}
	rep, err := e.Clean(ctx, "c-0", cleanNow)
	if err != nil {
		t.Fatal(err)
	}
	want := compacted(all, end, false)
	if !rep.Plan.Clean || rep.Segments == 0 || rep.BytesAfter >= rep.BytesBefore || rep.RecordsAfter+uint64(len(all))-uint64(len(want)) != rep.RecordsBefore {
		t.Fatalf("report %+v for %d records of which %d stay", rep, len(all), len(want))
	}
	checkCompacted(t, e, "c-0", want)

	// Nothing is dirty now: a second cleaning does nothing.
	if rep, err := e.Clean(ctx, "c-0", cleanNow); err != nil || rep.Plan.Clean {
		t.Fatalf("a second cleaning right after: %+v, %v", rep, err)
	}
	// Recovery serves the same cleaned log.
	e.Close()
	e = open(t, cfg)
	checkCompacted(t, e, "c-0", want)

	// More updates, then a cleaning past delete.retention.ms drops the
	// tombstones of segments cleaned a day before, with what they deleted.
	all = append(all, fillMore(t, e, "c-0", 200)...)
	now = now.Add(25 * time.Hour)
	end2 := activeStart(t, e, "c-0")
	if _, err := e.Clean(ctx, "c-0", cleanNow); err != nil {
		t.Fatal(err)
	}
	got := storetest.ReadAll(t, e, "c-0", 0)
	for _, r := range got {
		if r.Offset < end && r.Value == nil {
			t.Fatalf("tombstone at %d of a segment first cleaned a day ago survived the second cleaning", r.Offset)
		}
	}
	// Every key's newest value below end2 is there; nothing superseded came back.
	for _, w := range compacted(all, end2, false) {
		if w.Offset >= end2 || w.Value == nil {
			continue
		}
		if i := slices.IndexFunc(got, func(r record.Record) bool { return r.Offset == w.Offset }); i < 0 || !reflect.DeepEqual(got[i], w) {
			t.Fatalf("the newest value of %q (offset %d) is gone", w.Key, w.Offset)
		}
	}
	for _, r := range got {
		if r.Offset < end2 && !slices.ContainsFunc(compacted(all, end2, false), func(w record.Record) bool { return w.Offset == r.Offset }) {
			t.Fatalf("offset %d, superseded, is served", r.Offset)
		}
	}
}

func fillMore(t *testing.T, e *Engine, shard string, n int) []record.Record {
	t.Helper()
	var out []record.Record
	for i := 1000; len(out) < n; i++ {
		recs := storetest.Records(5, i)
		base, err := e.Append(ctx, shard, recs)
		if err != nil {
			t.Fatal(err)
		}
		for j := range recs {
			recs[j].Offset = base + uint64(j)
		}
		out = append(out, recs...)
	}
	return out
}

// A full offset map cleans what it covered, and says which setting to
// raise when it covers not even the first dirty segment.
func TestCleanWithASmallOffsetMap(t *testing.T) {
	e := open(t, cleanConfig(t.TempDir()))
	fillCompacted(t, e, "c-0", 300)
	o := cleanNow
	o.MapBytes = 24 * 3 // two keys
	if _, err := e.Clean(ctx, "c-0", o); err == nil || !strings.Contains(err.Error(), "cleaner.dedupe_buffer_bytes") {
		t.Fatalf("a map of two keys: %v", err)
	}
	if got := storetest.ReadAll(t, e, "c-0", 0); len(got) < 300 {
		t.Fatalf("a cleaning that could not start lost records: %d left", len(got))
	}
}

// Tiered segments and those tiering holds are never rewritten, and their
// presence keeps tombstones (an older copy of the log outside the
// cleaning may hold the values they delete).
func TestCleanLeavesFrozenSegments(t *testing.T) {
	e := open(t, cleanConfig(t.TempDir()))
	fillCompacted(t, e, "c-0", 300)
	before, _ := e.Segments("c-0")
	o := cleanNow
	o.Frozen = func(no uint64) bool { return no <= before[1].No }
	if _, err := e.Clean(ctx, "c-0", o); err != nil {
		t.Fatal(err)
	}
	after, _ := e.Segments("c-0")
	for i, s := range after {
		if frozen := s.No <= before[1].No; frozen != (s.Cleaned == 0) && i < len(after)-1 {
			t.Errorf("segment %d (frozen %v) cleaned %d times", s.No, frozen, s.Cleaned)
		}
	}
}

// cleanSteps are the crash points of a cleaning, in order.
var cleanSteps = []string{"clean:mapped", "clean:written", "clean:committed", "clean:reindexed", "clean:swapped", "clean:checkpoint"}

func cleanChild(dir, step string) {
	dieAt(step)
	e, err := Open(cleanConfig(dir))
	if err == nil {
		_, err = e.Clean(context.Background(), "c-0", cleanNow)
	}
	fmt.Fprintln(os.Stderr, "the child finished without reaching", step, err)
	os.Exit(3)
}

// Kill the process at every step of a cleaning: after a restart, every
// key's newest record is served at its offset, nothing is served that was
// not written there, the files are the manifest's, and a cleaning run
// again gives the log a cleaning without a crash gives.
func TestCleanCrashAtEveryStep(t *testing.T) {
	for _, step := range cleanSteps {
		t.Run(step, func(t *testing.T) {
			dir := t.TempDir()
			e := open(t, cleanConfig(dir))
			all := fillCompacted(t, e, "c-0", 400)
			end := activeStart(t, e, "c-0")
			e.Close()
			runKilled(t, "STRATA_CLEAN_DIR="+dir, "STRATA_CLEAN_STEP="+step)
			e = open(t, cleanConfig(dir))
			segs, _ := e.Segments("c-0")
			checkIndexPoints(t, e, "c-0", all[len(all)-1].Offset+1, segs)
			got := storetest.ReadAll(t, e, "c-0", 0)
			for _, w := range compacted(all, end, false) {
				if !slices.ContainsFunc(got, func(r record.Record) bool { return reflect.DeepEqual(r, w) }) {
					t.Fatalf("after a crash at %s the newest record of %q (offset %d) is not served", step, w.Key, w.Offset)
				}
			}
			for _, r := range got {
				if !reflect.DeepEqual(r, all[r.Offset]) {
					t.Fatalf("after a crash at %s offset %d serves another record than was written", step, r.Offset)
				}
			}
			if _, err := e.Clean(ctx, "c-0", cleanNow); err != nil {
				t.Fatal(err)
			}
			checkCompacted(t, e, "c-0", compacted(all, end, false))
		})
	}
}

// checkIndexPoints checks that every durable offset-index point names a
// record of its segment's file at the position it gives.
func checkIndexPoints(t *testing.T, e *Engine, shard string, high uint64, segs []SegmentMeta) {
	t.Helper()
	for off := uint64(0); off < high; off++ {
		at, no, pos, ok, err := index.FloorOffset(e.index, shard, off)
		if err != nil {
			t.Fatal(err)
		}
		if !ok {
			continue // below the first record kept: a read starts at the first segment's first byte
		}
		i := slices.IndexFunc(segs, func(s SegmentMeta) bool { return s.No == no })
		if i < 0 {
			t.Fatalf("an offset-index point names segment %d, not in the manifest", no)
		}
		b, err := os.ReadFile(filepath.Join(e.cfg.Dir, shard, filepath.Base(cleanedPath("", no, segs[i].Cleaned))))
		if err != nil {
			t.Fatal(err)
		}
		if got, _, err := record.Peek(b[pos:]); err != nil || got != at {
			t.Fatalf("the offset-index point (%d at byte %d of segment %d) names offset %d there (%v)", at, pos, no, got, err)
		}
	}
}

// Readers in flight while segments are swapped: every read succeeds, and
// every record it returns is the one written at its offset.
func TestCleanWhileReading(t *testing.T) {
	e := open(t, cleanConfig(t.TempDir()))
	all := fillCompacted(t, e, "c-0", 300)
	written := slices.Clone(all) // the reader's: appends go on meanwhile
	stop := make(chan struct{})
	errs := make(chan error, 1)
	go func() {
		defer close(errs)
		for {
			select {
			case <-stop:
				return
			default:
			}
			for from := uint64(0); from < uint64(len(written)); {
				recs, err := e.Read(ctx, "c-0", from, store.Budget{MaxRecords: 17})
				if err != nil {
					errs <- fmt.Errorf("read at %d: %w", from, err)
					return
				}
				if len(recs) == 0 {
					break
				}
				for _, r := range recs {
					if r.Offset < uint64(len(written)) && !reflect.DeepEqual(r, written[r.Offset]) {
						errs <- fmt.Errorf("offset %d serves another record than was written", r.Offset)
						return
					}
				}
				from = recs[len(recs)-1].Offset + 1
			}
		}
	}()
	scrubbed := make(chan struct{})
	go func() { // a scrub meanwhile takes no replaced file for damage
		defer close(scrubbed)
		for {
			select {
			case <-stop:
				return
			default:
			}
			e.Scrub(ctx, "c-0")
		}
	}()
	for i := 0; i < 5; i++ {
		more := fillMore(t, e, "c-0", 50)
		for _, r := range more {
			if r.Offset != uint64(len(all)) {
				t.Fatalf("offset %d appended after %d records", r.Offset, len(all))
			}
			all = append(all, r)
		}
		if _, err := e.Clean(ctx, "c-0", cleanNow); err != nil {
			t.Fatal(err)
		}
	}
	close(stop)
	<-scrubbed
	if err := <-errs; err != nil {
		t.Fatal(err)
	}
	if d := e.Damage("c-0"); d != nil {
		t.Fatalf("a scrub during the cleanings found damage: %+v", d)
	}
	checkCompacted(t, e, "c-0", compacted(all, activeStart(t, e, "c-0"), false))
}

// A segment tiering begins to upload during the cleaning is left as it
// is, the cleaning stops there, and the next one goes on.
func TestCleanStopsAtASegmentFrozenMeanwhile(t *testing.T) {
	e := open(t, cleanConfig(t.TempDir()))
	all := fillCompacted(t, e, "c-0", 300)
	end := activeStart(t, e, "c-0")
	asked := 0
	o := cleanNow
	o.Frozen = func(no uint64) bool {
		if no == 2 {
			asked++
		}
		return no == 2 && asked > 1 // not when planned, by its commit
	}
	rep, err := e.Clean(ctx, "c-0", o)
	if err != nil || rep.Stopped == "" || rep.Segments != 2 {
		t.Fatalf("report %+v, %v: want a stop after segments 0 and 1", rep, err)
	}
	segs, _ := e.Segments("c-0")
	if segs[0].Cleaned != 1 || segs[1].Cleaned != 1 || segs[2].Cleaned != 0 {
		t.Fatalf("generations %d %d %d, want 1 1 0", segs[0].Cleaned, segs[1].Cleaned, segs[2].Cleaned)
	}
	if _, err := e.Clean(ctx, "c-0", cleanNow); err != nil {
		t.Fatal(err)
	}
	checkCompacted(t, e, "c-0", compacted(all, end, false))
}

// A shard deleted, or the engine closed, while a cleaning runs: the
// cleaning finishes first, nothing of the shard comes back, and the
// engine opens again.
func TestCleanRacesDeleteAndClose(t *testing.T) {
	for _, what := range []string{"delete", "close"} {
		t.Run(what, func(t *testing.T) {
			dir := t.TempDir()
			e := open(t, cleanConfig(dir))
			fillCompacted(t, e, "c-0", 300)
			done := make(chan error, 1)
			started := false
			crashPoint = func(step string) {
				if step != "clean:committed" || started {
					return
				}
				started = true
				go func() {
					if what == "delete" {
						done <- e.DeleteShard(ctx, "c-0")
					} else {
						done <- e.Close()
					}
				}()
				time.Sleep(50 * time.Millisecond) // let it wait on the cleaning
			}
			defer func() { crashPoint = func(string) {} }()
			if _, err := e.Clean(ctx, "c-0", cleanNow); err != nil {
				t.Fatal(err)
			}
			if err := <-done; err != nil {
				t.Fatal(err)
			}
			e.Close()
			e = open(t, cleanConfig(dir))
			if what == "delete" {
				if err := e.CreateShard(ctx, "c-0"); err != nil {
					t.Fatal(err)
				}
				if got := storetest.ReadAll(t, e, "c-0", 0); len(got) != 0 {
					t.Fatalf("the re-created shard serves %d records", len(got))
				}
				e.Close()
				e = open(t, cleanConfig(dir)) // its manifest is whole: no segment of the old one came back
				if segs, _ := e.Segments("c-0"); len(segs) != 1 {
					t.Fatalf("the re-created shard has %d segments", len(segs))
				}
			}
		})
	}
}
