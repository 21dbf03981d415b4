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
// after the last one.
type Range struct{ First, Last uint64 }

// File is a tiered object of one partition, as its shard's manifest lists it.
type File struct {
	Partition int32
	tiering.ManifestEntry
}

// Plan is what the next commit of a topic's table does.
type Plan struct {
	// Add lists the objects to add, by partition, then offset.
	Add []File
	// Offsets is what the table holds after the commit, for every
	// partition it holds anything of; each snapshot's summary carries it,
	// so the current snapshot alone says what is committed.
	Offsets map[int32]Range
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

// PlanCommit decides, from what the table holds (committed, from the
// current snapshot's summary: Committed) and what the bucket holds (tiered,
// every partition's manifest entries), which objects the next commit adds.
// An object whose offsets the table already holds is skipped: a commit
// retried after a failure, or after one whose result was unknown (it may
// have landed), adds nothing twice.
func PlanCommit(committed map[int32]Range, tiered map[int32][]tiering.ManifestEntry) Plan {
	p := Plan{Offsets: maps.Clone(committed)}
	if p.Offsets == nil {
		p.Offsets = map[int32]Range{}
	}
	for _, part := range slices.Sorted(maps.Keys(tiered)) {
		entries := slices.Clone(tiered[part])
		slices.SortFunc(entries, func(a, b tiering.ManifestEntry) int { return cmpOffset(a.StartOffset, b.StartOffset) })
		cur, held := p.Offsets[part]
		for _, e := range entries {
			switch {
			case held && e.EndOffset <= cur.Last:
				if e.StartOffset < cur.First && e.EndOffset >= cur.First {
					p.Overlaps = append(p.Overlaps, File{part, e})
				}
				continue // already in the table (or below what it starts at)
			case held && e.StartOffset <= cur.Last:
				p.Overlaps = append(p.Overlaps, File{part, e})
			case held && e.StartOffset > cur.Last+1:
				if p.Waiting == nil {
					p.Waiting = map[int32]uint64{}
				}
				p.Waiting[part] = cur.Last + 1
			default:
				if !held {
					cur, held = Range{First: e.StartOffset}, true
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

// Summary is the plan's snapshot summary: the offsets of every partition
// and the segments added.
func (p Plan) Summary() map[string]string {
	out := map[string]string{}
	for part, r := range p.Offsets {
		out[SummaryOffsets+strconv.Itoa(int(part))] = fmt.Sprintf("%d-%d", r.First, r.Last)
	}
	added := map[int32][]string{}
	for _, f := range p.Add {
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
		if err != nil || part < 0 || !ok || ferr != nil || lerr != nil || l < f {
			return nil, fmt.Errorf("snapshot summary %s=%q: want a partition and first-last offsets", k, v)
		}
		out[int32(part)] = Range{First: f, Last: l}
	}
	return out, nil
}
