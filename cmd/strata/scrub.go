package main

import (
	"context"
	"fmt"
	"log/slog"
	"slices"
	"sync"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/robfig/cron/v3"

	"strata/engine/integrity"
	"strata/engine/segment"
	"strata/internal/promreg"
)

// The scrubber checks every local sealed segment against the checksum its
// seal recorded (Engine.Scrub), on engine.scrub_schedule. A damaged copy of
// a replicated partition is refilled from its leader (replica.Node.Refill:
// the follower copies the leader's log again and is out of the ISR until
// it has); a shard with no other copy, or one this node leads, keeps the
// damage for an operator (strata segment repair). docs/replication.md, "A
// damaged copy", tells the whole story.

// scrubFinding is one damaged copy the scrubber found, as GET /v1/scrub
// shows it.
type scrubFinding struct {
	Shard    string    `json:"shard"`
	Segment  uint64    `json:"segment"`
	From     uint64    `json:"from_offset"`
	Error    string    `json:"error"`
	Found    time.Time `json:"found"`
	State    string    `json:"state"` // refilling, repaired, or kept (no copy to refill from here)
	Repaired time.Time `json:"repaired,omitzero"`
}

type scrubber struct {
	e      *segment.Engine
	refill func(shard string) bool // nil on a single node
	log    *slog.Logger

	runs, checked, damaged, repaired prometheus.Counter

	mu       sync.Mutex
	findings []scrubFinding // newest last, at most maxFindings
	lastRun  time.Time
}

const maxFindings = 256

func newScrubber(e *segment.Engine, refill func(string) bool, reg prometheus.Registerer, log *slog.Logger) *scrubber {
	c := func(name, help string) prometheus.Counter {
		return promreg.Register(reg, prometheus.NewCounter(prometheus.CounterOpts{Name: name, Help: help}))
	}
	return &scrubber{e: e, refill: refill, log: log,
		runs:     c("strata_scrub_runs_total", "Scrub runs: every local sealed segment checked against its seal's checksum."),
		damaged:  c("strata_scrub_damaged_total", "Damaged local copies the scrubber found (a shard counts once until its copy is made again)."),
		checked:  c("strata_scrub_checked_shards_total", "Shards the scrubber checked."),
		repaired: c("strata_scrub_repaired_total", "Damaged copies the scrubber found that were since refilled from a leader."),
	}
}

// run scrubs every shard once. A shard already known damaged is not read
// again; one refilled since is marked repaired.
func (s *scrubber) run(ctx context.Context) error {
	shards, err := s.e.Shards(ctx)
	if err != nil {
		return err
	}
	s.runs.Inc()
	s.settle()
	for _, shard := range shards {
		if ctx.Err() != nil {
			return ctx.Err()
		}
		if s.e.Damage(shard) != nil {
			continue
		}
		s.checked.Inc()
		err := s.e.Scrub(ctx, shard)
		if err == nil || !integrity.IsCorruption(err) {
			if err != nil && ctx.Err() == nil {
				s.log.Warn("scrub: a shard could not be checked", "shard", shard, "err", err)
			}
			continue
		}
		d := s.e.Damage(shard)
		if d == nil {
			continue // deleted meanwhile
		}
		s.damaged.Inc()
		f := scrubFinding{Shard: shard, Segment: d.Segment, From: d.From, Error: err.Error(), Found: d.Found, State: "kept"}
		if s.refill != nil && s.refill(shard) {
			f.State = "refilling"
		}
		s.log.Error("scrub: a local copy is damaged", "shard", shard, "segment", d.Segment, "from_offset", d.From, "state", f.State, "err", err)
		s.mu.Lock()
		s.findings = append(s.findings, f)
		if len(s.findings) > maxFindings {
			s.findings = slices.Delete(s.findings, 0, len(s.findings)-maxFindings)
		}
		s.mu.Unlock()
	}
	s.mu.Lock()
	s.lastRun = time.Now().UTC()
	s.mu.Unlock()
	return nil
}

// settle marks repaired the findings whose shards' copies were made again
// (the refill deletes the damaged copy: its damage is gone).
func (s *scrubber) settle() {
	s.mu.Lock()
	defer s.mu.Unlock()
	for i := range s.findings {
		f := &s.findings[i]
		if f.State == "refilling" && s.e.Damage(f.Shard) == nil {
			f.State, f.Repaired = "repaired", time.Now().UTC()
			s.repaired.Inc()
		}
	}
}

// Report is what GET /v1/scrub serves.
func (s *scrubber) Report() any {
	s.settle()
	s.mu.Lock()
	defer s.mu.Unlock()
	return struct {
		LastRun  time.Time      `json:"last_run,omitzero"`
		Findings []scrubFinding `json:"findings"`
	}{s.lastRun, slices.Clone(s.findings)}
}

// scheduleScrub runs s on spec until ctx ends; runs never overlap.
func scheduleScrub(ctx context.Context, s *scrubber, spec string) error {
	c := cron.New(cron.WithChain(cron.SkipIfStillRunning(cron.DiscardLogger)))
	if _, err := c.AddFunc(spec, func() {
		if err := s.run(ctx); err != nil && ctx.Err() == nil {
			s.log.Error("scheduled scrub failed", "err", err)
		}
	}); err != nil {
		return fmt.Errorf("engine.scrub_schedule %q: %w", spec, err)
	}
	c.Start()
	go func() { <-ctx.Done(); <-c.Stop().Done() }()
	return nil
}
