package replica

import (
	"cmp"
	"context"
	"errors"
	"fmt"
	"slices"
	"time"

	"strata/engine/store"
)

// Seal agreement (docs/design.md): a segment is sealed for the cluster only when
// every ISR member holds all of it and their checksums agree. Each replica
// seals its own copy where the leader rolled (followers roll at the
// leader's offsets, so their files are the same bytes) and reports the
// copy's checksum; the leader decides, and records the segment in etcd
// with the replicas that agree. Tiering then takes the segment from any of
// them, never from one whose copy differs.

// Seal is one replica's sealed copy of a segment: offsets Start through End (its last) and
// the CRC-32C of the file.
type Seal struct {
	Start, Last uint64 // the first and the last offset
	CRC         uint32
}

func (s Seal) String() string { return fmt.Sprintf("[%d, %d] crc %08x", s.Start, s.Last, s.CRC) }

// SealVerdict is what the leader decides about one of its sealed segments.
type SealVerdict struct {
	// Wait: an ISR member has not reported its copy yet.
	Wait bool
	// Replicas hold a copy equal to the leader's, the leader first.
	Replicas []int32
	// Differ reported a copy that is not the leader's: they are left out of
	// the segment's replicas, so nothing is ever read or tiered from them.
	Differ []int32
	// Overdue are ISR members that were not waited for: they hold all of
	// the segment and have not reported a copy of it for long (theirs does
	// not start where the leader's does). Left out too; an equal copy
	// reported later is added.
	Overdue []int32
}

// DecideSeal decides about the leader's sealed segment own, given the ISR
// and what each follower reported for the segment starting at own.Start.
// Members of the ISR that have not reported keep it waiting, but for those
// overdue (they hold all of it and have not reported it for
// sealReportWait: their segment files do not start where the leader's
// does, so no report will come); a replica out of the ISR that reported an
// equal copy counts too (it caught up). Sealing waits only on this: the
// next active segment takes writes all the while.
func DecideSeal(leader int32, own Seal, isr []int32, reports map[int32]Seal, overdue []int32) SealVerdict {
	v := SealVerdict{Replicas: []int32{leader}}
	for _, n := range isr {
		if n == leader {
			continue
		}
		if _, ok := reports[n]; !ok {
			if !slices.Contains(overdue, n) {
				return SealVerdict{Wait: true}
			}
			v.Overdue = append(v.Overdue, n)
		}
	}
	nodes := make([]int32, 0, len(reports))
	for n := range reports {
		nodes = append(nodes, n)
	}
	slices.Sort(nodes)
	for _, n := range nodes {
		if n == leader {
			continue
		}
		if reports[n] == own {
			v.Replicas = append(v.Replicas, n)
		} else {
			v.Differ = append(v.Differ, n)
		}
	}
	return v
}

// A copy refilled from a log start that DeleteRecords left inside a
// segment begins its first segment there and ends it where the other
// copies' segment ends: it holds that segment's tail. No other copy starts
// where it does, so no report of it ever comes, and a record of the tail
// alone names a segment no other replica holds; the whole segment the
// others hold would never be recorded, and their tiering would wait there
// for good. So a leader whose sealed segment is such a tail records the
// whole segment its followers report instead (DecideWhole); the tail's
// holders then adopt the whole segment's object once it is tiered (tiering's
// head rule), and their tails count as settled by its record (SettleSeals).

