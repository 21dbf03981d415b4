package tiering

import (
	"context"
	"errors"
	"fmt"

	"github.com/robfig/cron/v3"
)

// Scheduler runs the job on a cron schedule ("@every 1m", "*/5 * * * *").
// A run that is still going when the next is due makes that one skip, so
// runs never overlap; Job.Run can still be called by hand at any time.
type Scheduler struct {
	c *cron.Cron
}

// Schedule starts running job on spec until ctx ends or Stop is called.
func Schedule(ctx context.Context, job *Job, spec string) (*Scheduler, error) {
	c := cron.New(cron.WithChain(cron.SkipIfStillRunning(cron.DiscardLogger)))
	_, err := c.AddFunc(spec, func() {
		if _, err := job.Run(ctx); err != nil && !errors.Is(err, ErrRunning) {
			job.log().Error("scheduled tiering run failed", "err", err)
		}
	})
	if err != nil {
		return nil, fmt.Errorf("tiering schedule %q: %w", spec, err)
	}
	c.Start()
	s := &Scheduler{c: c}
	go func() { <-ctx.Done(); s.Stop() }()
	return s, nil
}

// Stop ends the schedule and waits for a run in progress.
func (s *Scheduler) Stop() { <-s.c.Stop().Done() }

// ValidateSchedule reports whether spec is a schedule Schedule accepts.
func ValidateSchedule(spec string) error {
	_, err := cron.ParseStandard(spec)
	return err
}
