package main

import (
	"context"
	"errors"
	"io"
	"log/slog"
	"testing"
	"time"

	"strata/engine/record"
	"strata/engine/segment"
	"strata/tiering"
	"strata/tiering/objstore"
	"strata/tiering/objstore/faulty"
	"strata/tiering/objstore/local"
)

// Scheduled runs and runs asked for by hand never overlap, even when each
// takes longer than the schedule's period.
func TestScheduledRunsNeverOverlap(t *testing.T) {
	quiet := slog.New(slog.NewTextHandler(io.Discard, nil))
	dir := t.TempDir()
	cat, err := openCatalog(dir)
	if err != nil {
		t.Fatal(err)
	}
	defer cat.Close()
	e, err := segment.Open(segment.Config{Dir: dir, MaxSegmentBytes: 4 << 10, RollCheckInterval: 5, Logger: quiet,
		Events: tiering.Listen(cat, nil, "", quiet)})
	if err != nil {
		t.Fatal(err)
	}
	defer e.Close()
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	e.CreateShard(ctx, "orders-0")
	for i := 0; i < 30; i++ {
		if _, err := e.Append(ctx, "orders-0", []record.Record{{Value: make([]byte, 500)}}); err != nil {
			t.Fatal(err)
		}
	}
	lb, _ := local.New(t.TempDir())
	f := faulty.Wrap(lb)
	f.Delay(objstore.OpList, 300*time.Millisecond) // each run's orphan sweep is slow
	job := &tiering.Job{Engine: e, Catalog: cat, Bucket: f, Log: quiet}
	stop, err := scheduleTiering(ctx, job, "@every 50ms", quiet)
	if err != nil {
		t.Fatal(err)
	}
	for deadline := time.Now().Add(20 * time.Second); len(job.History()) < 2 && time.Now().Before(deadline); {
		if _, err := job.Run(ctx); err != nil && !errors.Is(err, tiering.ErrRunning) {
			t.Fatal(err)
		}
		time.Sleep(20 * time.Millisecond)
	}
	cancel()
	stop()
	h := job.History()
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
		if err := validateSchedule(ok); err != nil {
			t.Errorf("%q: %v", ok, err)
		}
	}
	for _, bad := range []string{"", "every minute", "* * *"} {
		if err := validateSchedule(bad); err == nil {
			t.Errorf("%q accepted", bad)
		}
	}
}
