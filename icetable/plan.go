package icetable

import (
	"fmt"
	"maps"
	"slices"
	"strconv"
	"strings"

	"strata/tiering"
)

// Range is the offsets First to Last (both included) a table holds of one
// partition: always one contiguous run, since an object is added only right
// after the last one. First is also the table's floor, the partition's log
// start as the table last applied it: nothing below it is added again. A
// range whose Last is First-1 holds nothing (retention took every file, and
// the floor stays).
type Range struct{ First, Last uint64 }

// Empty says the range holds no offset, only a floor.
func (r Range) Empty() bool { return r.First > 0 && r.Last == r.First-1 }

// File is a tiered object of one partition, as its shard's manifest lists it.
type File struct {
	Partition int32
	tiering.ManifestEntry
}

// Plan is what the next commit of a topic's table does.
type Plan struct {
	// Committed is what the table held before the commit (the current
	// snapshot's summary the plan was made from).
	Committed map[int32]Range
	// Add lists the objects to add, by partition, then offset.
	Add []File
	// Offsets is what the table holds after the commit, for every
	// partition it holds anything of; each snapshot's summary carries it,
	// so the current snapshot alone says what is committed.
	Offsets map[int32]Range
	// Hide is, by partition, a new log start the table applies: every row
	// below it leaves the table (whole files removed, position deletes for
	// the rows below it in a file that stays), in the same commit as Add.
	Hide map[int32]uint64
	// Forget lists partitions whose shard was deleted: all their files
	// leave the table, and their offsets with them, so a partition made
	// again under the name starts afresh.
	Forget []int32
	// Waiting names partitions whose next offsets are in no object yet
	// (another node's upload to come, or one that failed): the offset the
	// table waits for. Objects past it wait too, so the table never has a
	// hole a later commit would have to fill.
	Waiting map[int32]uint64
	// Overlaps lists objects that hold some committed offsets and some
	// not: adding one would duplicate records, skipping it would lose
	// some. Tiering names objects by their offsets and never makes one;
	// the commit refuses them (and what follows) and says so.
	Overlaps []File
}

// Changes says whether the plan makes a snapshot at all.
func (p Plan) Changes() bool { return len(p.Add) > 0 || len(p.Hide) > 0 || len(p.Forget) > 0 }

// PlanCommit decides, from what the table holds (committed, from the
// current snapshot's summary: Committed), what the bucket holds (tiered,
// every partition's manifest entries) and where each partition's log
// starts (logStart; a partition not named keeps the table's floor), which
// objects the next commit adds and which rows it removes. An object whose
// offsets the table already holds, or that lies wholly below the table's
// floor, is skipped, and a log start at or below the floor removes
// nothing: a commit retried after a failure, or after one whose result
// was unknown (it may have landed), adds and removes nothing twice.
func PlanCommit(committed map[int32]Range, tiered map[int32][]tiering.ManifestEntry, logStart map[int32]uint64) Plan {
	p := Plan{Committed: maps.Clone(committed), Offsets: maps.Clone(committed)}
	if p.Offsets == nil {
		p.Offsets = map[int32]Range{}
	}
	hide := func(part int32, at uint64) {
		if p.Hide == nil {
			p.Hide = map[int32]uint64{}
		}
		p.Hide[part] = at
	}
	parts := slices.Collect(maps.Keys(tiered))
	for part := range logStart {
		if _, ok := tiered[part]; !ok {
			parts = append(parts, part)
		}
	}
	slices.Sort(parts)
	for _, part := range parts {
		entries := slices.Clone(tiered[part])
		slices.SortFunc(entries, func(a, b tiering.ManifestEntry) int { return cmpOffset(a.StartOffset, b.StartOffset) })
		cur, held := p.Offsets[part]
		start, moved := logStart[part]
		if held && moved && start > cur.First {
			// The log starts past the table: what is below goes.
			hide(part, start)
			cur.First = start
			if cur.Last < start {
				cur.Last = start - 1
			}
			p.Offsets[part] = cur
		}
		floor := cur.First
		if !held {
			floor = start
		}
		for _, e := range entries {
			empty := !held || cur.Empty()
			switch {
			case e.EndOffset < floor:
				continue // below the log start: never (again) in the table
			case !empty && e.EndOffset <= cur.Last:
				continue // already in the table
			case !empty && e.StartOffset <= cur.Last:
				p.Overlaps = append(p.Overlaps, File{part, e})
			case held && e.StartOffset > cur.Last+1:
				if p.Waiting == nil {
					p.Waiting = map[int32]uint64{}
				}
				p.Waiting[part] = cur.Last + 1
			default:
				if !held {
					cur, held = Range{First: max(e.StartOffset, floor)}, true
				}
				if e.StartOffset < cur.First {
					// A log start inside the object: its rows below it
					// are hidden in the same commit.
					hide(part, cur.First)
				}
				cur.Last = e.EndOffset
				p.Offsets[part] = cur
				p.Add = append(p.Add, File{part, e})
				continue
			}
			break // an overlap or a gap: nothing after it, for now
		}
	}
	return p
}

