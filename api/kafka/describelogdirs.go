package kafka

import (
	"context"
	"sort"
	"syscall"

	"github.com/twmb/franz-go/pkg/kerr"
	"github.com/twmb/franz-go/pkg/kmsg"

	"strata/engine/store"
)

// localSizer is a store that measures a shard's bytes on this node's disk
// (every engine of strata's does).
type localSizer interface {
	LocalBytes(shard string) (int64, error)
}

// describeLogDirs answers DescribeLogDirs as a Kafka broker with one log
// dir does: the partitions this node keeps (all, or those asked for that it
// has), each with its local size: its segments on this disk, the active
// one and the sealed ones not yet dropped after tiering. The tiered
// (cold) bytes are not in the answer, which has no field for them: the
// admin API's topic view shows them (docs/kafka.md).
func (s *Server) describeLogDirs(ctx context.Context, r *kmsg.DescribeLogDirsRequest) kmsg.Response {
	resp := r.ResponseKind().(*kmsg.DescribeLogDirsResponse)
	shards, err := s.store.Shards(ctx)
	if err != nil {
		s.log.Error("kafka: describe log dirs: listing shards", "err", err)
		resp.ErrorCode = kerr.UnknownServerError.Code
		return resp
	}
	var asked map[store.TopicPartition]bool
	if r.Topics != nil {
		asked = map[store.TopicPartition]bool{}
		for _, t := range r.Topics {
			for _, p := range t.Partitions {
				asked[store.TopicPartition{Topic: t.Topic, Partition: p}] = true
			}
		}
	}
	dir := kmsg.NewDescribeLogDirsResponseDir()
	dir.Dir = s.cfg.LogDir
	var fs syscall.Statfs_t
	if s.cfg.LogDir != "" && syscall.Statfs(s.cfg.LogDir, &fs) == nil {
		dir.TotalBytes, dir.UsableBytes = int64(fs.Blocks)*fs.Bsize, int64(fs.Bavail)*fs.Bsize
	}
	sizer, _ := s.store.(localSizer)
	byTopic := map[string][]kmsg.DescribeLogDirsResponseDirTopicPartition{}
	for _, sh := range shards {
		tp, ok := store.ParseShard(sh)
		if !ok || asked != nil && !asked[tp] {
			continue
		}
		p := kmsg.NewDescribeLogDirsResponseDirTopicPartition()
		p.Partition = tp.Partition
		if sizer != nil {
			if p.Size, err = sizer.LocalBytes(sh); err != nil {
				continue // deleted meanwhile
			}
		}
		byTopic[tp.Topic] = append(byTopic[tp.Topic], p)
	}
	topics := make([]string, 0, len(byTopic))
	for t := range byTopic {
		topics = append(topics, t)
	}
	sort.Strings(topics)
	for _, t := range topics {
		dt := kmsg.NewDescribeLogDirsResponseDirTopic()
		dt.Topic, dt.Partitions = t, byTopic[t]
		dir.Topics = append(dir.Topics, dt)
	}
	resp.Dirs = append(resp.Dirs, dir)
	return resp
}