// DecideWhole decides, for a leader whose sealed segment own holds its log
// start (its log began there, or inside it), about the whole segment own
// may be the tail of. reports holds
// each follower's report that bears on own: its copy at own.Start (a tail
// like the leader's) or a whole, one that starts below own and ends where
// own ends. ok is false when no follower reported a whole: own is then
// decided as any segment is (DecideSeal). Otherwise the ISR members that
// have reported neither keep it waiting, but for those overdue, as in
// DecideSeal. The leader cannot compare a whole with its own copy, which
// lacks the head; the whole recorded is the copy a strict majority of the
// followers that hold a whole reported (Replicas, sorted; the leader is
// not among them), the others Differ. With no such majority (two copies,
// one each) nothing is recorded: Replicas is empty and every holder
// Differs, until one of them is refilled and reports a tail instead.
func DecideWhole(leader int32, own Seal, isr []int32, reports map[int32]Seal, overdue []int32) (whole Seal, v SealVerdict, ok bool) {
	holders := map[Seal][]int32{}
	var nodes []int32
	for n, r := range reports {
		if n != leader && r.Start < own.Start && r.Last == own.Last {
			holders[r] = append(holders[r], n)
			nodes = append(nodes, n)
		}
	}
	if len(nodes) == 0 {
		return Seal{}, SealVerdict{}, false
	}
	for _, n := range isr {
		if _, reported := reports[n]; n == leader || reported {
			continue
		}
		if !slices.Contains(overdue, n) {
			return Seal{}, SealVerdict{Wait: true}, true
		}
		v.Overdue = append(v.Overdue, n)
	}
	best := 0
	for s, hs := range holders {
		if len(hs) > best || len(hs) == best && s.Start < whole.Start {
			whole, best = s, len(hs)
		}
	}
	if 2*best <= len(nodes) {
		whole = Seal{}
	}
	for _, n := range nodes {
		if whole != (Seal{}) && reports[n] == whole {
			v.Replicas = append(v.Replicas, n)
		} else {
			v.Differ = append(v.Differ, n)
		}
	}
	slices.Sort(v.Replicas)
	slices.Sort(v.Differ)
	return whole, v, true
}

// A replica's seals to settle are derived from its log, not remembered: its
// local sealed segments (the engine lists them) against the cluster's
// records of them. Whoever leads after a crash, a restart or an election
// finds every rolled segment still to be sealed and records it once its ISR
// has reported its copies; followers report theirs the same way.
const (
	// sealScanEvery is how often a replica derives its seals to settle
	// again; sealScanWaiting how often while one has no record yet.
	sealScanEvery   = time.Minute
	sealScanWaiting = 5 * time.Second
	// sealWarnAfter is how long a local sealed segment may wait for its
	// record before the node says so in its log: tiering takes none of the
	// partition's later segments until it is sealed for the cluster.
	sealWarnAfter = 2 * time.Minute
	// sealReportWait is how long the leader waits for an ISR member's
	// report of a segment that member holds all of.
	sealReportWait = 20 * time.Second
	// reportWindow bounds the seals a follower reports with one fetch; a
	// leader keeps at most reportKeep of one follower's.
	reportWindow = 64
	reportKeep   = 4 * reportWindow
)

// SealRecord is a segment sealed for the cluster: its copy's checksum and
// the replicas that hold an equal copy.
type SealRecord struct {
	Seal
	Replicas []int32
}

// SealState is one of a replica's local sealed segments as the cluster's
// records have it: Recorded names the replicas its record holds, nil while
// it has none. Whole is, for a copy that holds only a segment's tail, the
// whole segment's record, which settles it (DecideWhole).
type SealState struct {
	Seal
	Recorded []int32
	Whole    *SealRecord
}

// unrecorded: no record names the segment, not even as a tail.
func (s SealState) unrecorded() bool { return s.Recorded == nil && s.Whole == nil }

// SettleSeals sorts a replica's local sealed segments against the cluster's
// records of them (by start) and keeps those still to be settled, in
// local's order: a segment with no record; one whose record does not name
// self though its copy agrees (a replica that caught up, or a new leader
// whose predecessor recorded it without it); and one whose record leaves
// out some of replicas, which may yet report an equal copy (the leader adds
// them). A copy that differs from its record is dropped: a record is never
// rewritten with other bytes, so it will never agree. A segment with no
// record that holds logStart and ends where a record that starts below it
// ends is that segment's tail (DecideWhole): settled by the whole's
// record, kept (Whole set) only while that record leaves out some of
// replicas but self, whose equal copies the leader may add.
func SettleSeals(self int32, replicas []int32, logStart uint64, local []Seal, records map[uint64]SealRecord) []SealState {
	var keep []SealState
	for _, s := range local {
		rec, ok := records[s.Start]
		switch {
		case !ok:
			if whole, ok := wholeOf(s, logStart, records); ok {
				if slices.ContainsFunc(replicas, func(r int32) bool { return r != self && !slices.Contains(whole.Replicas, r) }) {
					keep = append(keep, SealState{Seal: s, Whole: &whole})
				}
				continue
			}
			keep = append(keep, SealState{Seal: s})
		case rec.Seal != s:
		case !slices.Contains(rec.Replicas, self) || slices.ContainsFunc(replicas, func(r int32) bool { return !slices.Contains(rec.Replicas, r) }):
			keep = append(keep, SealState{Seal: s, Recorded: slices.Clone(rec.Replicas)})
		}
	}
	return keep
}

