// Package metadata is what both front ends (the Kafka API and the admin
// API) ask about the cluster: the brokers, the topics and their configs,
// each partition's leader, epoch and replicas, each group's coordinator;
// and how topics are created, grown, deleted and reconfigured. One
// interface, Cluster, with one set of errors: a single node answers it for
// itself (Single), a cluster node from its meta-service (*cluster.Member,
// docs/cluster.md). The front ends map the errors to their protocols'.
package metadata

import (
	"context"
	"net"
	"strconv"
)

// Cluster says who serves what, and changes the topics.
type Cluster interface {
	// Self is this node's id.
	Self() int32
	// Brokers lists the live brokers.
	Brokers() []Broker
	// Controller is the node that places partitions (-1: none known).
	Controller() int32
	// Topics lists the topics and their partition counts.
	Topics(ctx context.Context) (map[string]int32, error)
	// Partition is a partition's leader (-1: none now), its epoch (-1:
	// none to check) and its replicas and in-sync replicas; ok is false
	// when the partition does not exist.
	Partition(topic string, partition int32) (info PartitionInfo, ok bool)
	// CreateTopic creates a topic with its configs (checked already; nil:
	// none) (ErrTopicExists if it exists, ErrTopicDeleting while its
	// deletion is cleared; an *InvalidReplicationError if the replication
	// factor cannot be met; a *PartitionLimitError past the bound).
	CreateTopic(ctx context.Context, topic string, partitions int32, replicationFactor int16, configs map[string]string) error
	// DeleteTopic deletes a topic (ErrUnknownTopic if it does not exist).
	DeleteTopic(ctx context.Context, topic string) error
	// CreatePartitions grows a topic to count partitions, the new ones
	// empty (ErrUnknownTopic; an *InvalidPartitionsError if count is not
	// more than it has; a *PartitionLimitError past the bound).
	CreatePartitions(ctx context.Context, topic string, count int32) error
	// Coordinator is the node that coordinates a group.
	Coordinator(group string) Broker
	// TopicConfigs is a topic's own configs (nil: none), from memory:
	// Produce asks on every request.
	TopicConfigs(topic string) map[string]string
	// AlterTopicConfigs replaces a topic's configs with what change makes
	// of the current ones (which it must not modify), durably and without
	// losing a concurrent change (ErrUnknownTopic if the topic does not
	// exist; an error of change's is returned as it is). Alter adds the
	// checks every front end makes.
	AlterTopicConfigs(ctx context.Context, topic string, change func(map[string]string) (map[string]string, error)) error
	// ProducerID is a producer id no node of the cluster has handed out
	// before, nor will (InitProducerId), from blocks the metadata layer
	// reserves durably (ProducerIDs).
	ProducerID(ctx context.Context) (int64, error)
}

// Changes is implemented by a Cluster whose answers change by themselves
// (a cluster's, as etcd changes): a wait for leaders wakes on them.
type Changes interface {
	// Changed is closed at the next change.
	Changed() <-chan struct{}
}

// Broker is one node as clients reach it.
type Broker struct {
	NodeID int32
	Host   string
	Port   int32
}

// BrokerAt is node id listening at addr (host:port); ok is false when addr
// is not one.
func BrokerAt(id int32, addr string) (b Broker, ok bool) {
	host, port, err := net.SplitHostPort(addr)
	if err != nil {
		return Broker{}, false
	}
	p, err := strconv.ParseInt(port, 10, 32)
	if err != nil {
		return Broker{}, false
	}
	return Broker{NodeID: id, Host: host, Port: int32(p)}, true
}

// BrokerAddr is a live node's Kafka listener in c, host:port (BrokerAt's
// inverse): where another node reaches it (peer.ClientConfig.Addr); ok is
// false when the node is not live.
func BrokerAddr(c Cluster, node int32) (addr string, ok bool) {
	for _, b := range c.Brokers() {
		if b.NodeID == node {
			return net.JoinHostPort(b.Host, strconv.Itoa(int(b.Port))), true
		}
	}
	return "", false
}

// PartitionInfo is where a partition is served.
type PartitionInfo struct {
	Leader        int32
	LeaderEpoch   int32
	Replicas, ISR []int32
}

// LogPart is a run of a partition's offsets held by one node: a cluster
// whose partitions moved at rolls splits their logs across nodes.
type LogPart struct {
	Start int64
	Node  int32
}
