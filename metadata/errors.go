package metadata

import (
	"errors"
	"fmt"
)

// The errors of topic changes, whichever Cluster answers; a cluster's wrap
// them with the topic's name.
var (
	// ErrTopicExists: CreateTopic of a topic that exists.
	ErrTopicExists = errors.New("topic exists")
	// ErrTopicDeleting (an ErrTopicExists): the name is taken until the
	// topic's deletion is cleared from the bucket (Kafka: "marked for
	// deletion").
	ErrTopicDeleting = fmt.Errorf("%w: marked for deletion", ErrTopicExists)
	// ErrUnknownTopic: a change of a topic that does not exist.
	ErrUnknownTopic = errors.New("unknown topic")
	// ErrInvalidTopic: a name Kafka would not accept.
	ErrInvalidTopic = errors.New("invalid topic name")
	// ErrInvalidPartitions: a partition count below 1, or one that does
	// not grow the topic (*InvalidPartitionsError).
	ErrInvalidPartitions = errors.New("invalid partition count")
	// ErrInvalidReplicationFactor: below 1, or more than the cluster can
	// give (*InvalidReplicationError).
	ErrInvalidReplicationFactor = errors.New("invalid replication factor")
)

// InvalidReplicationError refuses a replication factor the cluster cannot
// give a topic (an ErrInvalidReplicationFactor).
type InvalidReplicationError struct {
	Factor int16
	Why    string
}

func (e *InvalidReplicationError) Error() string {
	return fmt.Sprintf("replication factor %d: %s", e.Factor, e.Why)
}

func (e *InvalidReplicationError) Unwrap() error { return ErrInvalidReplicationFactor }

// InvalidPartitionsError refuses a partition count that does not grow a
// topic (an ErrInvalidPartitions): Has is what it has.
type InvalidPartitionsError struct {
	Topic      string
	Has, Asked int32
}

// Error is Kafka's message for it.
func (e *InvalidPartitionsError) Error() string {
	if e.Asked == e.Has {
		return fmt.Sprintf("Topic already has %d partition(s).", e.Has)
	}
	return fmt.Sprintf("The topic %s currently has %d partition(s); %d would not be an increase.", e.Topic, e.Has, e.Asked)
}

func (e *InvalidPartitionsError) Unwrap() error { return ErrInvalidPartitions }

// PartitionLimitError refuses partitions that would take the broker (a
// cluster: the whole cluster) past kafka.max_partitions.
type PartitionLimitError struct {
	Max, Has, More int
}

// Error is what CreateTopics and CreatePartitions answer with it.
func (e *PartitionLimitError) Error() string {
	return fmt.Sprintf("%d more partitions exceed the cluster's kafka.max_partitions (%d; it has %d).", e.More, e.Max, e.Has)
}
