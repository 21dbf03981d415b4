package segment

import (
	"bytes"
	"errors"
	"fmt"
	"os"
	"slices"
	"strings"
	"testing"
	"time"

	"strata/engine/record"
	"strata/engine/store"
	"strata/engine/store/storetest"
)

func TestDropDecision(t *testing.T) {
	now := time.UnixMilli(1_000_000_000)
	day := int64(24 * time.Hour / time.Millisecond)
	segs := []SegmentInfo{
		{No: 0, EndOffset: 99, MaxTimestamp: now.UnixMilli() - 3*day, Size: 100, Sealed: true},
		{No: 1, EndOffset: 199, MaxTimestamp: now.UnixMilli() - 2*day, Size: 100, Sealed: true},
		{No: 2, EndOffset: 299, MaxTimestamp: now.UnixMilli() - 1, Size: 100, Sealed: true},
		{No: 3, EndOffset: 350, MaxTimestamp: now.UnixMilli(), Size: 50, Sealed: false},
	}
	for _, tc := range []struct {
		name    string
		low     uint64
		p       RetentionPolicy
		mayDrop func(uint64) bool
		want    []uint64
	}{
		{"no policy keeps everything", 0, RetentionPolicy{}, nil, nil},
		{"below the low watermark", 150, RetentionPolicy{}, nil, []uint64{0}},
		{"low watermark past two", 200, RetentionPolicy{}, nil, []uint64{0, 1}},
		{"by age", 0, RetentionPolicy{MaxAge: 36 * time.Hour}, nil, []uint64{0, 1}},
		{"by bytes: 350 down to 150", 0, RetentionPolicy{MaxBytes: 200}, nil, []uint64{0, 1}},
		{"bytes just fit", 0, RetentionPolicy{MaxBytes: 350}, nil, nil},
		{"the active segment never goes", 1000, RetentionPolicy{MaxBytes: 1}, nil, []uint64{0, 1, 2}},
		{"tiering holds segment 1 back", 0, RetentionPolicy{MaxAge: time.Hour}, func(no uint64) bool { return no != 1 }, []uint64{0}},
	} {
		got := DropDecision(now, segs, tc.low, tc.p, tc.mayDrop)
		if !slices.Equal(got, tc.want) {
			t.Errorf("%s: drop %v, want %v", tc.name, got, tc.want)
		}
	}
}

func TestRetentionDeletesOldSegments(t *testing.T) {
	cfg := testConfig(t.TempDir())
	cfg.MaxSegmentBytes, cfg.RollCheckInterval = 2048, 5
	e := open(t, cfg)
	defer e.Close()
	all := fill(t, e, "ret-0", 100)
	segs, _ := e.Segments("ret-0")
	if len(segs) < 4 {
		t.Fatalf("only %d segments", len(segs))
	}
	if err := e.DeleteBefore(ctx, "ret-0", segs[2].StartOffset+1); err != nil {
		t.Fatal(err)
	}
	n, err := e.ApplyRetention(ctx, RetentionPolicy{}, nil)
	if err != nil || n != 2 {
		t.Fatalf("ApplyRetention deleted %d segments, %v; want the 2 wholly below the low watermark", n, err)
	}
	after, _ := e.Segments("ret-0")
	if after[0].No != segs[2].No {
		t.Fatalf("after retention the manifest starts at segment %d, want %d", after[0].No, segs[2].No)
	}
	for _, s := range segs[:2] {
		if _, err := os.Stat(segmentPath(e.shards["ret-0"].dir, s.No)); !os.IsNotExist(err) {
			t.Fatalf("segment %d's file is still there", s.No)
		}
	}
	low, _, _ := e.Watermarks(ctx, "ret-0")
	storetest.Equal(t, storetest.ReadAll(t, e, "ret-0", low), all[low:])
	var oor *store.OutOfRangeError
	if _, err := e.Read(ctx, "ret-0", 0, store.Budget{}); !errors.As(err, &oor) {
		t.Fatalf("read of a deleted offset: %v", err)
	}
	// Byte budget: everything sealed goes, the active segment stays.
	if _, err := e.ApplyRetention(ctx, RetentionPolicy{MaxBytes: 1}, nil); err != nil {
		t.Fatal(err)
	}
	if segs, _ := e.Segments("ret-0"); segs[len(segs)-1].State != SegmentActive || len(e.shards["ret-0"].segments) != 1 {
		t.Fatalf("after a 1-byte budget %d local segments remain", len(e.shards["ret-0"].segments))
	}
}

// A follower that copies the leader's records at their offsets ends with
// byte-identical segments, and the checksums say so.
// A follower that copies its leader with AppendAt and rolls where the
// leader rolled (RollAt) holds the leader's bytes segment for segment, across
// several rolls: same boundaries, same checksums, same files.
func TestFollowerCopyIsByteIdentical(t *testing.T) {
	// From 0, and from where an earlier leader's log stopped
	// (CreateShardAt): both copies begin there.
	for _, start := range []uint64{0, 12345} {
		t.Run(fmt.Sprintf("from %d", start), func(t *testing.T) { testFollowerCopy(t, start) })
	}
}

