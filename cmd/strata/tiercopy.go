package main

import (
	"bufio"
	"context"
	"fmt"
	"log/slog"
	"os"
	"path/filepath"

	"github.com/prometheus/client_golang/prometheus"

	"strata/catalog"
	"strata/cluster"
	"strata/engine/integrity"
	"strata/engine/record"
	"strata/engine/segment"
	"strata/engine/store"
	"strata/peer"
	"strata/tiering"
)

// copiesDir holds the copies of other nodes' sealed segments rebuilt for
// tiering, under data_dir: each lives only for its upload, and a start
// removes what a crash left.
const copiesDir = "tiering-copies"

// copyReadBytes bounds one copy read's answer.
const copyReadBytes = 4 << 20

// clusterReplicas is the tiering job's Replicas in a cluster: a node tiers
// its own copy of a segment, unless its copy did not agree at the seal
// (cluster.Member.TierSource); then it reads a verified replica's records
// over the Kafka listener (peer.Client.ReadCopy), rebuilds the file here,
// and the job checks it against the checksum the cluster sealed.
type clusterReplicas struct {
	engine *segment.Engine
	member *cluster.Member
	peers  *peer.Client
	dir    string
	log    *slog.Logger
	reads  *prometheus.CounterVec // remote copies by result
}

func newClusterReplicas(dataDir string, e *segment.Engine, m *cluster.Member, peers *peer.Client, reg prometheus.Registerer, log *slog.Logger) (*clusterReplicas, error) {
	dir := filepath.Join(dataDir, copiesDir)
	if err := os.RemoveAll(dir); err != nil {
		return nil, fmt.Errorf("clearing %s: %w", dir, err)
	}
	if err := os.MkdirAll(dir, 0o755); err != nil {
		return nil, err
	}
	reads := prometheus.NewCounterVec(prometheus.CounterOpts{Name: "strata_tiering_remote_copies_total",
		Help: "Sealed segments this node rebuilt from another replica's copy to tier them (its own did not agree at the seal), by result: done, refused (not the sealed checksum), failed."},
		[]string{"result"})
	if err := reg.Register(reads); err != nil {
		return nil, err
	}
	return &clusterReplicas{engine: e, member: m, peers: peers, dir: dir, log: log, reads: reads}, nil
}

func (c *clusterReplicas) SegmentCopy(ctx context.Context, shard string, s catalog.Segment) (tiering.Copy, error) {
	src, err := c.member.TierSource(ctx, shard, s.StartOffset, s.EndOffset)
	if err != nil {
		return tiering.Copy{}, err
	}
	if !src.Remote {
		return tiering.LocalReplica{Engine: c.engine}.SegmentCopy(ctx, shard, s)
	}
	return tiering.Copy{Checksum: src.CRC, Remote: true, Open: func(ctx context.Context) (tiering.CopyFile, error) {
		return c.fetch(ctx, shard, s, src)
	}}, nil
}

// fetch rebuilds node src.Node's copy of segment s in a temporary file,
// and refuses it unless its bytes have the sealed checksum.
func (c *clusterReplicas) fetch(ctx context.Context, shard string, s catalog.Segment, src cluster.TierSource) (tiering.CopyFile, error) {
	tp, ok := store.ParseShard(shard)
	if !ok {
		return tiering.CopyFile{}, fmt.Errorf("shard %q names no topic partition", shard)
	}
	f, err := os.CreateTemp(c.dir, fmt.Sprintf("%s-%020d-*.msg", shard, s.StartOffset))
	if err != nil {
		return tiering.CopyFile{}, err
	}
	remove := func() { f.Close(); os.Remove(f.Name()) }
	fail := func(err error) (tiering.CopyFile, error) {
		remove()
		result := "failed"
		if integrity.IsCorruption(err) {
			result = "refused"
		}
		c.reads.WithLabelValues(result).Inc()
		return tiering.CopyFile{}, fmt.Errorf("node %d's copy of %s offsets %d to %d: %w", src.Node, shard, s.StartOffset, s.EndOffset, err)
	}
	w := bufio.NewWriterSize(f, 1<<20)
	var sum record.Sum
	for next := s.StartOffset; next <= s.EndOffset; {
		recs, err := c.peers.ReadCopy(ctx, src.Node, tp.Topic, tp.Partition, int64(next), copyReadBytes)
		if err != nil {
			return fail(err)
		}
		if len(recs) == 0 {
			return fail(fmt.Errorf("it holds no records at %d", next))
		}
		for i := range recs {
			r := &recs[i]
			if r.Offset > s.EndOffset {
				break
			}
			if r.Offset < next {
				return fail(fmt.Errorf("asked from %d, it answered a record at %d", next, r.Offset))
			}
			enc, err := sum.Add(r)
			if err != nil {
				return fail(err)
			}
			w.Write(enc)
			next = r.Offset + 1
		}
		if recs[len(recs)-1].Offset >= s.EndOffset {
			break
		}
	}
	if err := w.Flush(); err != nil {
		return fail(err)
	}
	if err := f.Close(); err != nil {
		return fail(err)
	}
	if got := sum.Checksum(); got != src.CRC {
		return fail(fmt.Errorf("rebuilt as %d bytes with crc32c %08x, the segment was sealed with %08x: refused: %w", sum.Bytes, got, src.CRC, record.ErrCorrupt))
	}
	c.reads.WithLabelValues("done").Inc()
	c.log.Info("tiering a sealed segment from another replica's copy: this node's did not agree at the seal",
		"shard", shard, "start_offset", s.StartOffset, "end_offset", s.EndOffset, "from_node", src.Node, "bytes", sum.Bytes, "records", sum.Records)
	return tiering.CopyFile{Path: f.Name(), Size: sum.Bytes, Records: sum.Records, Remove: func() { os.Remove(f.Name()) }}, nil
}
