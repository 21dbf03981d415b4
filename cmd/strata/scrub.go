package main

import (
	"context"
	"log/slog"
	"slices"
	"sync"
	"time"

	"github.com/prometheus/client_golang/prometheus"

	"strata/cluster"
	"strata/engine/integrity"
	"strata/engine/segment"
	"strata/engine/store"
	"strata/internal/promreg"
	"strata/tiering"
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
	c := func(name, help string) prometheus.Counter { return promreg.Counter(reg, name, help) }
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

// scheduleScrub runs s on spec until ctx ends; runs never overlap.
func scheduleScrub(ctx context.Context, s *scrubber, spec string) error {
	_, err := scheduleRuns(ctx, spec, "engine.scrub_schedule", s.run, s.log)
	return err
}

// coldScrubber runs tiering's cold scrub (tiering.ColdScrubber) on
// tiering.scrub_schedule, counts what it finds and keeps the findings for
// GET /v1/scrub. An object counts once as damaged (and once as repaired or
// unrepairable) while it stays wrong, however many runs find it again.
type coldScrubber struct {
	s   *tiering.ColdScrubber
	log *slog.Logger

	runs, checked, read, repaired, unrepairable prometheus.Counter
	damaged                                     *prometheus.CounterVec
	lost                                        prometheus.Gauge

	mu       sync.Mutex
	open     map[string]string     // key: the state last reported, for objects still wrong
	findings []tiering.ColdFinding // newest last, at most maxFindings
	last     tiering.ColdScrubSummary
}

func newColdScrubber(s *tiering.ColdScrubber, reg prometheus.Registerer, log *slog.Logger) *coldScrubber {
	c := func(name, help string) prometheus.Counter { return promreg.Counter(reg, name, help) }
	return &coldScrubber{s: s, log: log, open: map[string]string{},
		runs:         c("strata_scrub_cold_runs_total", "Cold scrub runs: the objects of this node's shards read back and checked against their manifests."),
		checked:      c("strata_scrub_cold_checked_objects_total", "Objects the cold scrub checked."),
		read:         c("strata_scrub_cold_read_bytes_total", "Object bytes the cold scrub read."),
		repaired:     c("strata_scrub_cold_repaired_total", "Wrong objects the cold scrub uploaded again from a good local copy (or listed again)."),
		unrepairable: c("strata_scrub_cold_unrepairable_total", "Wrong objects with no good copy here: their offsets cannot be read."),
		damaged: promreg.CounterVec(reg, "strata_scrub_cold_damaged_total",
			"Wrong objects the cold scrub found, by problem: missing, size, damaged, unlisted (an object counts once until it is right again).", "problem"),
		lost: promreg.Gauge(reg, "strata_scrub_cold_unrepairable_objects",
			"Objects the last cold scrubs found wrong with no good copy here, still wrong: alert on it."),
	}
}

func (c *coldScrubber) run(ctx context.Context) (tiering.ColdScrubSummary, error) {
	sum, err := c.s.Run(ctx)
	if err != nil {
		return sum, err
	}
	c.runs.Inc()
	c.checked.Add(float64(sum.Checked))
	c.read.Add(float64(sum.Bytes))
	c.mu.Lock()
	defer c.mu.Unlock()
	seen := map[string]bool{}
	for _, f := range sum.Findings {
		seen[f.Key] = true
		prev, known := c.open[f.Key]
		if !known {
			c.damaged.WithLabelValues(string(f.Problem)).Inc()
		}
		switch {
		case f.State == tiering.ColdRepaired:
			c.repaired.Inc()
			delete(c.open, f.Key)
		case f.State == tiering.ColdUnrepairable && prev != tiering.ColdUnrepairable:
			c.unrepairable.Inc()
			c.open[f.Key] = f.State
		default:
			c.open[f.Key] = f.State
		}
		c.findings = append(c.findings, f)
	}
	if sum.Complete {
		// Every object was checked: those not found again are right now
		// (an operator restored them).
		for key := range c.open {
			if !seen[key] {
				delete(c.open, key)
			}
		}
	}
	n := 0
	for _, state := range c.open {
		if state == tiering.ColdUnrepairable {
			n++
		}
	}
	c.lost.Set(float64(n))
	if len(c.findings) > maxFindings {
		c.findings = slices.Delete(c.findings, 0, len(c.findings)-maxFindings)
	}
	c.last = sum
	for _, e := range sum.Errors {
		c.log.Warn("cold scrub: could not check", "err", e)
	}
	c.log.Info("cold scrub run", "checked", sum.Checked, "bytes_read", sum.Bytes, "findings", len(sum.Findings),
		"complete", sum.Complete, "errors", len(sum.Errors), "took", sum.Finished.Sub(sum.Started))
	return sum, nil
}

// coldReport is the cold scrub's part of GET /v1/scrub.
type coldReport struct {
	LastRun  *tiering.ColdScrubSummary `json:"last_run,omitempty"` // its findings are in Findings
	Findings []tiering.ColdFinding     `json:"findings"`
}

func (c *coldScrubber) report() coldReport {
	c.mu.Lock()
	defer c.mu.Unlock()
	r := coldReport{Findings: slices.Clone(c.findings)}
	if !c.last.Started.IsZero() {
		last := c.last
		last.Findings = nil
		r.LastRun = &last
	}
	if r.Findings == nil {
		r.Findings = []tiering.ColdFinding{}
	}
	return r
}

// scrubReport is GET /v1/scrub: the local scrubber's findings, and the
// cold scrub's under "cold"; either may be off.
type scrubReport struct {
	local *scrubber
	cold  *coldScrubber
}

func (r scrubReport) Report() any {
	out := struct {
		LastRun  time.Time      `json:"last_run,omitzero"`
		Findings []scrubFinding `json:"findings"`
		Cold     *coldReport    `json:"cold,omitempty"`
	}{Findings: []scrubFinding{}}
	if r.local != nil {
		r.local.settle()
		r.local.mu.Lock()
		out.LastRun, out.Findings = r.local.lastRun, slices.Clone(r.local.findings)
		r.local.mu.Unlock()
	}
	if r.cold != nil {
		c := r.cold.report()
		out.Cold = &c
	}
	return out
}

// newColdScrub is the cold scrub of this node's shards; in a cluster, of
// the partitions it leads: each partition's objects are read by one node,
// not by every node holding a copy (docs/tiering.md, "The cold scrub").
func newColdScrub(cfg *Config, job *tiering.Job, member *cluster.Member) *tiering.ColdScrubber {
	s := &tiering.ColdScrubber{Job: job, BytesPerSecond: int64(cfg.Tiering.ScrubBandwidth), BudgetBytes: int64(cfg.Tiering.ScrubBytes)}
	if member != nil {
		s.Scrubs = func(shard string) bool {
			tp, ok := store.ParseShard(shard)
			if !ok {
				return true // not a partition: no one else holds it
			}
			info, ok := member.Partition(tp.Topic, tp.Partition)
			return ok && info.Leader == member.Self()
		}
	}
	return s
}
