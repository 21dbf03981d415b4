// Package cleaner decides how a compacted topic's log is cleaned
// (cleanup.policy=compact), as Kafka's log cleaner does: which segments a
// run rewrites, which keys its offset map holds, and which records the
// rewrite keeps. It is pure: the engine scans and rewrites, this package
// only answers, so a test drives every decision with a clock it sets.
// docs/compaction.md tells the whole story.
package cleaner

import (
	"fmt"
	"time"
)

// Config is a compacted topic's cleaning configs (Kafka's names).
type Config struct {
	// MinDirtyRatio: a partition is cleaned once its dirty bytes are more
	// than this share of its cleanable bytes (min.cleanable.dirty.ratio).
	MinDirtyRatio float64
	// MinLag: a record stays uncleaned at least this long after its
	// timestamp (min.compaction.lag.ms).
	MinLag time.Duration
	// MaxLag: a dirty record older than this makes the partition due
	// whatever its dirty ratio (max.compaction.lag.ms; Kafka's default,
	// Long.MAX_VALUE, is the longest duration: never; 0 also means never).
	MaxLag time.Duration
	// DeleteRetention: a tombstone stays this long after its segment was
	// first cleaned, so a consumer that reads the log within it sees the
	// delete (delete.retention.ms).
	DeleteRetention time.Duration
}

// Segment is what the planner knows of one segment of the partition.
type Segment struct {
	No         uint64
	Start, End uint64 // the offsets it holds: [Start, End)
	Bytes      int64
	// MinTimestamp is its first record's timestamp, MaxTimestamp its
	// newest's. A timestamp at or before 1970 (a producer that set none)
	// makes no segment overdue.
	MinTimestamp, MaxTimestamp time.Time
	// FirstCleaned is when a cleaning first rewrote it (zero: never).
	FirstCleaned time.Time
	// Active: the segment appends go to. It is never cleaned.
	Active bool
	// Frozen: the cleaner may not rewrite it here: it is being uploaded or
	// is in the cold tier, whose copy is compacted by the cold rewrite.
	Frozen bool
}

// Partition is one partition's log as the planner sees it.
type Partition struct {
	// Segments in offset order, the active one last.
	Segments []Segment
	// FirstDirty is the cleaner's checkpoint: every offset below it was
	// covered by an earlier cleaning's offset map. The engine lowers it to
	// the truncation point whenever the log is truncated; one still past
	// the log's end is taken as lost, and the log cleaned from its start.
	FirstDirty uint64
}

// Plan is one cleaning of one partition, or why there is none.
type Plan struct {
	// Clean: the partition is due.
	Clean bool
	Why   string
	// DirtyRatio is the dirty bytes' share of the cleanable bytes.
	DirtyRatio float64
	// The offset map takes the keys of [FirstDirty, End), in order; End is
	// where the cleanable part stops (a segment boundary). A map that
	// fills first stops at an earlier boundary (Mapped).
	FirstDirty, End uint64
	// Rewrite are the segments the run rewrites, oldest first: every
	// cleanable segment below End.
	Rewrite []Rewrite
}

// Rewrite is one segment a cleaning rewrites.
type Rewrite struct {
	Segment
	// DropTombstones: its tombstones are past delete.retention.ms and no
	// older copy of the log is outside the cleaning (nothing below it is
	// frozen), so they go with the values they deleted.
	DropTombstones bool
}

