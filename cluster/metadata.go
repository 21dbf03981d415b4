package cluster

import (
	"context"
	"hash/fnv"
	"strconv"

	"strata/metadata"
)

// A Member answers both front ends' metadata (metadata.Cluster) from its
// view of etcd: the live brokers, the topics, each partition's leader and
// epoch, each group's coordinator; topic changes are etcd transactions,
// which the controller then places.
var _ metadata.Cluster = (*Member)(nil)

// Self is this node's id.
func (m *Member) Self() int32 { return m.cfg.Self.ID }

// Brokers are the live nodes as Kafka clients reach them.
func (m *Member) Brokers() []metadata.Broker {
	var out []metadata.Broker
	for _, n := range m.Nodes() {
		if b, ok := metadata.BrokerAt(n.ID, n.KafkaAddr); ok {
			out = append(out, b)
		}
	}
	return out
}

// Topics are the topics' partition counts.
func (m *Member) Topics(context.Context) (map[string]int32, error) {
	m.mu.Lock()
	defer m.mu.Unlock()
	out := make(map[string]int32, len(m.view.topics))
	for name, t := range m.view.topics {
		out[name] = t.Partitions
	}
	return out, nil
}

// Partition is the controller's placement, except that this node, when its
// lease is lost, leads nothing until it registers again: another may lead
// by then.
func (m *Member) Partition(topic string, p int32) (metadata.PartitionInfo, bool) {
	part, ok := m.Placement(topic, p)
	if !ok {
		return metadata.PartitionInfo{}, false
	}
	info := metadata.PartitionInfo{Leader: part.Leader, LeaderEpoch: part.Epoch, Replicas: part.Replicas, ISR: part.ISR}
	if info.Leader == m.Self() && !m.Leads(topic, p) {
		info.Leader = -1
	}
	return info, true
}

// TopicConfigs are the configs in the topic's etcd record, as the view has
// them.
func (m *Member) TopicConfigs(topic string) map[string]string {
	t, _ := m.Topic(topic)
	return t.Configs
}

// Coordinator picks a group's node by rendezvous hashing over the live
// nodes: when a node joins or leaves, only the groups it wins or held move,
// not most of them as with a hash modulo the node count.
func (m *Member) Coordinator(group string) metadata.Broker {
	best, bestScore := metadata.Broker{NodeID: -1}, uint64(0)
	for _, n := range m.Nodes() {
		b, ok := metadata.BrokerAt(n.ID, n.KafkaAddr)
		if !ok {
			continue
		}
		h := fnv.New64a()
		h.Write([]byte(group))
		h.Write([]byte{0})
		h.Write([]byte(strconv.Itoa(int(n.ID))))
		if score := h.Sum64(); best.NodeID < 0 || score > bestScore {
			best, bestScore = b, score
		}
	}
	return best
}

// Parts are the spans of a partition whose leadership moved at rolls: the
// front end reads each from the node that holds it (none: the whole log is
// the leader's).
func (m *Member) Parts(topic string, p int32) []metadata.LogPart {
	part, ok := m.Placement(topic, p)
	if !ok || len(part.Spans) < 2 {
		return nil
	}
	out := make([]metadata.LogPart, len(part.Spans))
	for i, s := range part.Spans {
		out[i] = metadata.LogPart{Start: s.Start, Node: s.Node}
	}
	return out
}
