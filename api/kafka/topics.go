package kafka

import (
	"context"
	"errors"

	"github.com/twmb/franz-go/pkg/kerr"
	"github.com/twmb/franz-go/pkg/kmsg"

	"strata/engine/store"
)

// topics groups the store's shards by topic: topic -> partition count.
func (s *Server) topics(ctx context.Context) (map[string]int32, error) {
	shards, err := s.store.Shards(ctx)
	if err != nil {
		return nil, err
	}
	out := map[string]int32{}
	for _, sh := range shards {
		if tp, ok := store.ParseShard(sh); ok {
			out[tp.Topic] = max(out[tp.Topic], tp.Partition+1)
		}
	}
	return out, nil
}

func (s *Server) createTopic(ctx context.Context, topic string, partitions int32) int16 {
	if err := store.ValidateTopic(topic); err != nil {
		return kerr.InvalidTopicException.Code
	}
	if partitions <= 0 {
		partitions = s.cfg.DefaultPartitions
	}
	if partitions > s.cfg.MaxPartitionsPerTopic {
		s.log.Warn("kafka: refusing a topic over kafka.max_partitions_per_topic", "topic", topic, "partitions", partitions, "max", s.cfg.MaxPartitionsPerTopic)
		return kerr.InvalidPartitions.Code
	}
	if shards, err := s.store.Shards(ctx); err == nil && len(shards)+int(partitions) > s.cfg.MaxPartitions {
		s.log.Warn("kafka: refusing a topic over kafka.max_partitions", "topic", topic, "partitions", partitions, "broker_partitions", len(shards), "max", s.cfg.MaxPartitions)
		return kerr.PolicyViolation.Code
	}
	for p := int32(0); p < partitions; p++ {
		err := s.store.CreateShard(ctx, store.ShardName(topic, p))
		if errors.Is(err, store.ErrShardExists) {
			if p == 0 {
				return kerr.TopicAlreadyExists.Code
			}
			continue
		}
		if err != nil {
			s.log.Error("kafka: create topic", "topic", topic, "err", err)
			return kerr.UnknownServerError.Code
		}
	}
	s.log.Info("topic created", "topic", topic, "partitions", partitions)
	return errNone
}

func (s *Server) createTopics(ctx context.Context, r *kmsg.CreateTopicsRequest) kmsg.Response {
	resp := r.ResponseKind().(*kmsg.CreateTopicsResponse)
	for _, t := range r.Topics {
		rt := kmsg.NewCreateTopicsResponseTopic()
		rt.Topic, rt.NumPartitions, rt.ReplicationFactor = t.Topic, t.NumPartitions, 1
		if r.ValidateOnly {
			if store.ValidateTopic(t.Topic) != nil {
				rt.ErrorCode = kerr.InvalidTopicException.Code
			}
		} else {
			rt.ErrorCode = s.createTopic(ctx, t.Topic, t.NumPartitions)
		}
		resp.Topics = append(resp.Topics, rt)
	}
	return resp
}

func (s *Server) deleteTopics(ctx context.Context, r *kmsg.DeleteTopicsRequest) kmsg.Response {
	resp := r.ResponseKind().(*kmsg.DeleteTopicsResponse)
	topics, _ := s.topics(ctx)
	for _, name := range r.TopicNames {
		rt := kmsg.NewDeleteTopicsResponseTopic()
		n := name
		rt.Topic = &n
		parts, ok := topics[name]
		if !ok {
			rt.ErrorCode = kerr.UnknownTopicOrPartition.Code
		}
		for p := int32(0); p < parts; p++ {
			if err := s.store.DeleteShard(ctx, store.ShardName(name, p)); err != nil && !errors.Is(err, store.ErrUnknownShard) {
				s.log.Error("kafka: delete topic", "topic", name, "partition", p, "err", err)
				rt.ErrorCode = kerr.UnknownServerError.Code
			}
			s.seqs.forget(store.ShardName(name, p))
		}
		if rt.ErrorCode == errNone {
			s.log.Info("topic deleted", "topic", name, "partitions", parts)
		}
		resp.Topics = append(resp.Topics, rt)
	}
	return resp
}
