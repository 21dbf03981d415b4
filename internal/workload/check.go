package workload

import (
	"fmt"
	"sort"
)

// Violation kinds.
const (
	KindLost         = "lost"          // an acknowledged record is not served
	KindChanged      = "changed"       // an offset serves different content than acknowledged or seen before
	KindDuplicate    = "duplicate"     // a record is served at two offsets
	KindResurrected  = "resurrected"   // a record of a deleted incarnation is served
	KindUnknown      = "unknown"       // a record the workload never produced, or in the wrong topic or partition
	KindGap          = "gap"           // offsets between the low and high watermark are missing
	KindOrder        = "order"         // one produce's records are served out of order
	KindLowWatermark = "low-watermark" // deleted records are readable again
	KindOversize     = "oversize"      // an over-the-limit record was acknowledged or stored
	KindTopic        = "topic"         // the topic exists or not, or has a partition count, against the model
	KindCrash        = "crash"         // the service process died or did not stop cleanly
	KindReadError    = "read-error"    // the service answered a read of a live partition with an error
)

// Violation is one thing the service did that the model forbids.
type Violation struct {
	Kind      string
	Topic     string
	Partition int32 // -1: the whole topic
	Offset    int64 // -1: none
	Detail    string
}

func (v Violation) String() string {
	where := v.Topic
	if v.Partition >= 0 {
		where += fmt.Sprintf("/%d", v.Partition)
	}
	if v.Offset >= 0 {
		where += fmt.Sprintf(" offset %d", v.Offset)
	}
	return fmt.Sprintf("%s: %s: %s", v.Kind, where, v.Detail)
}

// Got is a record as read back.
type Got struct {
	Offset int64
	Rec    Rec
}

// Observation is one read of a partition.
type Observation struct {
	Topic     string
	Partition int32
	// Inc is the incarnation the reader read; 0 when the model holds none
	// for the name (the service still lists a deleted topic).
	Inc int
	// From is the offset the read started at; Records are what came back
	// at or after it, in the order served.
	From    int64
	Records []Got
	// Low and High are the watermarks the service reported (-1: unknown).
	Low, High int64
	// Complete: Records should cover every offset from From up to High.
	Complete bool
	// Since is the tick the read began: records acknowledged before it
	// must be visible.
	Since int64
	// Now is the wall clock (ms) at the read, for retention.
	Now int64
}

