package segment

import (
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"reflect"
	"sync"
	"syscall"
	"testing"

	"strata/engine/record"
	"strata/engine/store"
	"strata/engine/store/storetest"
)

// A shard that begins at an offset (CreateShardAt): the shard a node makes
// when it takes over a partition at a segment roll, the earlier offsets
// staying on the node that wrote them.

// startEvents keeps what the listeners heard, whole.
type startEvents struct {
	mu        sync.Mutex
	created   []ShardMeta
	first     []SegmentMeta
	sealed    []SegmentMeta
	next      []SegmentMeta
	low       []uint64
	recovered map[string]ShardMeta
	segs      map[string][]SegmentMeta
}

func (ev *startEvents) listener() EventListener {
	ev.recovered, ev.segs = map[string]ShardMeta{}, map[string][]SegmentMeta{}
	lock := func() func() { ev.mu.Lock(); return ev.mu.Unlock }
	return EventListener{
		ShardCreated: func(sh ShardMeta, first SegmentMeta) error {
			defer lock()()
			ev.created, ev.first = append(ev.created, sh), append(ev.first, first)
			return nil
		},
		SegmentSealed: func(s, next SegmentMeta) error {
			defer lock()()
			ev.sealed, ev.next = append(ev.sealed, s), append(ev.next, next)
			return nil
		},
		LowWatermark: func(_ string, low uint64) error {
			defer lock()()
			ev.low = append(ev.low, low)
			return nil
		},
		ShardRecovered: func(sh ShardMeta, segs []SegmentMeta) error {
			defer lock()()
			ev.recovered[sh.Name], ev.segs[sh.Name] = sh, segs
			return nil
		},
	}
}

// checkStartSegments checks that a shard's segments begin at start and
// follow each other, that each local file's records are the offsets the
// manifest says, and that Checksum agrees with the manifest for the sealed.
func checkStartSegments(t *testing.T, e *Engine, shard string, start uint64) []SegmentMeta {
	t.Helper()
	segs, err := e.Segments(shard)
	if err != nil {
		t.Fatal(err)
	}
	next := start
	for i, s := range segs {
		if s.StartOffset != next {
			t.Fatalf("segment %d starts at %d, want %d", s.No, s.StartOffset, next)
		}
		rep := VerifyFile(segmentPath(e.shards[shard].dir, s.No), &next)
		if rep.Problem != nil {
			t.Fatalf("segment %d: %v", s.No, rep.Problem)
		}
		if i == len(segs)-1 {
			if s.State != SegmentActive {
				t.Fatalf("the last segment is %s", s.State)
			}
			if rep.Records > 0 && rep.FirstOffset != s.StartOffset {
				t.Fatalf("the active segment's file begins at offset %d; the manifest says %d", rep.FirstOffset, s.StartOffset)
			}
			break
		}
		if s.State != SegmentSealed || rep.FirstOffset != s.StartOffset || rep.LastOffset != s.EndOffset || uint64(rep.Records) != s.Records {
			t.Fatalf("segment %d, %s, offsets %d-%d (%d records); its file holds %d-%d (%d records)",
				s.No, s.State, s.StartOffset, s.EndOffset, s.Records, rep.FirstOffset, rep.LastOffset, rep.Records)
		}
		crc, size, err := e.Checksum(ctx, shard, s.No)
		if err != nil || crc != s.Checksum || size != s.Size {
			t.Fatalf("segment %d: Checksum %08x/%d, %v; sealed as %08x/%d", s.No, crc, size, err, s.Checksum, s.Size)
		}
		next = s.EndOffset + 1
	}
	return segs
}

