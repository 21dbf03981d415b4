package harness

import (
	"fmt"
	"sort"
	"strings"
	"sync"
	"time"
)

// Properties the checker holds a run to, as Violation.Property names them.
const (
	Lost          = "lost"             // an acks=all record acknowledged is not read back
	Duplicate     = "duplicate"        // an idempotently produced record is stored at two offsets
	OffsetClash   = "offset-conflict"  // two records at one offset, or a record read where it was not acknowledged
	DeletedServed = "deleted-served"   // a record below an acknowledged DeleteRecords, or of a deleted topic, is served
	NotTiered     = "not-tiered"       // a sealed segment still only local when the tiering bound has passed
	Diverged      = "replica-diverged" // two replicas' sealed copies, or records at one offset, differ
	CommitLost    = "commit-lost"      // the group's committed offset is not the last one acknowledged
	Unknown       = "unknown"          // a record read that the run never produced, or in another partition
	Password      = "password"         // a replaced password logs in, or the current one does not, past PasswordBound
)

// PasswordBound is how long after a password change is acknowledged every
// node may still take the old password (and refuse the new): the nodes
// learn a credential from their watch of etcd. A login is judged only
// once a change is this old.
const PasswordBound = 10 * time.Second

// PasswordSet is one change of the rotated user's password, sent to Node:
// Gen counts the changes (0: the first password), so each generation's
// password is another. OK: acknowledged at T1; failed or timed out, it
// may have been applied.
type PasswordSet struct {
	Gen    int
	Node   int32
	OK     bool
	T0, T1 time.Duration
}

// Login is one login of the rotated user on Node with generation Gen's
// password, begun at T. Faulted: a fault was in play (a node down, paused
// or cut from etcd, or recovering) since the change before it was sent,
// so the node may rightly not know of it: not judged. Final: after the
// run, with everything healed.
type Login struct {
	Node    int32
	Gen     int
	T       time.Duration
	OK      bool
	Err     string
	Faulted bool
	Final   bool
}

// Part names one incarnation of one partition: a topic deleted and
// created again is a new incarnation, whose offsets start again.
type Part struct {
	Topic     string
	Inc       int
	Partition int32
}

func (p Part) String() string { return fmt.Sprintf("%s#%d-%d", p.Topic, p.Inc, p.Partition) }

// Produced is one record's produce and its outcome. T0 and T1 are when the
// produce was sent and its outcome known, from the start of the run.
type Produced struct {
	Part    Part
	Value   string
	AcksAll bool // acks=all, idempotent; otherwise acks=1, not idempotent
	OK      bool
	Offset  int64 // when OK
	T0, T1  time.Duration
}

// Deleted is one DeleteRecords: the log start moved to Before, or maybe
// (failed: it may have been applied).
type Deleted struct {
	Part   Part
	Before int64
	OK     bool
	T0, T1 time.Duration
}

// Rec is a record as read: its offset and value.
type Rec struct {
	Offset int64
	Value  string
}

// Read is one read of a partition from some offset on, started at T0.
// Final: the read after the run, which must cover the partition from its
// log start to its high watermark.
type Read struct {
	Part     Part
	T0       time.Duration
	Final    bool
	LogStart int64 // the log start the node reported; -1 unknown
	Records  []Rec
}

// Copy is one replica's own copy of a partition, up to its high watermark.
type Copy struct {
	Node    int32
	Part    Part
	HW      int64
	Records []Rec
}

// Segment is a segment as a node reports it after the run.
type Segment struct {
	Node     int32
	Part     Part
	No       uint64
	State    string // active, sealed, remote
	Start    uint64
	End      uint64
	Checksum uint32
}

// Commit is one OffsetCommit of a group's offset for a partition.
type Commit struct {
	Group  string
	Part   Part
	Offset int64
	OK     bool
	T0, T1 time.Duration
}

// History is everything a run did and saw. Its methods are safe for
// concurrent use; Check reads it once the run is over.
type History struct {
	mu        sync.Mutex
	Produced  []Produced
	Deleted   []Deleted
	Reads     []Read
	Copies    []Copy
	Segments  []Segment // the last snapshot, after the tiering bound
	Commits   []Commit
	Passwords []PasswordSet
	Logins    []Login
	Committed map[string]int64 // group/part: the committed offset read after the run
	// Incs: each topic's last incarnation; records of earlier ones must
	// never be served in it.
	Incs map[string]int
}

