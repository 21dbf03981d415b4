package main

import (
	"context"
	"errors"
	"fmt"
	"log/slog"

	"github.com/robfig/cron/v3"

	"strata/tiering"
)

// scheduleTiering runs job on a cron spec ("@every 1m", "*/5 * * * *")
// until ctx ends (scheduleRuns). The returned stop ends the schedule and
// waits for a run in progress.
func scheduleTiering(ctx context.Context, job *tiering.Job, spec string, log *slog.Logger) (stop func(), err error) {
	return scheduleRuns(ctx, spec, "tiering.schedule", func(ctx context.Context) error {
		_, err := job.Run(ctx)
		return err
	}, log)
}

// scheduleRuns runs fn on spec until ctx ends. A run still going when the
// next is due makes that one skip, and one refused because a run asked
// for by hand is going (tiering.ErrRunning, tiering.ErrColdScrubRunning)
// is not a failure, so runs never overlap and only real failures are
// logged. stop ends the schedule and waits for a run in progress.
func scheduleRuns(ctx context.Context, spec, knob string, fn func(context.Context) error, log *slog.Logger) (stop func(), err error) {
	c := cron.New(cron.WithChain(cron.SkipIfStillRunning(cron.DiscardLogger)))
	if _, err := c.AddFunc(spec, func() {
		err := fn(ctx)
		if err != nil && ctx.Err() == nil && !errors.Is(err, tiering.ErrRunning) && !errors.Is(err, tiering.ErrColdScrubRunning) {
			log.Error("scheduled run failed", "schedule", knob, "err", err)
		}
	}); err != nil {
		return nil, fmt.Errorf("%s %q: %w", knob, spec, err)
	}
	c.Start()
	stop = func() { <-c.Stop().Done() }
	go func() { <-ctx.Done(); stop() }()
	return stop, nil
}

// validateSchedule reports whether spec is a schedule scheduleTiering takes.
func validateSchedule(spec string) error {
	_, err := cron.ParseStandard(spec)
	return err
}