// A shard made at a start offset rolls, seals, recovers, keeps its time
// index and gives up its oldest segments to retention as any other: every
// segment and event says where it begins.
func TestShardAtStartRollsSealsAndRecovers(t *testing.T) {
	for _, start := range []uint64{12345, 1 << 40} {
		t.Run(fmt.Sprint(start), func(t *testing.T) {
			var ev startEvents
			cfg := testConfig(t.TempDir())
			cfg.MaxSegmentBytes, cfg.RollCheckInterval, cfg.IndexInterval = 2048, 5, 7
			cfg.Events = ev.listener()
			e := open(t, cfg)
			want := fillAt(t, e, "at-0", start, 200)
			if want[0].Offset != start {
				t.Fatalf("the first record got offset %d, want %d", want[0].Offset, start)
			}
			e.SyncEvents()
			if len(ev.created) != 1 || ev.created[0].LowWatermark != start || ev.first[0].StartOffset != start || ev.first[0].No != 0 {
				t.Fatalf("ShardCreated told %+v, %+v; want low watermark and first segment at %d", ev.created, ev.first, start)
			}
			if m, _ := e.Shard("at-0"); m.LowWatermark != start {
				t.Fatalf("the manifest's low watermark is %d, want %d", m.LowWatermark, start)
			}
			segs := checkStartSegments(t, e, "at-0", start)
			if len(segs) < 4 {
				t.Fatalf("%d segments after 200 records in 2 KiB segments", len(segs))
			}
			if len(ev.sealed) != len(segs)-1 || ev.sealed[0].StartOffset != start || ev.next[len(ev.next)-1].StartOffset != segs[len(segs)-1].StartOffset {
				t.Fatalf("SegmentSealed told %d seals, the first from %d; the manifest has %d segments", len(ev.sealed), ev.sealed[0].StartOffset, len(segs))
			}
			check := func(e *Engine, low uint64, want []record.Record) {
				t.Helper()
				end := want[len(want)-1].Offset + 1
				if l, h, _ := e.Watermarks(ctx, "at-0"); l != low || h != end {
					t.Fatalf("watermarks %d, %d; want %d, %d", l, h, low, end)
				}
				storetest.Equal(t, storetest.ReadAll(t, e, "at-0", low), want[low-start:])
				var oor *store.OutOfRangeError
				if _, err := e.Read(ctx, "at-0", low-1, store.Budget{}); !errors.As(err, &oor) || oor.Low != low {
					t.Fatalf("read below the low watermark %d: %v", low, err)
				}
				// The time index points into segments that begin at the start.
				for _, i := range []int{0, 3, 57, 120, 199} {
					if uint64(i)+start < low {
						continue
					}
					ts := want[i].Timestamp
					exp := low
					for _, r := range want[low-start:] {
						if r.Timestamp >= ts {
							exp = r.Offset
							break
						}
					}
					if got, err := e.OffsetForTime(ctx, "at-0", ts); err != nil || got != exp {
						t.Errorf("OffsetForTime(%d) = %d, %v; want %d", ts, got, err, exp)
					}
				}
				if got, err := e.OffsetForTime(ctx, "at-0", want[len(want)-1].Timestamp+1_000_000); err != nil || got != end {
					t.Errorf("OffsetForTime past every record = %d, %v; want %d", got, err, end)
				}
			}
			check(e, start, want)
			e.Close()

			ev = startEvents{}
			cfg.Events = ev.listener()
			e = open(t, cfg)
			e.SyncEvents()
			if got := ev.recovered["at-0"]; got.LowWatermark != start || !reflect.DeepEqual(ev.segs["at-0"], segs) {
				t.Fatalf("ShardRecovered told low watermark %d and %d segments; want %d and the %d the manifest had",
					got.LowWatermark, len(ev.segs["at-0"]), start, len(segs))
			}
			check(e, start, want)
			checkStartSegments(t, e, "at-0", start)
			more := storetest.Records(5, 40)
			if base, err := e.Append(ctx, "at-0", append([]record.Record(nil), more...)); err != nil || base != start+200 {
				t.Fatalf("append after the restart: base %d, %v; want %d", base, err, start+200)
			}
			for i := range more {
				more[i].Offset = start + 200 + uint64(i)
			}
			want = append(want, more...)

			// Retention takes the two oldest segments, the first of which
			// began at the start.
			n, err := e.ApplyRetention(ctx, RetentionPolicy{MaxBytes: 1}, func(_ string, no uint64) bool { return no < 2 })
			if err != nil || n != 2 {
				t.Fatalf("retention deleted %d segments, %v; want 2", n, err)
			}
			low := segs[2].StartOffset
			e.SyncEvents()
			if len(ev.low) != 2 || ev.low[1] != low {
				t.Fatalf("LowWatermark told %v; want it to end at %d", ev.low, low)
			}
			check(e, low, want)
			e.Close()

			ev = startEvents{}
			cfg.Events = ev.listener()
			e = open(t, cfg)
			defer e.Close()
			e.SyncEvents()
			if got := ev.recovered["at-0"]; got.LowWatermark != low || ev.segs["at-0"][0].StartOffset != low {
				t.Fatalf("after retention, ShardRecovered told low watermark %d from segment %+v; want %d", got.LowWatermark, ev.segs["at-0"][0], low)
			}
			check(e, low, want)
			checkStartSegments(t, e, "at-0", low)
		})
	}
}

