package segment

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	"strata/engine/store/storetest"
)

// recorder is a listener that writes down every event it hears.
type recorder struct {
	mu  sync.Mutex
	got []string
}

func (r *recorder) add(format string, args ...any) error {
	r.mu.Lock()
	defer r.mu.Unlock()
	r.got = append(r.got, fmt.Sprintf(format, args...))
	return nil
}

func (r *recorder) take() []string {
	r.mu.Lock()
	defer r.mu.Unlock()
	out := r.got
	r.got = nil
	return out
}

func (r *recorder) listener() EventListener {
	return EventListener{
		ShardCreated: func(sh ShardMeta, first SegmentMeta) error {
			return r.add("created %s segment %d %s", sh.Name, first.No, first.State)
		},
		SegmentSealed: func(s, next SegmentMeta) error {
			return r.add("sealed %s segment %d offsets %d-%d crc %08x; next %d from %d", s.Shard, s.No, s.StartOffset, s.EndOffset, s.Checksum, next.No, next.StartOffset)
		},
		SegmentDropped: func(s SegmentMeta) error { return r.add("dropped %s segment %d %s", s.Shard, s.No, s.State) },
		LowWatermark:   func(shard string, low uint64) error { return r.add("low %s %d", shard, low) },
		ShardRecovered: func(sh ShardMeta, segs []SegmentMeta) error {
			return r.add("recovered %s low %d with %d segments", sh.Name, sh.LowWatermark, len(segs))
		},
		ShardDeleted: func(_ context.Context, shard string, _ time.Time) error { return r.add("deleted %s", shard) },
	}
}

// The engine tells its listeners, in order, what happened to its shards and
// segments; each seal carries the checksum its manifest recorded, and a
// start tells every shard it recovered.
func TestEventsTellWhatHappened(t *testing.T) {
	var r recorder
	cfg := testConfig(t.TempDir())
	cfg.MaxSegmentBytes, cfg.RollCheckInterval = 2048, 5
	cfg.Events = r.listener()
	e := open(t, cfg)
	fill(t, e, "ev-0", 60)
	e.SyncEvents()
	segs, _ := e.Segments("ev-0")
	if len(segs) < 3 {
		t.Fatalf("%d segments; the test needs several", len(segs))
	}
	want := []string{"created ev-0 segment 0 active"}
	for i, s := range segs[:len(segs)-1] {
		want = append(want, fmt.Sprintf("sealed ev-0 segment %d offsets %d-%d crc %08x; next %d from %d",
			s.No, s.StartOffset, s.EndOffset, s.Checksum, segs[i+1].No, segs[i+1].StartOffset))
	}
	if got := r.take(); !slices.Equal(got, want) {
		t.Fatalf("events:\n%s\nwant:\n%s", strings.Join(got, "\n"), strings.Join(want, "\n"))
	}

	if err := e.DeleteBefore(ctx, "ev-0", segs[1].StartOffset); err != nil {
		t.Fatal(err)
	}
	if _, err := e.ApplyRetention(ctx, RetentionPolicy{}, nil); err != nil {
		t.Fatal(err)
	}
	e.SyncEvents()
	want = []string{fmt.Sprintf("low ev-0 %d", segs[1].StartOffset), "dropped ev-0 segment 0 deleted", fmt.Sprintf("low ev-0 %d", segs[1].StartOffset)}
	if got := r.take(); !slices.Equal(got, want) {
		t.Fatalf("after DeleteBefore and retention:\n%s\nwant:\n%s", strings.Join(got, "\n"), strings.Join(want, "\n"))
	}

	e.Close()
	e = open(t, cfg)
	defer e.Close()
	e.SyncEvents()
	want = []string{fmt.Sprintf("recovered ev-0 low %d with %d segments", segs[1].StartOffset, len(segs)-1)}
	if got := r.take(); !slices.Equal(got, want) {
		t.Fatalf("at start:\n%s\nwant:\n%s", strings.Join(got, "\n"), strings.Join(want, "\n"))
	}
	if err := e.DeleteShard(ctx, "ev-0"); err != nil {
		t.Fatal(err)
	}
	if got := r.take(); !slices.Equal(got, []string{"deleted ev-0"}) {
		t.Fatalf("after DeleteShard: %q", got)
	}
}

// A listener that is slow (a catalog far away) never holds up appends or
// rolls: the I/O workers only queue events.
func TestSlowListenerNeverHoldsTheWorker(t *testing.T) {
	release := make(chan struct{})
	cfg := testConfig(t.TempDir())
	cfg.MaxSegmentBytes, cfg.RollCheckInterval = 2048, 5
	var sealed sync.WaitGroup
	cfg.Events.SegmentSealed = func(_, _ SegmentMeta) error { sealed.Add(1); <-release; sealed.Done(); return nil }
	e := open(t, cfg)
	defer e.Close()
	appendCtx, cancel := context.WithTimeout(ctx, 30*time.Second)
	defer cancel()
	if err := e.CreateShard(appendCtx, "slow-0"); err != nil {
		t.Fatal(err)
	}
	for i := 0; i < 20; i++ {
		if _, err := e.Append(appendCtx, "slow-0", storetest.Records(5, i)); err != nil {
			t.Fatalf("append %d while the listener is stuck: %v", i, err)
		}
	}
	if segs, _ := e.Segments("slow-0"); len(segs) < 3 {
		t.Fatalf("%d segments: the appends did not roll, the test would prove nothing", len(segs))
	}
	close(release)
	e.SyncEvents()
}

// A listener whose store blinks gets the event again, in order: the events
// after it wait.
func TestFailedEventIsRetriedInOrder(t *testing.T) {
	saved := eventRetries
	eventRetries = []time.Duration{time.Millisecond, time.Millisecond, time.Millisecond}
	defer func() { eventRetries = saved }()
	var r recorder
	failures := 2
	cfg := testConfig(t.TempDir())
	cfg.MaxSegmentBytes, cfg.RollCheckInterval = 2048, 5
	cfg.Events = r.listener()
	sealed := cfg.Events.SegmentSealed
	cfg.Events.SegmentSealed = func(s, next SegmentMeta) error {
		if s.No == 0 && failures > 0 {
			failures--
			return errors.New("etcd is electing a leader")
		}
		return sealed(s, next)
	}
	e := open(t, cfg)
	defer e.Close()
	fill(t, e, "blink-0", 60)
	e.SyncEvents()
	got := r.take()
	var seals []string
	for _, g := range got {
		if strings.HasPrefix(g, "sealed") {
			seals = append(seals, g)
		}
	}
	segs, _ := e.Segments("blink-0")
	if len(seals) != len(segs)-1 || !strings.HasPrefix(seals[0], "sealed blink-0 segment 0 ") {
		t.Fatalf("after two failures of the first seal's delivery the listener heard %q; want every seal once, in order", seals)
	}
}
