package kafka

import (
	"context"
	"errors"
	"fmt"
	"time"

	"github.com/twmb/franz-go/pkg/kerr"
	"github.com/twmb/franz-go/pkg/kmsg"

	"strata/catalog"
	"strata/engine/store"
	"strata/metadata"
)

func (s *Server) topics(ctx context.Context) (map[string]int32, error) {
	return s.cluster.Topics(ctx)
}

// createTopic checks a topic against the broker's bounds and creates it
// through the cluster; rf -1 takes the default. The message, when there is
// one, is Kafka's for the same refusal: Kafka's CLI prints it.
func (s *Server) createTopic(ctx context.Context, topic string, partitions int32, rf int16, configs map[string]string) (int16, *string) {
	code, msg, _ := s.createTopicErr(ctx, topic, partitions, rf, configs)
	return code, msg
}

// createTopicErr is createTopic, also returning the cluster's error.
func (s *Server) createTopicErr(ctx context.Context, topic string, partitions int32, rf int16, configs map[string]string) (int16, *string, error) {
	if err := store.ValidateTopic(topic); err != nil {
		return kerr.InvalidTopicException.Code, nil, nil
	}
	if partitions <= 0 {
		partitions = s.cfg.DefaultPartitions
	}
	if rf <= 0 {
		rf = s.cfg.DefaultReplicationFactor
	}
	if partitions > s.cfg.MaxPartitionsPerTopic {
		s.log.Warn("kafka: refusing a topic over kafka.max_partitions_per_topic", "topic", topic, "partitions", partitions, "max", s.cfg.MaxPartitionsPerTopic)
		return kerr.InvalidPartitions.Code, nil, nil
	}
	if has, err := s.partitionCount(ctx); err == nil && has+int(partitions) > s.cfg.MaxPartitions {
		s.log.Warn("kafka: refusing a topic over kafka.max_partitions", "topic", topic, "partitions", partitions, "broker_partitions", has, "max", s.cfg.MaxPartitions)
		msg := (&metadata.PartitionLimitError{Max: s.cfg.MaxPartitions, Has: has, More: int(partitions)}).Error()
		return kerr.PolicyViolation.Code, &msg, nil
	}
	err := s.cluster.CreateTopic(ctx, topic, partitions, rf, configs)
	var rerr *metadata.InvalidReplicationError
	var lerr *metadata.PartitionLimitError
	var nerr *metadata.TopicNameError
	switch {
	case errors.As(err, &nerr):
		s.log.Warn("kafka: refusing a topic name", "topic", topic, "reason", nerr.Message)
		return kerr.InvalidTopicException.Code, &nerr.Message, err
	case errors.As(err, &lerr): // another node's create came first
		s.log.Warn("kafka: refusing a topic over kafka.max_partitions", "topic", topic, "err", err)
		msg := lerr.Error()
		return kerr.PolicyViolation.Code, &msg, err
	case errors.Is(err, catalog.ErrMetadataFull):
		code, msg := s.metadataFull("create topic "+topic, err)
		return code, msg, err
	case errors.Is(err, metadata.ErrTopicDeleting):
		msg := fmt.Sprintf("Topic '%s' is marked for deletion: its objects are being removed from the bucket; try again shortly.", topic)
		return kerr.TopicAlreadyExists.Code, &msg, err
	case errors.Is(err, metadata.ErrTopicExists):
		msg := fmt.Sprintf("Topic '%s' already exists.", topic)
		return kerr.TopicAlreadyExists.Code, &msg, err
	case errors.As(err, &rerr):
		s.log.Warn("kafka: refusing a topic", "topic", topic, "err", err)
		return kerr.InvalidReplicationFactor.Code, nil, err
	case err != nil:
		s.log.Error("kafka: create topic", "topic", topic, "err", err)
		return kerr.UnknownServerError.Code, nil, err
	}
	s.log.Info("topic created", "topic", topic, "partitions", partitions, "replication_factor", rf, "configs", configs)
	return errNone, nil, nil
}

// partitionCount is the partitions of the broker, or of the whole cluster.
func (s *Server) partitionCount(ctx context.Context) (int, error) {
	topics, err := s.topics(ctx)
	n := 0
	for _, p := range topics {
		n += int(p)
	}
	return n, err
}

// metadataFull answers a write the cluster's etcd refused for want of
// space: KAFKA_STORAGE_ERROR with a message, and a log line saying how to
// recover (docs/cluster.md, "When etcd is full").
func (s *Server) metadataFull(what string, err error) (int16, *string) {
	s.log.Error("kafka: etcd is full and refuses writes: compact it, defragment it and disarm its NOSPACE alarm (docs/cluster.md, \"When etcd is full\")", "refused", what, "err", err)
	msg := "The cluster's metadata store (etcd) is full and refuses writes; an operator must free space (docs/cluster.md)."
	return kerr.KafkaStorageError.Code, &msg
}

func (s *Server) createTopics(ctx context.Context, r *kmsg.CreateTopicsRequest) kmsg.Response {
	resp := r.ResponseKind().(*kmsg.CreateTopicsResponse)
	existing, _ := s.topics(ctx)
	for _, t := range r.Topics {
		rt := kmsg.NewCreateTopicsResponseTopic()
		rt.Topic, rt.NumPartitions, rt.ReplicationFactor = t.Topic, t.NumPartitions, t.ReplicationFactor
		if rt.NumPartitions <= 0 {
			rt.NumPartitions = s.cfg.DefaultPartitions
		}
		if rt.ReplicationFactor <= 0 {
			rt.ReplicationFactor = s.cfg.DefaultReplicationFactor
		}
		configs, code, msg := s.createTopicConfigs(t)
		_, exists := existing[t.Topic]
		switch {
		case store.ValidateTopic(t.Topic) != nil:
			rt.ErrorCode = kerr.InvalidTopicException.Code
		case exists:
			// Before its configs, as Kafka answers: a client that finds
			// its topic there (Kafka Connect's workers) goes on.
			m := fmt.Sprintf("Topic '%s' already exists.", t.Topic)
			rt.ErrorCode, rt.ErrorMessage = kerr.TopicAlreadyExists.Code, &m
		case code != errNone:
			rt.ErrorCode, rt.ErrorMessage = code, msg
		case !r.ValidateOnly:
			rt.ErrorCode, rt.ErrorMessage = s.createTopic(ctx, t.Topic, t.NumPartitions, t.ReplicationFactor, configs)
			if rt.ErrorCode == errNone {
				rt.ErrorCode = s.awaitLeaders(ctx, t.Topic, 0, rt.NumPartitions, time.Duration(r.TimeoutMillis)*time.Millisecond)
			}
		}
		if rt.ErrorCode == errNone {
			rt.Configs = s.createdConfigs(configs)
		} else {
			rt.NumPartitions, rt.ReplicationFactor = -1, -1
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
		err := s.cluster.DeleteTopic(ctx, name)
		s.topicsDeleted.Add(1) // once deleted: the connections' read-aheads of its records are dropped
		switch {
		case errors.Is(err, metadata.ErrUnknownTopic):
			rt.ErrorCode = kerr.UnknownTopicOrPartition.Code
		case err != nil:
			s.log.Error("kafka: delete topic", "topic", name, "err", err)
			rt.ErrorCode = kerr.UnknownServerError.Code
		default:
			s.log.Info("topic deleted", "topic", name, "partitions", topics[name])
		}
		for p := int32(0); p < topics[name]; p++ {
			s.partitions.ForgetProducers(store.ShardName(name, p))
		}
		resp.Topics = append(resp.Topics, rt)
	}
	return resp
}