// PlanForget is the commit that removes deleted partitions (DeleteTopics)
// from the table before their objects leave the bucket: every file of
// theirs, and their offsets. A partition the table does not hold is
// already forgotten, so a retried forget changes nothing.
func PlanForget(committed map[int32]Range, partitions []int32) Plan {
	p := Plan{Committed: maps.Clone(committed), Offsets: maps.Clone(committed)}
	if p.Offsets == nil {
		p.Offsets = map[int32]Range{}
	}
	for _, part := range slices.Sorted(slices.Values(partitions)) {
		if _, ok := p.Offsets[part]; ok && !slices.Contains(p.Forget, part) {
			p.Forget = append(p.Forget, part)
			delete(p.Offsets, part)
		}
	}
	return p
}

func cmpOffset(a, b uint64) int {
	switch {
	case a < b:
		return -1
	case a > b:
		return 1
	}
	return 0
}

// Snapshot summary keys. Iceberg keeps a snapshot's summary beside it, so
// what a commit says of the offsets is read back with the snapshot itself.
const (
	// SummaryOffsets + partition: "first-last", the offsets the table holds
	// of the partition as of this snapshot.
	SummaryOffsets = "strata.offsets."
	// SummarySegments + partition: "start-end:crc32c,...", the segments
	// this snapshot added (offsets, and the sealed segment's CRC-32C in hex).
	SummarySegments = "strata.segments."
)

// Summary is the summary of the plan's append (or of its one snapshot):
// the offsets of every partition after the commit and the segments added.
func (p Plan) Summary() map[string]string { return summary(p.Offsets, p.Add) }

// StepKind is what one snapshot of a commit does.
type StepKind int

const (
	// StepHide removes the rows of Partition below Below: the files
	// wholly below, and a position delete for the rows below it in a
	// file that stays.
	StepHide StepKind = iota
	// StepForget removes every file of Partition.
	StepForget
	// StepAppend adds Plan.Add.
	StepAppend
)

// Step is one snapshot a commit makes (iceberg-go makes one for each
// append and each delete of a transaction; the pointer swap lands them
// all or none).
type Step struct {
	Kind      StepKind
	Partition int32  // StepHide, StepForget
	Below     uint64 // StepHide
	// Offsets is what the table holds after this step: its snapshot's
	// summary says that, so time travel to any snapshot of the commit, or
	// choosing one by its summary, gets what the summary says.
	Offsets map[int32]Range
}

// Summary is the step's snapshot summary: its offsets, and the segments
// it added (only an append adds any).
func (s Step) Summary(p Plan) map[string]string {
	if s.Kind == StepAppend {
		return summary(s.Offsets, p.Add)
	}
	return summary(s.Offsets, nil)
}

