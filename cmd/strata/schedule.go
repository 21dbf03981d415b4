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
// until ctx ends. A run still going when the next is due makes that one
// skip, and Job.Run refuses to overlap a run asked for by hand, so runs
// never overlap. The returned stop ends the schedule and waits for a run in
// progress.
func scheduleTiering(ctx context.Context, job *tiering.Job, spec string, log *slog.Logger) (stop func(), err error) {
	c := cron.New(cron.WithChain(cron.SkipIfStillRunning(cron.DiscardLogger)))
	if _, err := c.AddFunc(spec, func() {
		if _, err := job.Run(ctx); err != nil && !errors.Is(err, tiering.ErrRunning) {
			log.Error("scheduled tiering run failed", "err", err)
		}
	}); err != nil {
		return nil, fmt.Errorf("tiering schedule %q: %w", spec, err)
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
