package tiering

import (
	"context"
	"errors"
	"testing"
	"time"

	"strata/tiering/objstore"
	"strata/tiering/objstore/faulty"
	"strata/tiering/objstore/local"
)

func TestScheduledRunsNeverOverlap(t *testing.T) {
	lb, _ := local.New(t.TempDir())
	f := faulty.Wrap(lb)
	r := newRig(t, f, t.TempDir())
	produce(t, r.engine, "orders-0", 30)
	f.Delay(objstore.OpList, 300*time.Millisecond) // each run's orphan sweep is slow
	ctx, cancel := context.WithCancel(context.Background())
	s, err := Schedule(ctx, r.job, "@every 50ms")
	if err != nil {
		t.Fatal(err)
	}
	deadline := time.Now().Add(20 * time.Second)
	for len(r.job.History()) < 2 && time.Now().Before(deadline) {
		if _, err := r.job.Run(ctx); err != nil && !errors.Is(err, ErrRunning) {
			t.Fatal(err)
		}
		time.Sleep(20 * time.Millisecond)
	}
	cancel()
	s.Stop()
	h := r.job.History()
	if len(h) < 2 {
		t.Fatalf("%d runs in the history", len(h))
	}
	for i := 1; i < len(h); i++ {
		if h[i].Started.Before(h[i-1].Finished) {
			t.Fatalf("run %d started at %s, before run %d finished at %s", i, h[i].Started, i-1, h[i-1].Finished)
		}
	}
	if len(h[0].Uploaded) == 0 {
		t.Fatal("the first run uploaded nothing")
	}
}

func TestScheduleSpecs(t *testing.T) {
	for _, ok := range []string{"@every 1m", "*/5 * * * *", "@hourly"} {
		if err := ValidateSchedule(ok); err != nil {
			t.Errorf("%q: %v", ok, err)
		}
	}
	for _, bad := range []string{"", "every minute", "* * *"} {
		if err := ValidateSchedule(bad); err == nil {
			t.Errorf("%q accepted", bad)
		}
	}
}
