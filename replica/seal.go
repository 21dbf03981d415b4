package replica

import (
	"cmp"
	"context"
	"fmt"
	"slices"
	"time"
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
}

// DecideSeal decides about the leader's sealed segment own, given the ISR
// and what each follower reported for the segment starting at own.Start.
// Members of the ISR that have not reported keep it waiting; a replica out
// of the ISR that reported an equal copy counts too (it caught up).
// Sealing waits only on this: the next active segment takes writes all the
// while.
func DecideSeal(leader int32, own Seal, isr []int32, reports map[int32]Seal) SealVerdict {
	v := SealVerdict{Replicas: []int32{leader}}
	for _, n := range isr {
		if n == leader {
			continue
		}
		if _, ok := reports[n]; !ok {
			return SealVerdict{Wait: true}
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

// recentSeals bounds the sealed segments a replica remembers and reports:
// a seal is settled within moments of the roll, so only the newest matter.
const recentSeals = 16

// SealRecord is a segment sealed for the cluster: its copy's checksum and
// the replicas that hold an equal copy.
type SealRecord struct {
	Seal
	Replicas []int32
}

// pendingSeal is one of the leader's sealed segments and when it sealed.
type pendingSeal struct {
	Seal
	at       time.Time
	recorded []int32 // the replicas etcd holds for it; nil until recorded
}

// Sealed tells replication that this node sealed segment no of shard: a
// follower reports it to its leader; the leader decides, once its ISR has
// reported, and records it (metadata's RecordSeal). The checksum compared
// is the file's as it is on disk now, read back (an engine that can:
// Checksummed), not the one kept while writing: a copy damaged on disk
// since must not agree.
func (n *Node) Sealed(shard string, no uint64, s Seal) {
	p := n.part(shard)
	if p == nil {
		return
	}
	go func() {
		if c, ok := n.cfg.Store.(Checksummed); ok {
			crc, _, err := c.Checksum(context.Background(), shard, no)
			if err != nil {
				n.cfg.Log.Warn("replica: reading back a sealed segment", "shard", shard, "segment", no, "err", err)
				return
			}
			if crc != s.CRC {
				n.cfg.Log.Error("replica: a sealed segment's file is not what was written: reported as it is", "shard", shard,
					"segment", no, "written_crc32c", s.CRC, "file_crc32c", crc)
			}
			s.CRC = crc
		}
		p.mu.Lock()
		defer p.mu.Unlock()
		for _, o := range p.seals {
			if o.Start == s.Start {
				return
			}
		}
		p.seals = append(p.seals, pendingSeal{Seal: s, at: n.cfg.Now()})
		slices.SortFunc(p.seals, func(a, b pendingSeal) int { return cmp.Compare(a.Start, b.Start) })
		if len(p.seals) > recentSeals {
			p.seals = slices.Delete(p.seals, 0, len(p.seals)-recentSeals)
		}
	}()
}

// Checksummed is an engine that reads back a local segment's checksum.
type Checksummed interface {
	Checksum(ctx context.Context, shard string, no uint64) (crc uint32, size int64, err error)
}

// ownSeals is what a follower reports with its fetches; p.mu is held.
func (p *partition) ownSeals() []Seal {
	out := make([]Seal, len(p.seals))
	for i, s := range p.seals {
		out[i] = s.Seal
	}
	return out
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
	for _, s := range seals[max(0, len(seals)-recentSeals):] {
		m[s.Start] = s
	}
	p.reports[node] = m
}

// settleSeals records the leader's sealed segments that its ISR agrees on;
// p.mu is held. One record is written at a time per partition.
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
		reports := map[int32]Seal{}
		for node, m := range p.reports {
			if r, ok := m[s.Start]; ok {
				reports[node] = r
			}
		}
		v := DecideSeal(n.cfg.Self, s.Seal, isr, reports)
		if v.Wait || (s.recorded != nil && len(v.Replicas) <= len(s.recorded)) {
			continue
		}
		p.sealing = true
		rec := SealRecord{Seal: s.Seal, Replicas: v.Replicas}
		first := s.recorded == nil
		epoch, at := p.a.Epoch, s.at
		go func() {
			ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
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
				if p.seals[i].Start == rec.Start {
					p.seals[i].recorded = rec.Replicas
				}
			}
			if first {
				n.m.sealSeconds.Observe(n.cfg.Now().Sub(at).Seconds())
				if len(v.Differ) > 0 {
					n.m.seals.WithLabelValues("differ").Inc()
					n.cfg.Log.Error("replica: replicas' copies of a sealed segment differ from the leader's: left out of its replicas",
						"shard", p.shard, "seal", rec.Seal.String(), "replicas", rec.Replicas, "differ", v.Differ)
				} else {
					n.m.seals.WithLabelValues("agreed").Inc()
				}
			}
			n.cfg.Log.Info("replica: segment sealed", "shard", p.shard, "seal", rec.Seal.String(), "replicas", rec.Replicas)
		}()
		return
	}
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
	go func() {
		ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
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
	}()
}