// wholeOf is the record of the segment s is the tail of, if s starts at
// logStart and a record starting below it ends where s ends.
func wholeOf(s Seal, logStart uint64, records map[uint64]SealRecord) (SealRecord, bool) {
	if !holdsLogStart(s, logStart) {
		return SealRecord{}, false
	}
	for _, r := range records {
		if r.Start < s.Start && r.Last == s.Last {
			r.Replicas = slices.Clone(r.Replicas)
			return r, true
		}
	}
	return SealRecord{}, false
}

// holdsLogStart: s is the segment the log starts in. A copy refilled from
// a log start begins its first segment there; a DeleteRecords since may
// have moved the log start further into it. What another copy holds of
// the same segment below s is below the log start: deleted records.
func holdsLogStart(s Seal, logStart uint64) bool { return s.Start <= logStart && logStart <= s.Last }

// SealReports picks what a follower reports with one fetch of its seals to
// settle, at most max: first those with no record, the oldest and the
// newest when there are more than max (so neither a backlog nor a segment
// no other replica holds keeps the others waiting); then those recorded
// without self, oldest first. Those whose record names self are settled
// as far as this replica goes.
func SealReports(self int32, seals []SealState, max int) []Seal {
	var none, without []Seal
	for _, s := range seals {
		switch {
		case s.Whole != nil:
			// A tail: the leader records the whole from those who hold it.
		case s.Recorded == nil:
			none = append(none, s.Seal)
		case !slices.Contains(s.Recorded, self):
			without = append(without, s.Seal)
		}
	}
	if len(none) > max {
		none = append(none[:max/2:max/2], none[len(none)-(max-max/2):]...)
	}
	return append(none, without[:min(len(without), max-len(none))]...)
}

// pendingSeal is one of this replica's sealed segments still to be settled
// for the cluster: its copy as read back from disk, and when it sealed.
type pendingSeal struct {
	SealState
	// held is, by follower, when the leader first saw it fetch past the
	// segment: from then on its report is due.
	held map[int32]time.Time
	// written is the checksum kept while the file was written, which tells
	// this copy from another at the same offsets (a log copied again).
	written  uint32
	at       time.Time
	warned   bool   // that it waits long was logged
	conflict bool   // that the followers' wholes disagree was logged
	added    uint64 // p.added when it was added by its event
}

// Sealed tells replication that this node sealed segment no of shard: a
// follower reports it to its leader; the leader decides, once its ISR has
// reported, and records it (metadata's RecordSeal). The checksum compared
// is the file's as it is on disk now, read back (an engine that can:
// Checksummed), not the one kept while writing: a copy damaged on disk
// since must not agree. A segment whose event is lost (a crash right after
// the roll) is found by the next scan of the log (scanSeals).
func (n *Node) Sealed(shard string, no uint64, s Seal) {
	p := n.part(shard)
	if p == nil {
		return
	}
	n.goBackground(func(context.Context) {
		crc, err := n.readBack(shard, no, s.CRC)
		if err != nil {
			n.cfg.Log.Warn("replica: reading back a sealed segment", "shard", shard, "segment", no, "err", err)
			return
		}
		written := s.CRC
		s.CRC = crc
		p.mu.Lock()
		defer p.mu.Unlock()
		p.addSeal(pendingSeal{SealState: SealState{Seal: s}, written: written, at: n.cfg.Now()})
	})
}

// readBack is the CRC-32C of local segment no's file as it is on disk, for
// an engine that can read it back; written is the one kept while writing.
func (n *Node) readBack(shard string, no uint64, written uint32) (uint32, error) {
	c, ok := n.cfg.Store.(Checksummed)
	if !ok {
		return written, nil
	}
	crc, _, err := c.Checksum(context.Background(), shard, no)
	if err != nil {
		return 0, err
	}
	if crc != written {
		n.cfg.Log.Error("replica: a sealed segment's file is not what was written: reported as it is", "shard", shard,
			"segment", no, "written_crc32c", written, "file_crc32c", crc)
	}
	return crc, nil
}