// Steps orders the plan's snapshots so that each holds one contiguous
// range of every partition, which its summary states: first the hides of
// partitions the table already holds files of (the files below a new log
// start go before any object is added past them), and the forgets; then
// the append, whose summary carries, for a partition whose log start is
// inside the first object added, the object's first offset, not the later
// floor; then the hides of the rows below the log start in the objects
// just added. The last step's offsets are the plan's.
func (p Plan) Steps() []Step {
	state := maps.Clone(p.Committed)
	if state == nil {
		state = map[int32]Range{}
	}
	adds := map[int32]bool{}
	for _, f := range p.Add {
		adds[f.Partition] = true
	}
	var steps []Step
	step := func(kind StepKind, part int32, below uint64) {
		steps = append(steps, Step{Kind: kind, Partition: part, Below: below, Offsets: maps.Clone(state)})
	}
	hides := slices.Sorted(maps.Keys(p.Hide))
	for _, part := range hides {
		r, held := state[part]
		// A partition held with no file (only its floor) and objects to
		// add: the hide after the append moves the floor.
		if !held || (r.Empty() && adds[part]) {
			continue
		}
		r.First = p.Hide[part]
		if r.Last+1 < r.First {
			r.Last = r.First - 1
		}
		state[part] = r
		step(StepHide, part, p.Hide[part])
	}
	for _, part := range p.Forget {
		delete(state, part)
		step(StepForget, part, 0)
	}
	if len(p.Add) > 0 {
		for _, f := range p.Add {
			if r, ok := state[f.Partition]; ok && !r.Empty() {
				r.Last = f.EndOffset
				state[f.Partition] = r
			} else {
				state[f.Partition] = Range{First: f.StartOffset, Last: f.EndOffset}
			}
		}
		step(StepAppend, 0, 0)
	}
	for _, part := range hides {
		if r, ok := state[part]; ok && adds[part] && r.First < p.Hide[part] {
			r.First = p.Hide[part]
			if r.Last+1 < r.First {
				r.Last = r.First - 1
			}
			state[part] = r
			step(StepHide, part, p.Hide[part])
		}
	}
	return steps
}

func summary(offsets map[int32]Range, add []File) map[string]string {
	out := map[string]string{}
	for part, r := range offsets {
		out[SummaryOffsets+strconv.Itoa(int(part))] = fmt.Sprintf("%d-%d", r.First, r.Last)
	}
	added := map[int32][]string{}
	for _, f := range add {
		added[f.Partition] = append(added[f.Partition], fmt.Sprintf("%d-%d:%08x", f.StartOffset, f.EndOffset, f.SegmentChecksum))
	}
	for part, segs := range added {
		out[SummarySegments+strconv.Itoa(int(part))] = strings.Join(segs, ",")
	}
	return out
}

// Committed reads the offsets a snapshot's summary says the table holds.
// A summary that strata did not write (no strata.offsets. keys) holds
// nothing; one whose keys do not parse is an error, not an empty table,
// since committing over it could add every object again.
func Committed(summary map[string]string) (map[int32]Range, error) {
	out := map[int32]Range{}
	for k, v := range summary {
		ps, ok := strings.CutPrefix(k, SummaryOffsets)
		if !ok {
			continue
		}
		part, err := strconv.ParseInt(ps, 10, 32)
		first, last, ok := strings.Cut(v, "-")
		f, ferr := strconv.ParseUint(first, 10, 64)
		l, lerr := strconv.ParseUint(last, 10, 64)
		// l = f-1: an empty range, only its floor (Range.Empty).
		if err != nil || part < 0 || !ok || ferr != nil || lerr != nil || (l < f && (f == 0 || l != f-1)) {
			return nil, fmt.Errorf("snapshot summary %s=%q: want a partition and first-last offsets", k, v)
		}
		out[int32(part)] = Range{First: f, Last: l}
	}
	return out, nil
}