func (h *History) AddProduced(p Produced) {
	h.mu.Lock()
	h.Produced = append(h.Produced, p)
	h.mu.Unlock()
}
func (h *History) AddDeleted(d Deleted) { h.mu.Lock(); h.Deleted = append(h.Deleted, d); h.mu.Unlock() }
func (h *History) AddRead(r Read)       { h.mu.Lock(); h.Reads = append(h.Reads, r); h.mu.Unlock() }
func (h *History) AddCopy(c Copy)       { h.mu.Lock(); h.Copies = append(h.Copies, c); h.mu.Unlock() }
func (h *History) AddCommit(c Commit)   { h.mu.Lock(); h.Commits = append(h.Commits, c); h.mu.Unlock() }
func (h *History) AddPassword(p PasswordSet) {
	h.mu.Lock()
	h.Passwords = append(h.Passwords, p)
	h.mu.Unlock()
}
func (h *History) AddLogin(l Login) { h.mu.Lock(); h.Logins = append(h.Logins, l); h.mu.Unlock() }

// EachPassword calls f with each password change.
func (h *History) EachPassword(f func(PasswordSet)) {
	h.mu.Lock()
	defer h.mu.Unlock()
	for _, p := range h.Passwords {
		f(p)
	}
}

// EachFinalRead calls f with each final read.
func (h *History) EachFinalRead(f func(Read)) {
	h.mu.Lock()
	defer h.mu.Unlock()
	for _, r := range h.Reads {
		if r.Final {
			f(r)
		}
	}
}

// SetCommitted records the offset read back for group's part after the run.
func (h *History) SetCommitted(group string, p Part, off int64) {
	h.mu.Lock()
	defer h.mu.Unlock()
	if h.Committed == nil {
		h.Committed = map[string]int64{}
	}
	h.Committed[group+"/"+p.String()] = off
}

// SetInc records that topic's current incarnation is inc.
func (h *History) SetInc(topic string, inc int) {
	h.mu.Lock()
	defer h.mu.Unlock()
	if h.Incs == nil {
		h.Incs = map[string]int{}
	}
	h.Incs[topic] = inc
}

// Violation is one broken promise.
type Violation struct {
	Property string
	Part     Part
	Offset   int64 // -1: none
	Detail   string
}

func (v Violation) String() string {
	at := v.Part.String()
	if v.Part.Topic == "" {
		at = "the rotated user" // a login, not a partition
	}
	if v.Offset >= 0 {
		at += fmt.Sprintf(" offset %d", v.Offset)
	}
	return fmt.Sprintf("%s: %s: %s", v.Property, at, v.Detail)
}