// addSeal adds s to p's seals to settle unless it is there; one at its
// offsets that is another file (the log was copied again since) is
// replaced. p.mu is held.
func (p *partition) addSeal(s pendingSeal) {
	i, found := slices.BinarySearchFunc(p.seals, s.Start, func(a pendingSeal, start uint64) int { return cmp.Compare(a.Start, start) })
	if found && p.seals[i].Last == s.Last && p.seals[i].written == s.written {
		return
	}
	p.added++
	s.added = p.added
	if found {
		p.seals[i] = s
		return
	}
	p.seals = slices.Insert(p.seals, i, s)
}

// Checksummed is an engine that reads back a local segment's checksum.
type Checksummed interface {
	Checksum(ctx context.Context, shard string, no uint64) (crc uint32, size int64, err error)
}

// ownSeals is what a follower reports with its fetches; p.mu is held.
func (n *Node) ownSeals(p *partition) []Seal {
	states := make([]SealState, len(p.seals))
	for i, s := range p.seals {
		states[i] = s.SealState
	}
	return SealReports(n.cfg.Self, states, reportWindow)
}

// takeReports keeps what a follower reported of its sealed copies; p.mu is
// held.
func (p *partition) takeReports(node int32, seals []Seal) {
	if len(seals) == 0 {
		return
	}
	if p.reports == nil {
		p.reports = map[int32]map[uint64]Seal{}
	}
	m := map[uint64]Seal{}
	for _, s := range seals[:min(len(seals), reportKeep)] {
		m[s.Start] = s
	}
	p.reports[node] = m
}

// fetchedPast notes that follower fetched from offset: it holds every
// segment that ends below it, and its reports of them are due; p.mu is
// held.
func (n *Node) fetchedPast(p *partition, follower int32, offset int64) {
	for i := range p.seals {
		s := &p.seals[i]
		if !s.unrecorded() || offset <= int64(s.Last) {
			continue
		}
		if _, ok := s.held[follower]; !ok {
			if s.held == nil {
				s.held = map[int32]time.Time{}
			}
			s.held[follower] = n.cfg.Now()
		}
	}
}

// scanSeals derives p's seals to settle again from its local sealed
// segments and the cluster's records, when due; p.mu is held. It runs at
// the start, once a minute, every few seconds while a seal has no record,
// and when this node takes the lead.
func (n *Node) scanSeals(p *partition, now time.Time) {
	lister, ok := n.cfg.Store.(store.SealedLister)
	if !ok || p.scanning {
		return
	}
	due := p.scannedAt.IsZero() || now.Sub(p.scannedAt) >= sealScanEvery
	if !due && now.Sub(p.scannedAt) >= sealScanWaiting {
		due = slices.ContainsFunc(p.seals, func(s pendingSeal) bool { return s.unrecorded() })
	}
	if !due {
		return
	}
	p.scanning, p.scannedAt = true, now
	replicas, since := slices.Clone(p.a.Replicas), p.added
	known := map[[2]uint64]uint32{} // copies read back already, by start and written checksum
	for _, s := range p.seals {
		known[[2]uint64{s.Start, uint64(s.written)}] = s.CRC
	}
	n.goBackground(func(ctx context.Context) {
		found, err := n.deriveSeals(ctx, p, lister, replicas, known)
		p.mu.Lock()
		defer p.mu.Unlock()
		p.scanning = false
		if err != nil {
			// Again soon; a shard placed a moment ago is still being made.
			p.scannedAt = n.cfg.Now().Add(sealScanWaiting - sealScanEvery)
			if !errors.Is(err, store.ErrUnknownShard) {
				n.cfg.Log.Warn("replica: deriving the seals to settle from the log", "shard", p.shard, "err", err)
			}
			return
		}
		n.mergeSeals(p, found, since)
		if p.leader != nil {
			n.settleSeals(p)
		}
	})
}

