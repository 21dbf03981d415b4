package metadata

import (
	"errors"
	"fmt"
	"strings"
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

// TopicNameError refuses a name Kafka refuses beyond its characters; its
// message is Kafka's, which Kafka's CLI prints. It wraps ErrInvalidTopic.
type TopicNameError struct{ Message string }

func (e *TopicNameError) Error() string { return e.Message }
func (e *TopicNameError) Unwrap() error { return ErrInvalidTopic }

// reservedTopics are Kafka's internal topics: clients (Kafka's own tools,
// Connect, Streams) take these names for the broker's, so they stay free
// for the day strata has them.
var reservedTopics = map[string]bool{"__consumer_offsets": true, "__transaction_state": true}

// CheckTopicName refuses, as Kafka does, an internal topic's name and one
// that collides with an existing topic's once '.' reads as '_' (Kafka's
// metric names replace '.' with '_', so "a.b" and "a_b" cannot both
// exist). The creates of both implementations check it against the topics
// they create among, under the same guard as the create.
func CheckTopicName(name string, existing []string) error {
	if reservedTopics[name] {
		return &TopicNameError{fmt.Sprintf("Topic '%s' is reserved for Kafka's internal use.", name)}
	}
	unify := func(s string) string { return strings.ReplaceAll(s, ".", "_") }
	for _, e := range existing {
		if e != name && unify(e) == unify(name) {
			return &TopicNameError{fmt.Sprintf("Topic '%s' collides with existing topic: %s", name, e)}
		}
	}
	return nil
}