// Check judges the history: every violation, in a stable order.
func (h *History) Check() []Violation {
	h.mu.Lock()
	defer h.mu.Unlock()
	var vs []Violation
	bad := func(prop string, p Part, off int64, format string, args ...any) {
		vs = append(vs, Violation{prop, p, off, fmt.Sprintf(format, args...)})
	}
	byValue := map[string]*Produced{}
	for i := range h.Produced {
		p := &h.Produced[i]
		// A value is produced once; an acknowledged outcome wins over a
		// failed one for the same value (it cannot happen, but be sure).
		if prev, ok := byValue[p.Value]; !ok || (!prev.OK && p.OK) {
			byValue[p.Value] = p
		}
	}
	// The log start a partition may have: any DeleteRecords sent may have
	// been applied; one acknowledged must have been, from its answer on.
	maybeStart := map[Part]int64{}
	for _, d := range h.Deleted {
		maybeStart[d.Part] = max(maybeStart[d.Part], d.Before)
	}

	// What each offset holds, by every read, copy and acknowledgement.
	type claim struct {
		value string
		by    string
	}
	atOffset := map[Part]map[int64]claim{}
	holds := func(p Part, off int64, value, by string) {
		m := atOffset[p]
		if m == nil {
			m = map[int64]claim{}
			atOffset[p] = m
		}
		if prev, ok := m[off]; ok {
			if prev.value != value {
				bad(OffsetClash, p, off, "%q (%s) and %q (%s)", prev.value, prev.by, value, by)
			}
			return
		}
		m[off] = claim{value, by}
	}
	for _, p := range h.Produced {
		if p.OK && p.AcksAll {
			holds(p.Part, p.Offset, p.Value, "acknowledged")
		}
	}

	// Where each value was read, per partition incarnation.
	where := map[string]map[int64]bool{}
	finalRead := map[Part]bool{}
	finalHas := map[string]bool{}
	look := func(p Part, r Rec, by string, t0 time.Duration, checkDeleted bool) {
		holds(p, r.Offset, r.Value, by)
		src, ok := byValue[r.Value]
		switch {
		case !ok:
			bad(Unknown, p, r.Offset, "%q read (%s) was never produced", r.Value, by)
			return
		case src.Part.Topic == p.Topic && src.Part.Partition == p.Partition && src.Part.Inc != p.Inc:
			bad(DeletedServed, p, r.Offset, "%q (%s) was produced to incarnation %d of the topic, deleted since", r.Value, by, src.Part.Inc)
			return
		case src.Part != p:
			bad(Unknown, p, r.Offset, "%q read (%s) was produced to %s", r.Value, by, src.Part)
			return
		}
		if where[r.Value] == nil {
			where[r.Value] = map[int64]bool{}
		}
		where[r.Value][r.Offset] = true
		if checkDeleted {
			for _, d := range h.Deleted {
				if d.OK && d.Part == p && d.T1 < t0 && r.Offset < d.Before {
					bad(DeletedServed, p, r.Offset, "%q served (%s) below offset %d, deleted by DeleteRecords acknowledged at %s",
						r.Value, by, d.Before, d.T1.Round(time.Millisecond))
					break
				}
			}
		}
	}
	for _, rd := range h.Reads {
		by := fmt.Sprintf("read at %s", rd.T0.Round(time.Millisecond))
		if rd.Final {
			by = "final read"
			finalRead[rd.Part] = true
			if rd.LogStart >= 0 {
				for _, d := range h.Deleted {
					if d.OK && d.Part == rd.Part && rd.LogStart < d.Before {
						bad(DeletedServed, rd.Part, rd.LogStart, "the log starts at %d after DeleteRecords before %d was acknowledged at %s",
							rd.LogStart, d.Before, d.T1.Round(time.Millisecond))
						break
					}
				}
			}
		}
		for _, r := range rd.Records {
			look(rd.Part, r, by, rd.T0, true)
			if rd.Final {
				finalHas[r.Value] = true
			}
		}
	}
	for _, c := range h.Copies {
		by := fmt.Sprintf("node %d's copy", c.Node)
		for _, r := range c.Records {
			look(c.Part, r, by, -1, false)
		}
	}
	values := make([]string, 0, len(where))
	for v := range where {
		values = append(values, v)
	}
	sort.Strings(values)
	for _, v := range values {
		if src := byValue[v]; src.AcksAll && len(where[v]) > 1 {
			var offs []int64
			for o := range where[v] {
				offs = append(offs, o)
			}
			sort.Slice(offs, func(i, j int) bool { return offs[i] < offs[j] })
			bad(Duplicate, src.Part, offs[1], "%q stored at offsets %v", v, offs)
		}
	}

	// Lost: an acknowledged acks=all record of a partition read whole after
	// the run, at or above any log start a DeleteRecords may have set.
	for _, p := range h.Produced {
		if !p.OK || !p.AcksAll || !finalRead[p.Part] || h.Incs[p.Part.Topic] != p.Part.Inc {
			continue
		}
		if p.Offset < maybeStart[p.Part] || finalHas[p.Value] {
			continue
		}
		bad(Lost, p.Part, p.Offset, "%q acknowledged at %s is not read back", p.Value, p.T1.Round(time.Millisecond))
	}

	// Replicas: the same records at the same offsets up to the lower high
	// watermark (holds found those), and the same high watermark once the
	// run is over.
	hws := map[Part]map[int32]int64{}
	for _, c := range h.Copies {
		if hws[c.Part] == nil {
			hws[c.Part] = map[int32]int64{}
		}
		hws[c.Part][c.Node] = c.HW
	}
	for _, p := range sortedParts(hws) {
		var desc []string
		same := true
		var first int64 = -1
		for _, n := range sortedNodes(hws[p]) {
			desc = append(desc, fmt.Sprintf("node %d: %d", n, hws[p][n]))
			if first < 0 {
				first = hws[p][n]
			} else if hws[p][n] != first {
				same = false
			}
		}
		if !same {
			bad(Diverged, p, -1, "the replicas' high watermarks differ after the run: %s", strings.Join(desc, ", "))
		}
	}
	// Sealed copies: one segment (by its start) has one end and checksum
	// on every node that holds it sealed or tiered.
	type segKey struct {
		part  Part
		start uint64
	}
	segs := map[segKey][]Segment{}
	for _, s := range h.Segments {
		if s.State == "sealed" || s.State == "remote" {
			k := segKey{s.Part, s.Start}
			segs[k] = append(segs[k], s)
		}
	}
	var keys []segKey
	for k := range segs {
		keys = append(keys, k)
	}
	sort.Slice(keys, func(i, j int) bool {
		if keys[i].part != keys[j].part {
			return keys[i].part.String() < keys[j].part.String()
		}
		return keys[i].start < keys[j].start
	})
	for _, k := range keys {
		ss := segs[k]
		for _, s := range ss[1:] {
			if s.End != ss[0].End || (s.Checksum != ss[0].Checksum && s.Checksum != 0 && ss[0].Checksum != 0) {
				bad(Diverged, k.part, int64(k.start), "sealed copies differ: node %d holds %d-%d crc %08x, node %d holds %d-%d crc %08x",
					ss[0].Node, ss[0].Start, ss[0].End, ss[0].Checksum, s.Node, s.Start, s.End, s.Checksum)
			}
		}
	}
	// Tiering: nothing sealed is left only local once the bound is over.
	// A segment wholly below the final log start should have expired from
	// every tier, not been tiered: said apart, since the two have different
	// causes. One violation per node and partition, naming every segment
	// (a stuck shard leaves dozens, and the first few say little).
	finalStart := map[Part]int64{}
	for _, rd := range h.Reads {
		if rd.Final && rd.LogStart >= 0 {
			finalStart[rd.Part] = max(finalStart[rd.Part], rd.LogStart)
		}
	}
	type nodePart struct {
		node int32
		part Part
	}
	left := map[nodePart][]Segment{}
	for _, s := range h.Segments {
		if s.State == "sealed" && h.Incs[s.Part.Topic] == s.Part.Inc {
			k := nodePart{s.Node, s.Part}
			left[k] = append(left[k], s)
		}
	}
	stuck := make([]nodePart, 0, len(left))
	for k := range left {
		stuck = append(stuck, k)
	}
	sort.Slice(stuck, func(i, j int) bool {
		if stuck[i].part != stuck[j].part {
			return stuck[i].part.String() < stuck[j].part.String()
		}
		return stuck[i].node < stuck[j].node
	})
	for _, k := range stuck {
		ss := left[k]
		sort.Slice(ss, func(i, j int) bool { return ss[i].No < ss[j].No })
		var expired, tiered []Segment
		start, known := finalStart[k.part]
		for _, s := range ss {
			if known && int64(s.End) < start {
				expired = append(expired, s)
			} else {
				tiered = append(tiered, s)
			}
		}
		var says []string
		if len(expired) > 0 {
			says = append(says, fmt.Sprintf("%d wholly below the final log start %d, not expired: %s", len(expired), start, segmentRuns(expired)))
		}
		if len(tiered) > 0 {
			says = append(says, fmt.Sprintf("%d not tiered: %s", len(tiered), segmentRuns(tiered)))
		}
		bad(NotTiered, k.part, int64(ss[0].Start), "node %d's %d sealed segments still local: %s", k.node, len(ss), strings.Join(says, "; "))
	}

	// Group commits: the offset read back is the last acknowledged one, or
	// one sent after it whose answer was lost.
	type gp struct {
		group string
		part  Part
	}
	last := map[gp]Commit{}
	for _, c := range h.Commits {
		k := gp{c.Group, c.Part}
		if c.OK && c.T1 > last[k].T1 {
			last[k] = c
		}
	}
	for k, l := range last {
		got, ok := h.Committed[k.group+"/"+k.part.String()]
		if ok && got == l.Offset {
			continue
		}
		maybe := false
		for _, c := range h.Commits {
			maybe = maybe || (c.Group == k.group && c.Part == k.part && !c.OK && c.T1 > l.T0 && c.Offset == got)
		}
		if !maybe {
			bad(CommitLost, k.part, got, "group %s's committed offset is %d (read: %v); the last commit acknowledged, at %s, was %d",
				k.group, got, ok, l.T1.Round(time.Millisecond), l.Offset)
		}
	}

	// Password changes: a password replaced by a change acknowledged at
	// least PasswordBound before the login must fail; the newest sent,
	// acknowledged that long before, with none sent after, must work.
	for _, l := range h.Logins {
		if l.Faulted {
			continue
		}
		var last *PasswordSet
		for i := range h.Passwords {
			c := &h.Passwords[i]
			if c.T0 > l.T {
				continue
			}
			if last == nil || c.Gen > last.Gen {
				last = c
			}
			if c.OK && c.Gen > l.Gen && c.T1+PasswordBound <= l.T && l.OK {
				bad(Password, Part{}, -1, "node %d took password %d at %s (final: %v), replaced by password %d acknowledged by node %d at %s",
					l.Node, l.Gen, l.T.Round(time.Millisecond), l.Final, c.Gen, c.Node, c.T1.Round(time.Millisecond))
				break
			}
		}
		if last != nil && last.OK && last.Gen == l.Gen && last.T1+PasswordBound <= l.T && !l.OK {
			bad(Password, Part{}, -1, "node %d refused password %d at %s (final: %v), set by node %d at %s: %s",
				l.Node, l.Gen, l.T.Round(time.Millisecond), l.Final, last.Node, last.T1.Round(time.Millisecond), l.Err)
		}
	}
	return vs
}