// deriveSeals lists p's local sealed segments still to be settled, with
// their files read back.
func (n *Node) deriveSeals(ctx context.Context, p *partition, lister store.SealedLister, replicas []int32, known map[[2]uint64]uint32) ([]pendingSeal, error) {
	ctx, cancel := context.WithTimeout(ctx, 10*time.Second)
	defer cancel()
	segs, err := lister.SealedSegments(ctx, p.shard)
	if err != nil || len(segs) == 0 {
		return nil, err
	}
	recs, err := n.cfg.Meta.Seals(ctx, p.topic, p.p, segs[0].Start, segs[len(segs)-1].Start)
	if err != nil {
		return nil, err
	}
	records := map[uint64]SealRecord{}
	for _, r := range recs {
		records[r.Start] = r
	}
	low, _, err := n.cfg.Store.Watermarks(ctx, p.shard)
	if err != nil {
		return nil, err
	}
	if first := segs[0].Start; first > 0 && holdsLogStart(Seal{Start: first, Last: segs[0].Last}, low) {
		if _, ok := records[first]; !ok {
			// Perhaps the tail of a segment whose head was deleted before
			// this copy was refilled: the record that starts below says.
			if r, ok, err := n.cfg.Meta.SealBelow(ctx, p.topic, p.p, first); err != nil {
				return nil, err
			} else if ok {
				records[r.Start] = r
			}
		}
	}
	local := make([]Seal, len(segs))
	byStart := map[uint64]store.SealedSegment{}
	read := map[uint64]bool{}
	for i, s := range segs {
		local[i] = Seal{Start: s.Start, Last: s.Last, CRC: s.CRC}
		if crc, ok := known[[2]uint64{s.Start, uint64(s.CRC)}]; ok {
			local[i].CRC, read[s.Start] = crc, true
		}
		byStart[s.Start] = s
	}
	// Sorted with the checksums kept while writing first; then those left
	// are read back (the file as it is on disk is what agrees or not) and
	// sorted again.
	keep := SettleSeals(n.cfg.Self, replicas, low, local, records)
	back := make([]Seal, 0, len(keep))
	var tails []SealState
	for _, s := range keep {
		if s.Whole != nil {
			tails = append(tails, s) // settled by the whole's record, whatever its bytes
			continue
		}
		if !read[s.Start] {
			crc, err := n.readBack(p.shard, byStart[s.Start].No, s.CRC)
			if err != nil {
				n.cfg.Log.Warn("replica: reading back a sealed segment", "shard", p.shard, "segment", byStart[s.Start].No, "err", err)
				continue
			}
			s.CRC = crc
		}
		back = append(back, s.Seal)
	}
	var out []pendingSeal
	for _, s := range append(SettleSeals(n.cfg.Self, replicas, low, back, records), tails...) {
		out = append(out, pendingSeal{SealState: s, written: byStart[s.Start].CRC, at: byStart[s.Start].SealedAt})
	}
	return out, nil
}

// mergeSeals makes found p's seals to settle; those whose events came
// after the scan began (p.added past since) stay, as the engine may have
// been read before their rolls. A record is only ever added to, so what
// this node recorded meanwhile is kept too. p.mu is held.
func (n *Node) mergeSeals(p *partition, found []pendingSeal, since uint64) {
	old := map[uint64]pendingSeal{}
	var later []pendingSeal
	for _, s := range p.seals {
		old[s.Start] = s
		if s.added > since && !slices.ContainsFunc(found, func(f pendingSeal) bool { return f.Start == s.Start }) {
			later = append(later, s)
		}
	}
	now := n.cfg.Now()
	for i := range found {
		s := &found[i]
		if o, ok := old[s.Start]; ok {
			s.warned, s.conflict, s.held = o.warned, o.conflict, o.held
			for _, r := range o.Recorded {
				if !slices.Contains(s.Recorded, r) {
					s.Recorded = append(s.Recorded, r)
				}
			}
			if s.Whole == nil {
				s.Whole = o.Whole
			} else if o.Whole != nil && o.Whole.Seal == s.Whole.Seal {
				for _, r := range o.Whole.Replicas {
					if !slices.Contains(s.Whole.Replicas, r) {
						s.Whole.Replicas = append(s.Whole.Replicas, r)
					}
				}
			}
		}
		if s.at.IsZero() {
			s.at = now
		}
		if s.unrecorded() && !s.warned && now.Sub(s.at) > sealWarnAfter {
			s.warned = true
			var missing []int32
			if p.leader != nil {
				isr, _ := p.leader.ISR()
				for _, r := range isr {
					if _, ok := p.reports[r][s.Start]; !ok && r != n.cfg.Self {
						missing = append(missing, r)
					}
				}
			}
			n.cfg.Log.Warn("replica: a sealed segment is still not sealed for the cluster: tiering takes no later segment of the partition until it is",
				"shard", p.shard, "seal", s.Seal.String(), "sealed_ago", now.Sub(s.at).Round(time.Second), "leading", p.leader != nil,
				"leader", p.a.Leader, "not_reported_by", missing)
		}
	}
	p.seals = append(found, later...)
	slices.SortFunc(p.seals, func(a, b pendingSeal) int { return cmp.Compare(a.Start, b.Start) })
}

