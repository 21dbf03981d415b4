package segment

import (
	"context"
	"hash/crc32"
	"os"
	"sync"
	"testing"
	"time"

	"strata/engine/store/storetest"
)

func TestShouldRoll(t *testing.T) {
	const interval, maxBytes = 10_000, 1000
	for _, tc := range []struct {
		name  string
		count uint64
		next  uint64
		n     int
		size  int64
		want  bool
	}{
		{"empty segment never rolls", 0, 9_999, 5, 5000, false},
		{"crosses, 90% full", 5, 9_998, 5, 900, true},
		{"crosses, not full", 5, 9_998, 5, 899, false},
		{"full, does not cross", 5, 10_001, 5, 950, false},
		{"lands exactly on the multiple", 5, 9_995, 5, 950, true},
		{"at the cap, whatever the offset", 5, 12_345, 1, 1000, true},
		{"past the cap", 5, 12_345, 1, 5000, true},
	} {
		if got := shouldRoll(tc.count, tc.next, tc.n, tc.size, interval, maxBytes); got != tc.want {
			t.Errorf("%s: shouldRoll = %v, want %v", tc.name, got, tc.want)
		}
	}
}

func TestSealedSegments(t *testing.T) {
	cfg := testConfig(t.TempDir())
	cfg.MaxSegmentBytes = 4096
	cfg.RollCheckInterval = 10
	e := open(t, cfg)
	defer e.Close()
	ctx := context.Background()
	e.CreateShard(ctx, "s-0")
	for i := 0; i < 40; i++ {
		if _, err := e.Append(ctx, "s-0", storetest.Records(5, i)); err != nil {
			t.Fatal(err)
		}
	}
	segs, err := e.Segments("s-0")
	if err != nil {
		t.Fatal(err)
	}
	if len(segs) < 3 {
		t.Fatalf("%d segments after 200 records in 4 KiB segments", len(segs))
	}
	var next uint64
	for i, s := range segs {
		if s.No != uint64(i) || s.StartOffset != next {
			t.Fatalf("segment %d: no %d starts at %d, want %d", i, s.No, s.StartOffset, next)
		}
		if i == len(segs)-1 {
			if s.State != SegmentActive {
				t.Fatalf("last segment is %s", s.State)
			}
			break
		}
		path := segmentPath(e.shards["s-0"].dir, s.No)
		data, err := os.ReadFile(path)
		if err != nil {
			t.Fatal(err)
		}
		fi, _ := os.Stat(path)
		switch {
		case s.State != SegmentSealed:
			t.Fatalf("segment %d is %s, want sealed", i, s.State)
		case s.Size != int64(len(data)) || s.Checksum != crc32.Checksum(data, castagnoli):
			t.Fatalf("segment %d: catalog says %d bytes crc %08x; file has %d bytes crc %08x", i, s.Size, s.Checksum, len(data), crc32.Checksum(data, castagnoli))
		case fi.Mode().Perm()&0o222 != 0:
			t.Fatalf("sealed segment %d is writable: %v", i, fi.Mode())
		case s.Records != s.EndOffset-s.StartOffset+1 || s.MinTimestamp > s.MaxTimestamp || s.SealedAt.IsZero():
			t.Fatalf("segment %d metadata: %+v", i, s)
		case s.Size > cfg.MaxSegmentBytes+1024:
			t.Fatalf("segment %d is %d bytes, cap %d", i, s.Size, cfg.MaxSegmentBytes)
		}
		next = s.EndOffset + 1
	}
}

func TestQuietSegmentSealsAfterMaxAge(t *testing.T) {
	cfg := testConfig(t.TempDir())
	now := time.Unix(1_700_000_000, 0)
	clock := make(chan time.Time, 1)
	clock <- now
	cfg.Now = func() time.Time { t := <-clock; clock <- t; return t }
	cfg.MaxSegmentAge = 40 * time.Millisecond
	e := open(t, cfg)
	defer e.Close()
	ctx := context.Background()
	e.CreateShard(ctx, "q-0")
	e.Append(ctx, "q-0", storetest.Records(3, 1))
	time.Sleep(100 * time.Millisecond) // ticks pass, but the clock has not moved
	if segs, _ := e.Segments("q-0"); len(segs) != 1 {
		t.Fatalf("sealed before its age: %d segments", len(segs))
	}
	<-clock
	clock <- now.Add(time.Minute)
	deadline := time.Now().Add(10 * time.Second)
	for {
		segs, _ := e.Segments("q-0")
		if len(segs) == 2 && segs[0].State == SegmentSealed && segs[0].Records == 3 {
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("a quiet segment past its max age was not sealed: %+v", segs)
		}
		time.Sleep(10 * time.Millisecond)
	}
	// An empty active segment never seals.
	time.Sleep(100 * time.Millisecond)
	if segs, _ := e.Segments("q-0"); len(segs) != 2 {
		t.Fatalf("an empty segment was sealed: %d segments", len(segs))
	}
}

// A topic's own segment size (segment.bytes) and age (segment.ms) apply to
// its shards only, and a change applies without a restart: from the next
// tick (a second at most), a topic's next roll follows the new value.
func TestTopicSegmentPolicy(t *testing.T) {
	cfg := testConfig(t.TempDir())
	cfg.RollCheckInterval = 5
	var mu sync.Mutex
	policies := map[string]SegmentPolicy{"tiny": {MaxBytes: 1024}}
	cfg.TopicSegments = func(topic string) SegmentPolicy {
		mu.Lock()
		defer mu.Unlock()
		return policies[topic]
	}
	e := open(t, cfg)
	defer e.Close()
	fill(t, e, "tiny-0", 50)
	fill(t, e, "big-0", 50)
	tiny, _ := e.Segments("tiny-0")
	big, _ := e.Segments("big-0")
	if len(tiny) < 3 || len(big) != 1 {
		t.Fatalf("segments: tiny topic %d (want several), other topic %d (want 1)", len(tiny), len(big))
	}

	// Altered at runtime: big's segments now roll at 1 KiB, quiet ones
	// are sealed 200ms after their first record.
	mu.Lock()
	policies["big"] = SegmentPolicy{MaxBytes: 1024}
	policies["quiet"] = SegmentPolicy{MaxAge: 200 * time.Millisecond}
	mu.Unlock()
	fill(t, e, "quiet-0", 1)
	fill(t, e, "other-0", 1)
	time.Sleep(1500 * time.Millisecond) // a tick picks the change up
	fill(t, e, "big-0", 50)
	deadline := time.Now().Add(5 * time.Second)
	for {
		big, _ = e.Segments("big-0")
		quiet, _ := e.Segments("quiet-0")
		other, _ := e.Segments("other-0")
		if len(big) >= 3 && len(quiet) == 2 && len(other) == 1 {
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("after the change: big has %d segments (want several), quiet %d (want 2: sealed by age), other %d (want 1)",
				len(big), len(quiet), len(other))
		}
		time.Sleep(50 * time.Millisecond)
	}
}