// segmentRuns names segments (sorted by number) as runs of consecutive
// numbers with their offsets: "70-74 (95479-100955), 80 (101000-101500)".
func segmentRuns(ss []Segment) string {
	var runs []string
	for i := 0; i < len(ss); {
		j := i
		for j+1 < len(ss) && ss[j+1].No == ss[j].No+1 {
			j++
		}
		if i == j {
			runs = append(runs, fmt.Sprintf("%d (%d-%d)", ss[i].No, ss[i].Start, ss[i].End))
		} else {
			runs = append(runs, fmt.Sprintf("%d-%d (%d-%d)", ss[i].No, ss[j].No, ss[i].Start, ss[j].End))
		}
		i = j + 1
	}
	return strings.Join(runs, ", ")
}

func sortedParts[V any](m map[Part]V) []Part {
	var out []Part
	for p := range m {
		out = append(out, p)
	}
	sort.Slice(out, func(i, j int) bool { return out[i].String() < out[j].String() })
	return out
}

func sortedNodes(m map[int32]int64) []int32 {
	var out []int32
	for n := range m {
		out = append(out, n)
	}
	sort.Slice(out, func(i, j int) bool { return out[i] < out[j] })
	return out
}

// Summarize counts violations by property and gives the first few of each.
func Summarize(vs []Violation, each int) string {
	by := map[string][]Violation{}
	for _, v := range vs {
		by[v.Property] = append(by[v.Property], v)
	}
	props := make([]string, 0, len(by))
	for p := range by {
		props = append(props, p)
	}
	sort.Strings(props)
	var b strings.Builder
	for _, p := range props {
		fmt.Fprintf(&b, "%s: %d\n", p, len(by[p]))
		for i, v := range by[p] {
			if i == each {
				fmt.Fprintf(&b, "  ... and %d more\n", len(by[p])-each)
				break
			}
			fmt.Fprintf(&b, "  %s\n", v)
		}
	}
	return b.String()
}

// Stats is a line about the history's size.
func (h *History) Stats() string {
	h.mu.Lock()
	defer h.mu.Unlock()
	acked, acks1, failed := 0, 0, 0
	for _, p := range h.Produced {
		switch {
		case !p.OK:
			failed++
		case p.AcksAll:
			acked++
		default:
			acks1++
		}
	}
	reads := 0
	for _, r := range h.Reads {
		reads += len(r.Records)
	}
	judged := 0
	for _, l := range h.Logins {
		if !l.Faulted {
			judged++
		}
	}
	return fmt.Sprintf("%d acks=all acknowledged, %d acks=1 acknowledged, %d failed; %d DeleteRecords; %d reads of %d records; %d replica copies; %d segments; %d commits; %d password changes, %d logins (%d judged)",
		acked, acks1, failed, len(h.Deleted), len(h.Reads), reads, len(h.Copies), len(h.Segments), len(h.Commits),
		len(h.Passwords), len(h.Logins), judged)
}