// settleSeals records the leader's sealed segments that its ISR agrees on,
// and adds to a record the replicas that reported an equal copy since; p.mu
// is held. One record is written at a time per partition.
func (n *Node) settleSeals(p *partition) {
	if p.leader == nil || p.sealing {
		return
	}
	isr, _ := p.leader.ISR()
	for i := range p.seals {
		s := &p.seals[i]
		if p.leader.HW() <= int64(s.Last) {
			// Not all committed: an unclean election could still replace
			// some of it, and a seal is what tiering trusts.
			continue
		}
		if handled, writing := n.settleWhole(p, s, isr); writing {
			return
		} else if handled {
			continue
		}
		reports := map[int32]Seal{}
		news := false // a report from a replica its record does not name yet
		for node, m := range p.reports {
			if r, ok := m[s.Start]; ok {
				reports[node] = r
				news = news || !slices.Contains(s.Recorded, node)
			}
		}
		if s.Recorded != nil && !news && slices.Contains(s.Recorded, n.cfg.Self) {
			continue
		}
		var v SealVerdict
		if s.Recorded == nil {
			v = DecideSeal(n.cfg.Self, s.Seal, isr, reports, n.overdue(s))
		} else {
			// Sealed for the cluster already: an equal copy adds to it,
			// with no wait for the rest.
			v = DecideSeal(n.cfg.Self, s.Seal, nil, reports, nil)
		}
		if v.Wait || !slices.ContainsFunc(v.Replicas, func(r int32) bool { return !slices.Contains(s.Recorded, r) }) {
			continue
		}
		n.writeSeal(p, SealRecord{Seal: s.Seal, Replicas: v.Replicas}, s.Start, s.Recorded == nil, s.at, v)
		return
	}
}

// overdue lists the followers that have held all of s for sealReportWait
// without reporting it.
func (n *Node) overdue(s *pendingSeal) []int32 {
	var out []int32
	for node, since := range s.held {
		if n.cfg.Now().Sub(since) >= sealReportWait {
			out = append(out, node)
		}
	}
	return out
}

// settleWhole settles s as the tail of a segment its followers hold whole
// (DecideWhole): handled when s is such a tail, so its own copy is never
// recorded alone; writing when a record is on its way. p.mu is held.
func (n *Node) settleWhole(p *partition, s *pendingSeal, isr []int32) (handled, writing bool) {
	reports := map[int32]Seal{} // each follower's report bearing on s
	wholes := false
	for node, m := range p.reports {
		if r, ok := m[s.Start]; ok {
			reports[node] = r
			continue
		}
		for _, r := range m {
			if r.Start < s.Start && r.Last == s.Last {
				reports[node], wholes = r, true
				break
			}
		}
	}
	if s.Whole != nil {
		// The whole is recorded: a holder that reports it since is added.
		var adds []int32
		for node, r := range reports {
			if r == s.Whole.Seal && !slices.Contains(s.Whole.Replicas, node) {
				adds = append(adds, node)
			}
		}
		if len(adds) == 0 {
			return true, false
		}
		slices.Sort(adds)
		n.writeSeal(p, SealRecord{Seal: s.Whole.Seal, Replicas: adds}, s.Start, false, s.at, SealVerdict{Replicas: adds})
		return true, true
	}
	if !wholes {
		return false, false
	}
	if low, _, err := n.cfg.Store.Watermarks(context.Background(), p.shard); err != nil || !holdsLogStart(s.Seal, low) {
		return false, false // not where this copy's log starts: not a tail but rolls that differ
	}
	whole, v, _ := DecideWhole(n.cfg.Self, s.Seal, isr, reports, n.overdue(s))
	switch {
	case v.Wait:
		return true, false
	case len(v.Replicas) == 0:
		if !s.conflict {
			s.conflict = true
			n.m.seals.WithLabelValues("differ").Inc()
			n.cfg.Log.Error("replica: this leader holds only the tail of a sealed segment, and its followers' copies of the whole differ with no majority: none is recorded, and the partition's tiering waits there",
				"shard", p.shard, "tail", s.Seal.String(), "reports", fmt.Sprint(reports))
		}
		return true, false
	}
	n.writeSeal(p, SealRecord{Seal: whole, Replicas: v.Replicas}, s.Start, true, s.at, v)
	return true, true
}