// Check compares reads with the model. Reads passed together are judged
// together: a record must not be served twice across them.
func (m *Model) Check(obs ...Observation) []Violation {
	m.mu.Lock()
	defer m.mu.Unlock()
	var vs []Violation
	seen := map[string]Got{} // id -> where it was read
	type opPart struct {
		topic string
		op    int64
		p     int32
	}
	positions := map[opPart][][2]int64{} // (index, offset) of each op's records, per partition
	for _, o := range obs {
		bad := func(kind string, off int64, format string, args ...any) {
			vs = append(vs, Violation{kind, o.Topic, o.Partition, off, fmt.Sprintf(format, args...)})
		}
		inc := m.inc(o.Inc)
		var part *Part
		if inc != nil && int(o.Partition) < len(inc.Parts) {
			part = inc.Parts[o.Partition]
		}
		gotAt := map[int64]bool{}
		next := o.From
		for _, g := range o.Records {
			switch {
			case g.Offset > next:
				bad(KindGap, next, "offsets %d to %d are missing: the read jumped to %d", next, g.Offset-1, g.Offset)
			case g.Offset < next:
				bad(KindOrder, g.Offset, "offset served again or out of order (after %d)", next-1)
			}
			next = g.Offset + 1
			gotAt[g.Offset] = true
			id := g.Rec.ID()
			s := m.recs[id]
			if s == nil {
				bad(KindUnknown, g.Offset, "a record the workload never produced (id %q, value %s)", id, describeBytes(g.Rec.Value))
				continue
			}
			if prev, dup := seen[id]; dup {
				bad(KindDuplicate, g.Offset, "record %s is also served at offset %d", id, prev.Offset)
			}
			seen[id] = g
			if s.Topic != o.Topic || s.Partition != o.Partition {
				bad(KindUnknown, g.Offset, "record %s was produced to %s/%d", id, s.Topic, s.Partition)
				continue
			}
			if s.Inc != o.Inc && !((s.Loose || s.State == Pending) && m.mayLand(s, o.Inc)) {
				from := m.inc(s.Inc)
				what := "incarnation"
				if from.State == Deleted {
					what = "deleted incarnation"
				}
				into := "a topic the model holds deleted"
				if inc != nil {
					into = fmt.Sprintf("incarnation #%d (created at t%d)", inc.ID, inc.Created)
				}
				bad(KindResurrected, g.Offset, "record %s of %s #%d (created at t%d, deleted at t%d; acknowledged: %v) is served by %s",
					id, what, from.ID, from.Created, from.DeletedAt, s.State == Acked, into)
				continue
			}
			if s.Oversize {
				bad(KindOversize, g.Offset, "record %s (%d value bytes) is over the broker's limits but is stored", id, len(s.Rec.Value))
			}
			got := g.Rec.compact()
			if d := s.Rec.Diff(&got); d != "" {
				bad(KindChanged, g.Offset, "record %s differs: %s", id, d)
			}
			if part != nil {
				if want := part.Acked[g.Offset]; want != nil && want != s {
					bad(KindChanged, g.Offset, "serves record %s, but %s was acknowledged at this offset", id, want.ID)
				} else if s.State == Acked && !s.Loose && s.Offset != g.Offset {
					bad(KindChanged, g.Offset, "serves record %s, which was acknowledged at offset %d", id, s.Offset)
				}
				if was, ok := part.seen[g.Offset]; ok && was != id {
					bad(KindChanged, g.Offset, "serves record %s, but an earlier read got %s here", id, was)
				} else if !ok {
					part.seen[g.Offset] = id
				}
			}
			k := opPart{s.Topic, s.Op, s.Partition}
			positions[k] = append(positions[k], [2]int64{int64(s.Index), g.Offset})
		}
		if o.Complete && o.High >= 0 && next < o.High {
			bad(KindGap, next, "offsets %d to %d are missing: the read ended before the high watermark %d", next, o.High-1, o.High)
		}
		if part == nil {
			continue
		}
		if o.Low >= 0 && part.LowMinTick < o.Since && o.Low < part.LowMin {
			bad(KindLowWatermark, o.Low, "low watermark %d, but DeleteRecords before %d was acknowledged", o.Low, part.LowMin)
		}
		// Every record acknowledged before the read began must be in it,
		// unless DeleteRecords or retention may have removed it.
		lastRead := o.From + int64(len(o.Records)) - 1
		if o.Complete && o.High >= 0 {
			lastRead = o.High - 1
		}
		var lost []*Sent
		for off, s := range part.Acked {
			if s.AckTick >= o.Since || gotAt[off] {
				continue
			}
			switch {
			case o.Low >= 0 && off < o.Low:
				expirable := m.retention > 0 && s.Rec.Timestamp < o.Now-m.retention.Milliseconds()
				if off >= part.LowMax && !expirable {
					lost = append(lost, s)
				}
			case o.High >= 0 && off >= o.High:
				lost = append(lost, s)
			case off >= o.From && off <= lastRead:
				lost = append(lost, s)
			}
		}
		sort.Slice(lost, func(i, j int) bool { return lost[i].Offset < lost[j].Offset })
		for _, s := range lost {
			bad(KindLost, s.Offset, "record %s (acknowledged at t%d, %d value bytes) is not served; low watermark %d, high watermark %d",
				s.ID, s.AckTick, len(s.Rec.Value), o.Low, o.High)
		}
	}
	// One produce's records to a partition keep their order.
	for k, ps := range positions {
		sort.Slice(ps, func(i, j int) bool { return ps[i][0] < ps[j][0] })
		for i := 1; i < len(ps); i++ {
			if ps[i][1] <= ps[i-1][1] {
				vs = append(vs, Violation{KindOrder, k.topic, k.p, ps[i][1], fmt.Sprintf(
					"produce op %d: its record %d is at offset %d, its record %d at offset %d", k.op, ps[i-1][0], ps[i-1][1], ps[i][0], ps[i][1])})
			}
		}
	}
	sort.SliceStable(vs, func(i, j int) bool {
		if vs[i].Topic != vs[j].Topic {
			return vs[i].Topic < vs[j].Topic
		}
		if vs[i].Partition != vs[j].Partition {
			return vs[i].Partition < vs[j].Partition
		}
		return vs[i].Offset < vs[j].Offset
	})
	return vs
}

// mayLand reports whether a record whose produce raced a create or delete
// of its topic may be served by incarnation id: one alive during the produce.
// mayLand says whether s may be stored in incarnation id: one alive at
// some moment of its produce. A produce still under way may land in any
// incarnation of its topic made since it began: the client retries a
// deleted topic's partitions by name until one exists again, as Kafka's do.
func (m *Model) mayLand(s *Sent, id int) bool {
	inc := m.inc(id)
	if inc == nil || inc.Name != s.Topic {
		return false
	}
	end := s.End
	if s.State == Pending {
		end = m.tick + 1
	}
	return inc.Created < end && (inc.DeletedAt == 0 || inc.DeletedAt > s.Begin)
}
