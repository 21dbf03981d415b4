package tiering

import (
	"fmt"
	"time"

	"strata/catalog"
)

// MergePolicy says which of a shard's small cold objects are merged into
// larger ones (docs/compaction.md, "Small-file merging"). A quiet
// partition rolls its segments by age, so it tiers one small object per
// segment.ms, and every table scan pays for each.
type MergePolicy struct {
	// TargetBytes is strata.cold.target_bytes: objects below half of it
	// are merged, into objects of at most it (0: no merging). An object
	// of half of it or more is done: never rewritten again.
	TargetBytes int64
	// MinObjects: a run of small objects below half the target merges
	// once it holds this many (0: 8).
	MinObjects int
	// MinAge: an object is merged once it was tiered at least this long
	// ago, so a partition still tiering often is left to grow first.
	MinAge time.Duration
	// MaxSpan bounds the time a merged object's records span (newest
	// minus oldest timestamp; 0: no bound). Retention deletes an object
	// only once its newest record is past retention.ms, so the span is how
	// long a merge can keep a record past it.
	MaxSpan time.Duration
	// MaxObjects bounds how many objects one merge reads (0: 1000).
	MaxObjects int
	// LogStart is the shard's log start: an object holding offsets below
	// it is left to retention, so deleted records are never written
	// again (the job sets it).
	LogStart uint64
}

// Merge is one merge: consecutive objects of a shard that become one.
type Merge struct {
	// Objects are their keys, oldest first.
	Objects []string
	// Segments are the segments they hold, oldest first: the merged
	// object holds all of their records and takes their catalog entries.
	Segments []catalog.Segment
	// Bytes is the objects' size together.
	Bytes int64
}

func (m Merge) String() string {
	return fmt.Sprintf("%d objects, offsets %d to %d, %d bytes", len(m.Objects), m.Segments[0].StartOffset, m.Segments[len(m.Segments)-1].EndOffset, m.Bytes)
}

// coldObject is one object and the segments it holds (more than one once
// merged: their catalog entries name the same key).
type coldObject struct {
	key          string
	bytes        int64
	segs         []catalog.Segment
	tieredAt     time.Time // the newest of its segments'
	minTS, maxTS int64
}

// PlanMerges decides, from a shard's segments (in offset order, those a
// retention run expires left out) and the time, which of its cold
// objects to merge. It does no I/O.
//
// It packs runs of consecutive small objects greedily, oldest first,
// into merges of at most TargetBytes; a merge takes at least two objects,
// MinObjects of them unless they make half the target, and makes an
// object at least half as big again as its biggest: each time a record is
// rewritten the object holding it grows by half, so it is rewritten a
// few times on its way to a done object, however small its neighbours. A segment
// that is not only in the bucket (local, uploading, or cold: its local
// copy is the engine's file by its number), an object of half the target
// or more, one tiered less than MinAge ago, one holding offsets below the
// log start and a gap in the offsets each end a run: a merged object
// holds one run of offsets.
func PlanMerges(now time.Time, segs []catalog.Segment, p MergePolicy) []Merge {
	if p.TargetBytes <= 0 {
		return nil
	}
	if p.MaxObjects <= 0 {
		p.MaxObjects = 1000
	}
	if p.MinObjects <= 0 {
		p.MinObjects = 8
	}
	var out []Merge
	var run []coldObject
	var runBytes int64
	flush := func() {
		// The longest tail of the run that may merge: an object the rest
		// cannot grow by half yet (one merged before) waits for more.
		for ; len(run) >= 2; run = run[1:] {
			var bytes, largest int64
			for _, o := range run {
				bytes, largest = bytes+o.bytes, max(largest, o.bytes)
			}
			if 2*bytes < 3*largest || len(run) < p.MinObjects && 2*bytes < p.TargetBytes {
				continue
			}
			m := Merge{Bytes: bytes}
			for _, o := range run {
				m.Objects = append(m.Objects, o.key)
				m.Segments = append(m.Segments, o.segs...)
			}
			out = append(out, m)
			break
		}
		run, runBytes = nil, 0
	}
	for _, o := range coldObjects(segs) {
		if o.key == "" || 2*o.bytes >= p.TargetBytes || now.Sub(o.tieredAt) < p.MinAge || o.segs[0].StartOffset < p.LogStart {
			flush()
			continue
		}
		if len(run) > 0 {
			last := run[len(run)-1]
			minTS, maxTS := min(run[0].minTS, o.minTS), max(last.maxTS, o.maxTS)
			if runBytes+o.bytes > p.TargetBytes || len(run) >= p.MaxObjects ||
				o.segs[0].StartOffset != last.segs[len(last.segs)-1].EndOffset+1 ||
				(p.MaxSpan > 0 && time.Duration(maxTS-minTS)*time.Millisecond > p.MaxSpan) {
				flush()
			}
		}
		run = append(run, o)
		runBytes += o.bytes
	}
	flush()
	return out
}

// coldObjects groups segments into the objects holding them, in order;
// a segment not only in the bucket is an object with no key.
func coldObjects(segs []catalog.Segment) []coldObject {
	var out []coldObject
	for _, s := range segs {
		if s.State != catalog.Remote || s.ObjectKey == "" {
			out = append(out, coldObject{})
			continue
		}
		if n := len(out); n > 0 && out[n-1].key == s.ObjectKey {
			o := &out[n-1]
			o.segs = append(o.segs, s)
			o.tieredAt = maxTime(o.tieredAt, s.TieredAt)
			o.minTS, o.maxTS = min(o.minTS, s.MinTimestamp), max(o.maxTS, s.MaxTimestamp)
			continue
		}
		out = append(out, coldObject{key: s.ObjectKey, bytes: s.ObjectSize, segs: []catalog.Segment{s},
			tieredAt: s.TieredAt, minTS: s.MinTimestamp, maxTS: s.MaxTimestamp})
	}
	return out
}

func maxTime(a, b time.Time) time.Time {
	if b.After(a) {
		return b
	}
	return a
}