// writeSeal writes rec in the background, as p's leader at its epoch, and
// notes it on the seal to settle that starts at own (rec's own segment, or
// the tail of rec's whole); first: the segment had no record. p.mu is held.
func (n *Node) writeSeal(p *partition, rec SealRecord, own uint64, first bool, at time.Time, v SealVerdict) {
	p.sealing = true
	epoch := p.a.Epoch
	n.goBackground(func(ctx context.Context) {
		ctx, cancel := context.WithTimeout(ctx, 10*time.Second)
		defer cancel()
		err := n.cfg.Meta.RecordSeal(ctx, p.topic, p.p, epoch, rec)
		p.mu.Lock()
		defer p.mu.Unlock()
		p.sealing = false
		if err != nil {
			n.cfg.Log.Warn("replica: recording a sealed segment", "shard", p.shard, "seal", rec.Seal.String(), "err", err)
			return
		}
		for i := range p.seals {
			s := &p.seals[i]
			if s.Start != own {
				continue
			}
			if rec.Start != own {
				if s.Whole == nil || s.Whole.Seal != rec.Seal {
					s.Whole = &SealRecord{Seal: rec.Seal}
				}
				for _, r := range rec.Replicas {
					if !slices.Contains(s.Whole.Replicas, r) {
						s.Whole.Replicas = append(s.Whole.Replicas, r)
					}
				}
				break
			}
			for _, r := range rec.Replicas {
				if !slices.Contains(s.Recorded, r) {
					s.Recorded = append(s.Recorded, r)
				}
			}
			if !slices.ContainsFunc(p.a.Replicas, func(r int32) bool { return !slices.Contains(s.Recorded, r) }) {
				p.seals = slices.Delete(p.seals, i, i+1) // every replica's copy is in the record
			}
			break
		}
		if first {
			n.m.sealSeconds.Observe(n.cfg.Now().Sub(at).Seconds())
			if len(v.Differ) > 0 || len(v.Overdue) > 0 {
				n.m.seals.WithLabelValues("differ").Inc()
				n.cfg.Log.Error("replica: replicas' copies of a sealed segment differ from the leader's, or were not reported: left out of its replicas",
					"shard", p.shard, "seal", rec.Seal.String(), "replicas", rec.Replicas, "differ", v.Differ, "not_reported", v.Overdue)
			} else {
				n.m.seals.WithLabelValues("agreed").Inc()
			}
		}
		if rec.Start != own {
			n.cfg.Log.Info("replica: segment sealed from its followers' copies: this leader holds only its tail, from its log start",
				"shard", p.shard, "seal", rec.Seal.String(), "replicas", rec.Replicas, "tail_start", own)
		} else {
			n.cfg.Log.Info("replica: segment sealed", "shard", p.shard, "seal", rec.Seal.String(), "replicas", rec.Replicas)
		}
		n.settleSeals(p) // the next, without waiting for a tick
	})
}

// pruneSeals has the leader delete, at most once a minute, the seal records
// of segments its log no longer holds (retention, DeleteRecords); p.mu is
// held.
func (n *Node) pruneSeals(p *partition, now time.Time) {
	if now.Sub(p.prunedAt) < time.Minute {
		return
	}
	p.prunedAt = now
	low, _, err := n.cfg.Store.Watermarks(context.Background(), p.shard)
	if err != nil || low <= p.pruned {
		return
	}
	n.goBackground(func(ctx context.Context) {
		ctx, cancel := context.WithTimeout(ctx, 10*time.Second)
		defer cancel()
		k, err := n.cfg.Meta.PruneSeals(ctx, p.topic, p.p, low)
		if err != nil {
			n.cfg.Log.Warn("replica: pruning the seals below the log start", "shard", p.shard, "log_start", low, "err", err)
			return
		}
		p.mu.Lock()
		p.pruned = low
		p.mu.Unlock()
		if k > 0 {
			n.cfg.Log.Info("replica: seal records below the log start deleted", "shard", p.shard, "log_start", low, "deleted", k)
		}
	})
}
