package segment

import (
	"errors"
	"os"
	"testing"

	"strata/engine/record"
)

// A sealed segment cut short on disk (its last 4 KiB lost) is found at
// start, by one stat against its seal: the shard reports the damage from
// the segment's first offset, for a replica to refill it. A scrub finds a
// flipped byte the same way; a shard made again starts clean.
func TestDamageFoundAtStartAndByScrub(t *testing.T) {
	cfg := testConfig(t.TempDir())
	cfg.MaxSegmentBytes, cfg.RollCheckInterval = 8192, 5
	e := open(t, cfg)
	fill(t, e, "d-0", 200)
	fill(t, e, "d-1", 200)
	if d := e.Damage("d-0"); d != nil {
		t.Fatalf("an intact shard reports damage: %v", d)
	}
	segs, _ := e.Segments("d-0")
	if len(segs) < 3 {
		t.Fatalf("%d segments: the test needs sealed ones", len(segs))
	}
	cut := segs[1]
	path := segmentPath(e.shards["d-0"].dir, cut.No)
	other := segmentPath(e.shards["d-1"].dir, 1)
	e.Close()
	os.Chmod(path, 0o644)
	if err := os.Truncate(path, cut.Size-4096); err != nil {
		t.Fatal(err)
	}
	e = open(t, cfg)
	d := e.Damage("d-0")
	if d == nil || d.Segment != cut.No || d.From != cut.StartOffset || !errors.Is(d, record.ErrCorrupt) {
		t.Fatalf("damage after a sealed segment lost its last 4 KiB: %v; want segment %d from offset %d", d, cut.No, cut.StartOffset)
	}
	if from, err := e.DamagedFrom("d-0"); err == nil || from != cut.StartOffset {
		t.Fatalf("DamagedFrom: %d, %v", from, err)
	}
	if d := e.Damage("d-1"); d != nil {
		t.Fatalf("the other shard reports damage: %v", d)
	}
	e.Close()

	data, _ := os.ReadFile(other)
	data[len(data)/2] ^= 0xff
	os.Chmod(other, 0o644)
	os.WriteFile(other, data, 0o444)
	e = open(t, cfg)
	defer e.Close()
	if d := e.Damage("d-1"); d != nil {
		t.Fatalf("a flipped byte is found before a scrub: %v", d)
	}
	if err := e.Scrub(ctx, "d-1"); !errors.Is(err, record.ErrCorrupt) {
		t.Fatalf("scrub: %v", err)
	}
	if d := e.Damage("d-1"); d == nil || d.Segment != 1 {
		t.Fatalf("damage after the scrub: %v; want segment 1", d)
	}
	if err := e.DeleteShard(ctx, "d-1"); err != nil {
		t.Fatal(err)
	}
	if err := e.CreateShardAt(ctx, "d-1", 0); err != nil {
		t.Fatal(err)
	}
	if d := e.Damage("d-1"); d != nil {
		t.Fatalf("a shard made again reports the old copy's damage: %v", d)
	}
}

// An active segment cut below its synced mark (acknowledged bytes lost) is
// damage from the first record lost: the shard refuses writes, and reports
// where a replica's refill must start.
func TestDamageInActiveSegment(t *testing.T) {
	cfg := testConfig(t.TempDir())
	e := open(t, cfg)
	fill(t, e, "a-0", 100)
	path := segmentPath(e.shards["a-0"].dir, 0)
	e.Close()
	st, _ := os.Stat(path)
	if err := os.Truncate(path, st.Size()/2); err != nil {
		t.Fatal(err)
	}
	e = open(t, cfg)
	defer e.Close()
	d := e.Damage("a-0")
	end, _ := e.LogEnd(ctx, "a-0")
	if d == nil || d.Segment != 0 || d.From != end || d.From == 0 || d.From >= 100 {
		t.Fatalf("damage after the active segment lost synced bytes: %v (log end %d)", d, end)
	}
}
