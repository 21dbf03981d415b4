package kafka

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"time"

	"github.com/twmb/franz-go/pkg/kerr"
	"github.com/twmb/franz-go/pkg/kmsg"

	"strata/catalog"
	"strata/metadata"
)

// createPartitions answers CreatePartitions as Kafka does: each topic
// grows to its count, the new partitions empty and the others untouched;
// a count that does not grow the topic is INVALID_PARTITIONS, a topic named
// twice INVALID_REQUEST (once), an assignment that does not list one replica set
// per new partition, of live brokers, INVALID_REPLICA_ASSIGNMENT (strata
// places partitions itself: a valid assignment is checked, not followed).
func (s *Server) createPartitions(ctx context.Context, r *kmsg.CreatePartitionsRequest) kmsg.Response {
	resp := r.ResponseKind().(*kmsg.CreatePartitionsResponse)
	topics, err := s.topics(ctx)
	seen := map[string]int{}
	for _, t := range r.Topics {
		seen[t.Topic]++
	}
	for _, t := range r.Topics {
		if seen[t.Topic] < 0 {
			continue // a topic named twice is answered once, as Kafka answers it
		}
		rt := kmsg.NewCreatePartitionsResponseTopic()
		rt.Topic = t.Topic
		code, msg := s.createPartitionsOf(ctx, t, topics, err, seen[t.Topic] > 1, r.ValidateOnly)
		if code == errNone && !r.ValidateOnly {
			code = s.awaitLeaders(ctx, t.Topic, topics[t.Topic], t.Count, time.Duration(r.TimeoutMillis)*time.Millisecond)
		}
		rt.ErrorCode = code
		if msg != "" {
			rt.ErrorMessage = &msg
		}
		if seen[t.Topic] > 1 {
			seen[t.Topic] = -1
		}
		resp.Topics = append(resp.Topics, rt)
	}
	return resp
}

func (s *Server) createPartitionsOf(ctx context.Context, t kmsg.CreatePartitionsRequestTopic, topics map[string]int32, topicsErr error, twice, validateOnly bool) (int16, string) {
	if twice {
		return kerr.InvalidRequest.Code, "Duplicate topic name."
	}
	if topicsErr != nil {
		s.log.Error("kafka: create partitions: listing topics", "err", topicsErr)
		return kerr.UnknownServerError.Code, ""
	}
	has, ok := topics[t.Topic]
	if !ok {
		return kerr.UnknownTopicOrPartition.Code, ""
	}
	if t.Count <= has {
		return kerr.InvalidPartitions.Code, (&metadata.InvalidPartitionsError{Topic: t.Topic, Has: has, Asked: t.Count}).Error()
	}
	if t.Count > s.cfg.MaxPartitionsPerTopic {
		s.log.Warn("kafka: refusing partitions over kafka.max_partitions_per_topic", "topic", t.Topic, "partitions", t.Count, "max", s.cfg.MaxPartitionsPerTopic)
		return kerr.InvalidPartitions.Code, fmt.Sprintf("%d partitions exceed the broker's kafka.max_partitions_per_topic (%d).", t.Count, s.cfg.MaxPartitionsPerTopic)
	}
	if n, err := s.partitionCount(ctx); err == nil && n+int(t.Count-has) > s.cfg.MaxPartitions {
		s.log.Warn("kafka: refusing partitions over kafka.max_partitions", "topic", t.Topic, "new_partitions", t.Count-has, "broker_partitions", n, "max", s.cfg.MaxPartitions)
		return kerr.PolicyViolation.Code, (&metadata.PartitionLimitError{Max: s.cfg.MaxPartitions, Has: n, More: int(t.Count - has)}).Error()
	}
	if t.Assignment != nil {
		if msg := s.checkAssignment(t, has); msg != "" {
			return kerr.InvalidReplicaAssignment.Code, msg
		}
	}
	if validateOnly {
		return errNone, ""
	}
	err := s.cluster.CreatePartitions(ctx, t.Topic, t.Count)
	var perr *metadata.InvalidPartitionsError
	var lerr *metadata.PartitionLimitError
	switch {
	case errors.As(err, &lerr): // another node's create came first
		s.log.Warn("kafka: refusing partitions over kafka.max_partitions", "topic", t.Topic, "err", err)
		return kerr.PolicyViolation.Code, lerr.Error()
	case errors.Is(err, catalog.ErrMetadataFull):
		_, msg := s.metadataFull("create partitions of "+t.Topic, err)
		return kerr.KafkaStorageError.Code, *msg
	case errors.Is(err, metadata.ErrUnknownTopic):
		return kerr.UnknownTopicOrPartition.Code, ""
	case errors.As(err, &perr): // it grew meanwhile
		return kerr.InvalidPartitions.Code, perr.Error()
	case err != nil:
		s.log.Error("kafka: create partitions", "topic", t.Topic, "count", t.Count, "err", err)
		return kerr.UnknownServerError.Code, ""
	}
	s.log.Info("partitions created", "topic", t.Topic, "from", has, "to", t.Count)
	return errNone, ""
}

// checkAssignment says what is wrong with a manual replica assignment, or
// "": one replica list per new partition, each of live, distinct brokers.
func (s *Server) checkAssignment(t kmsg.CreatePartitionsRequestTopic, has int32) string {
	if n := int32(len(t.Assignment)); n != t.Count-has {
		return fmt.Sprintf("Attempted to add %d additional partition(s), but only %d assignment(s) were specified.", t.Count-has, n)
	}
	var live []int32
	for _, b := range s.cluster.Brokers() {
		live = append(live, b.NodeID)
	}
	for i, a := range t.Assignment {
		if len(a.Replicas) == 0 {
			return fmt.Sprintf("The manual partition assignment includes a partition with no replicas (partition %d).", has+int32(i))
		}
		for j, id := range a.Replicas {
			if !slices.Contains(live, id) {
				return fmt.Sprintf("The manual partition assignment includes broker %d, but no such broker is registered.", id)
			}
			if slices.Contains(a.Replicas[:j], id) {
				return fmt.Sprintf("The manual partition assignment includes the broker %d more than once.", id)
			}
		}
	}
	return ""
}