func testFollowerCopy(t *testing.T, start uint64) {
	cfg := testConfig(t.TempDir())
	cfg.MaxSegmentBytes, cfg.RollCheckInterval = 2048, 5
	leader := open(t, cfg)
	defer leader.Close()
	// The follower's own gates would roll elsewhere: smaller segments.
	fcfg := testConfig(t.TempDir())
	fcfg.MaxSegmentBytes, fcfg.RollCheckInterval = 512, 1
	follower := open(t, fcfg)
	defer follower.Close()
	fillAt(t, leader, "rep-0", start, 200)
	segs, _ := leader.Segments("rep-0")
	if len(segs) < 4 {
		t.Fatalf("the leader rolled %d times; the test needs several", len(segs)-1)
	}
	if err := follower.CreateShardAt(ctx, "rep-0", start); err != nil {
		t.Fatal(err)
	}
	if segs[0].StartOffset != start {
		t.Fatalf("the leader's first segment starts at %d, want %d", segs[0].StartOffset, start)
	}
	for i, s := range segs {
		end := s.EndOffset + 1
		if s.State == SegmentActive {
			_, end, _ = leader.Watermarks(ctx, "rep-0")
		}
		recs, err := leader.Read(ctx, "rep-0", s.StartOffset, store.Budget{MaxRecords: int(end - s.StartOffset)})
		if err != nil {
			t.Fatal(err)
		}
		// Copied in two pieces, as a follower's fetches would.
		half := len(recs) / 2
		if err := follower.AppendAt(ctx, "rep-0", recs[:half]); err != nil {
			t.Fatal(err)
		}
		if i == 1 {
			if err := follower.AppendAt(ctx, "rep-0", recs[half+1:]); err == nil || !strings.Contains(err.Error(), "next offset is") {
				t.Fatalf("a gap in a follower's copy: %v", err)
			}
			if err := follower.RollAt(ctx, "rep-0", end); err == nil {
				t.Fatal("a roll where the follower's log does not end was accepted")
			}
		}
		if err := follower.AppendAt(ctx, "rep-0", recs[half:]); err != nil {
			t.Fatal(err)
		}
		if s.State != SegmentActive {
			if err := follower.RollAt(ctx, "rep-0", end); err != nil {
				t.Fatal(err)
			}
		}
	}
	fsegs, _ := follower.Segments("rep-0")
	if len(fsegs) != len(segs) {
		t.Fatalf("the follower has %d segments, the leader %d", len(fsegs), len(segs))
	}
	for i, s := range segs {
		if fsegs[i].StartOffset != s.StartOffset || fsegs[i].State != s.State || fsegs[i].Checksum != s.Checksum {
			t.Fatalf("segment %d: follower %+v, leader %+v", i, fsegs[i], s)
		}
		lc, ls, err1 := leader.Checksum(ctx, "rep-0", s.No)
		fc, fs, err2 := follower.Checksum(ctx, "rep-0", s.No)
		if err1 != nil || err2 != nil || lc != fc || ls != fs || ls == 0 {
			t.Fatalf("segment %d checksums: leader %08x/%d, follower %08x/%d (%v %v)", s.No, lc, ls, fc, fs, err1, err2)
		}
		a, _ := os.ReadFile(segmentPath(leader.shards["rep-0"].dir, s.No))
		b, _ := os.ReadFile(segmentPath(follower.shards["rep-0"].dir, s.No))
		if !bytes.Equal(a, b) {
			t.Fatalf("segment %d: the follower's file differs from the leader's", s.No)
		}
	}
	storetest.Equal(t, storetest.ReadAll(t, follower, "rep-0", start), storetest.ReadAll(t, leader, "rep-0", start))
}

func TestScrubFindsCorruptSealedSegment(t *testing.T) {
	cfg := testConfig(t.TempDir())
	cfg.MaxSegmentBytes, cfg.RollCheckInterval = 2048, 5
	e := open(t, cfg)
	fill(t, e, "sc-0", 60)
	if err := e.Scrub(ctx, "sc-0"); err != nil {
		t.Fatalf("scrub of intact segments: %v", err)
	}
	path := segmentPath(e.shards["sc-0"].dir, 1)
	segs, _ := e.Segments("sc-0")
	e.Close()
	data, _ := os.ReadFile(path)
	data[len(data)/2] ^= 0xff
	os.Chmod(path, 0o644)
	os.WriteFile(path, data, 0o444)
	e = open(t, cfg)
	defer e.Close()
	if err := e.Scrub(ctx, "sc-0"); !errors.Is(err, record.ErrCorrupt) || !strings.Contains(err.Error(), path) {
		t.Fatalf("scrub of a damaged sealed segment: %v; want ErrCorrupt naming %s", err, path)
	}
	// Reading it fails loudly, naming the file, instead of returning wrong data.
	_, err := e.Read(ctx, "sc-0", segs[1].StartOffset, store.Budget{MaxRecords: 1000})
	if !errors.Is(err, record.ErrCorrupt) || !strings.Contains(err.Error(), path) {
		t.Fatalf("read across a damaged record: %v; want ErrCorrupt naming %s", err, path)
	}
}