// PlanPartition decides, from a partition's segments and the time,
// whether to clean it and what. It does no I/O.
//
// As Kafka's cleaner: the cleanable part of the log runs from its first
// segment the cleaner may rewrite up to, not including, the active
// segment and the first segment holding a record younger than
// min.compaction.lag.ms (only dirty segments are asked). Its dirty part
// starts at the checkpoint. The partition is due when the dirty part's
// bytes are more than min.cleanable.dirty.ratio of the cleanable part's,
// or when a dirty segment's first record is older than
// max.compaction.lag.ms.
func PlanPartition(now time.Time, p Partition, c Config) Plan {
	// Frozen segments are a prefix of the log (tiering uploads oldest
	// first); the cleanable part starts after the last of them.
	first := 0
	for i, s := range p.Segments {
		if s.Frozen {
			first = i + 1
		}
	}
	if first == len(p.Segments) {
		return Plan{Why: "nothing cleanable: every segment is frozen"}
	}
	firstDirty := max(p.FirstDirty, p.Segments[first].Start)
	if end := p.Segments[len(p.Segments)-1]; firstDirty > end.End || (end.Active && firstDirty > end.Start) {
		firstDirty = p.Segments[first].Start // a checkpoint past the log: the log was truncated under it
	}
	last := first // the first segment past the cleanable part
	var overdue bool
	for ; last < len(p.Segments); last++ {
		s := p.Segments[last]
		if s.Active || s.Frozen {
			break
		}
		if s.End <= firstDirty {
			continue
		}
		if c.MaxLag > 0 && s.MinTimestamp.Unix() > 0 && now.Sub(s.MinTimestamp) > c.MaxLag {
			overdue = true
		}
		if c.MinLag > 0 && now.Sub(s.MaxTimestamp) < c.MinLag {
			break
		}
	}
	cleanable := p.Segments[first:last]
	if len(cleanable) == 0 {
		return Plan{Why: "nothing cleanable: only the active segment, segments younger than min.compaction.lag.ms or frozen ones"}
	}
	var clean, dirty int64
	for _, s := range cleanable {
		if s.End <= firstDirty {
			clean += s.Bytes
		} else {
			dirty += s.Bytes
		}
	}
	end := cleanable[len(cleanable)-1].End
	plan := Plan{FirstDirty: firstDirty, End: end}
	if clean+dirty > 0 {
		plan.DirtyRatio = float64(dirty) / float64(clean+dirty)
	}
	switch {
	case dirty == 0:
		plan.Why = "no dirty segment: every cleanable record was cleaned before"
		return plan
	case overdue:
		plan.Why = fmt.Sprintf("a dirty segment's first record is older than max.compaction.lag.ms (%s)", c.MaxLag)
	case plan.DirtyRatio > c.MinDirtyRatio:
		plan.Why = fmt.Sprintf("dirty ratio %.2f is above min.cleanable.dirty.ratio %.2f", plan.DirtyRatio, c.MinDirtyRatio)
	default:
		plan.Why = fmt.Sprintf("dirty ratio %.2f is not above min.cleanable.dirty.ratio %.2f", plan.DirtyRatio, c.MinDirtyRatio)
		return plan
	}
	plan.Clean = true
	for _, s := range cleanable {
		drop := first == 0 && !s.FirstCleaned.IsZero() && now.Sub(s.FirstCleaned) >= c.DeleteRetention
		plan.Rewrite = append(plan.Rewrite, Rewrite{Segment: s, DropTombstones: drop})
	}
	return plan
}

// Mapped cuts the plan at the end of the last segment whose keys all went
// into the offset map, when the map filled before End (mapped is the
// first offset whose key it could not take). A cleaning then rewrites
// only the segments below the cut, and the next one goes on from there.
// With not even the first dirty segment mapped there is nothing to do,
// and the error says which setting is too small: the engine then marks
// the partition uncleanable, shows why to the operator and retries after
// a back-off (as Kafka marks a partition whose cleaning failed), since
// every later plan would stop at the same segment.
func (p Plan) Mapped(mapped uint64) (Plan, error) {
	if mapped >= p.End {
		return p, nil
	}
	cut := p.FirstDirty
	var keep []Rewrite
	for _, r := range p.Rewrite {
		if r.End > mapped {
			break
		}
		keep = append(keep, r)
		cut = max(cut, r.End)
	}
	if cut <= p.FirstDirty {
		return Plan{Why: p.Why}, fmt.Errorf("cleaner: the offset map filled at offset %d, before the end of the first dirty segment: raise cleaner.dedupe_buffer_bytes", mapped)
	}
	p.End, p.Rewrite = cut, keep
	return p, nil
}

// A Record is what the keep rule needs of one record.
type Record struct {
	Offset uint64
	// Key is nil for a record without a key. A compacted topic refuses
	// them at produce, but one written before the topic became compacted
	// has nothing to be compacted by.
	Key []byte
	// Tombstone: its value is null.
	Tombstone bool
}

// Keep says whether a rewrite of r's segment keeps r. m holds the dirty
// part's keys, each at its newest offset: a record is dropped when a
// newer one of its key is in the log, and a tombstone also once its
// segment may drop tombstones (it has deleted every older value by then).
func Keep(m *OffsetMap, r Rewrite, rec Record) bool {
	if rec.Key == nil {
		return false
	}
	if newest, ok := m.Get(rec.Key); ok && rec.Offset < newest {
		return false
	}
	return !rec.Tombstone || !r.DropTombstones
}

// KeepBatch says whether a rewrite keeps a batch of which kept records
// survived Keep. A batch left empty goes, unless it is its producer's
// last one in the log: an idempotent producer's sequence and epoch are
// read back from its last batch after a restart, so that batch stays as a
// header with no records (Kafka's RETAIN_EMPTY). Its records still go:
// keeping a superseded record for its producer would bring the old value
// back once the newer one's tombstone is dropped.
func KeepBatch(kept int, producersLast bool) bool {
	return kept > 0 || producersLast
}