// A managed high watermark on a shard made at a start comes back as it was
// saved; a damaged file shows nothing above the low watermark, the start.
func TestShardAtStartHighWatermarkFile(t *testing.T) {
	const start = 12345
	for _, tc := range []struct {
		name   string
		damage bool
		hw     uint64
	}{
		{"kept", false, start + 3},
		{"damaged", true, start},
	} {
		t.Run(tc.name, func(t *testing.T) {
			cfg := testConfig(t.TempDir())
			e := open(t, cfg)
			if err := e.CreateShardAt(ctx, "hw-0", start); err != nil {
				t.Fatal(err)
			}
			if err := e.SetHighWatermark(ctx, "hw-0", 0); err != nil { // a follower's first: managed, at the start
				t.Fatal(err)
			}
			if err := e.AppendAt(ctx, "hw-0", replicaRecords(5, start, "k", 0)); err != nil {
				t.Fatal(err)
			}
			if err := e.SetHighWatermark(ctx, "hw-0", start+3); err != nil {
				t.Fatal(err)
			}
			e.Close()
			if tc.damage {
				if err := os.WriteFile(filepath.Join(cfg.Dir, "hw-0", highWatermarkFile), []byte("garbage"), 0o644); err != nil {
					t.Fatal(err)
				}
			}
			e = open(t, cfg)
			defer e.Close()
			low, hw, _ := e.Watermarks(ctx, "hw-0")
			end, _ := e.LogEnd(ctx, "hw-0")
			if low != start || hw != tc.hw || end != start+5 {
				t.Fatalf("after reopen: low %d, high watermark %d, log end %d; want %d, %d, %d", low, hw, end, start, tc.hw, start+5)
			}
			if err := e.TruncateTo(ctx, "hw-0", start-1); !errors.Is(err, store.ErrCommitted) {
				t.Fatalf("TruncateTo below the start: %v; want ErrCommitted", err)
			}
			if err := e.SetHighWatermark(ctx, "hw-0", start+5); err != nil {
				t.Fatal(err)
			}
			if got := storetest.ReadAll(t, e, "hw-0", start); len(got) != 5 || got[0].Offset != start {
				t.Fatalf("read %d records from the start", len(got))
			}
		})
	}
}

// startCrashChild makes "at-0" at offset startCrashOffset in a child
// process and dies by SIGKILL at the step named: one of CreateShardAt's
// crash points, or "appended" once 60 records (several segments) are
// acknowledged.
func startCrashChild(dir, step string) {
	dieAt(step)
	e, err := Open(startCrashConfig(dir))
	if err == nil {
		err = e.CreateShardAt(ctx, "at-0", startCrashOffset)
	}
	if err == nil && step == "appended" {
		recs := storetest.Records(60, 9)
		for i := 0; i < len(recs) && err == nil; i += 5 {
			_, err = e.Append(ctx, "at-0", recs[i:i+5])
		}
		if err == nil {
			syscall.Kill(os.Getpid(), syscall.SIGKILL)
			select {}
		}
	}
	fmt.Fprintln(os.Stderr, "the child finished without reaching", step, err)
	os.Exit(3)
}

const startCrashOffset = 12345

func startCrashConfig(dir string) Config {
	cfg := testConfig(dir)
	cfg.MaxSegmentBytes, cfg.RollCheckInterval = 2048, 5
	return cfg
}

// Kill the process at every step of making a shard at a start offset, and
// after appending to it: after a restart the shard begins at its start,
// holds what was acknowledged, and appends go on from there.
func TestShardAtStartSurvivesCrash(t *testing.T) {
	for _, tc := range []struct {
		step string
		recs int
	}{
		{"create:manifest", 0},
		{"create:mkdir", 0},
		{"create:segment", 0},
		{"appended", 60},
	} {
		t.Run(tc.step, func(t *testing.T) {
			dir := t.TempDir()
			runKilled(t, "STRATA_START_DIR="+dir, "STRATA_START_STEP="+tc.step)
			const start = startCrashOffset
			want := storetest.Records(tc.recs, 9)
			for i := range want {
				want[i].Offset = start + uint64(i)
			}
			e := open(t, startCrashConfig(dir))
			end := start + uint64(tc.recs)
			if low, hw, err := e.Watermarks(ctx, "at-0"); err != nil || low != start || hw != end {
				t.Fatalf("after a crash at %s: watermarks %d, %d, %v; want %d, %d", tc.step, low, hw, err, start, end)
			}
			if m, _ := e.Shard("at-0"); m.LowWatermark != start {
				t.Fatalf("after a crash at %s the manifest's low watermark is %d", tc.step, m.LowWatermark)
			}
			segs := checkStartSegments(t, e, "at-0", start)
			if tc.recs > 0 && len(segs) < 2 {
				t.Fatalf("after a crash at %s: %d segments; the test wants the child to have rolled", tc.step, len(segs))
			}
			storetest.Equal(t, storetest.ReadAll(t, e, "at-0", start), want)
			more := storetest.Records(3, 41)
			if base, err := e.Append(ctx, "at-0", append([]record.Record(nil), more...)); err != nil || base != end {
				t.Fatalf("append after a crash at %s: base %d, %v; want %d", tc.step, base, err, end)
			}
			for i := range more {
				more[i].Offset = end + uint64(i)
			}
			want = append(want, more...)
			e.Close()
			e = open(t, startCrashConfig(dir))
			defer e.Close()
			storetest.Equal(t, storetest.ReadAll(t, e, "at-0", start), want)
			checkStartSegments(t, e, "at-0", start)
		})
	}
}
