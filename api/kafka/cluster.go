package kafka

import (
	"github.com/twmb/franz-go/pkg/kerr"

	"strata/metadata"
)

// The front end's names for the metadata's types (package metadata): who
// serves what comes from a metadata.Cluster, one node's or a cluster's.
type (
	Broker        = metadata.Broker
	PartitionInfo = metadata.PartitionInfo
	LogPart       = metadata.LogPart
)

// SplitLog is implemented by a cluster whose partitions' logs can be split
// across nodes: when a partition moved at a roll, its sealed segments
// stayed on the node that wrote them. The leader reads those offsets from
// that node (Peers), so clients fetch every offset from the leader.
type SplitLog interface {
	// Parts lists the parts of a partition's log in offset order: from
	// each Start up to the next one's, the offsets are on Node. None: the
	// whole log is the leader's.
	Parts(topic string, partition int32) []LogPart
}

// leads says whether this node serves a partition, or the error a client
// re-routes on: NOT_LEADER_OR_FOLLOWER when another node leads it,
// LEADER_NOT_AVAILABLE when none does now (both retriable).
func (s *Server) leads(topic string, partition int32) int16 {
	info, ok := s.cluster.Partition(topic, partition)
	switch {
	case !ok:
		return kerr.UnknownTopicOrPartition.Code
	case info.Leader == s.cluster.Self():
		return errNone
	case info.Leader < 0:
		return kerr.LeaderNotAvailable.Code
	default:
		return kerr.NotLeaderForPartition.Code
	}
}

// leader is the broker that leads a partition, for KIP-951's hint in a
// NOT_LEADER_OR_FOLLOWER answer (so a client re-routes without a Metadata
// round trip); ok is false when none does.
func (s *Server) leader(topic string, partition int32) (info PartitionInfo, b Broker, ok bool) {
	info, found := s.cluster.Partition(topic, partition)
	if !found || info.Leader < 0 {
		return info, Broker{}, false
	}
	for _, b := range s.cluster.Brokers() {
		if b.NodeID == info.Leader {
			return info, b, true
		}
	}
	return info, Broker{}, false
}

// epoch is a partition's current leader epoch: the cluster's, or 0, the
// one epoch a single node has had.
func (s *Server) epoch(topic string, partition int32) int32 {
	if info, ok := s.cluster.Partition(topic, partition); ok && info.LeaderEpoch >= 0 {
		return info.LeaderEpoch
	}
	return 0
}
