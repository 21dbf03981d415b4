package kafka

// Cluster says who serves what: the brokers, each partition's leader, its
// epoch and replicas, and each group's coordinator. A single node answers
// for itself (singleNode); a cluster answers from its meta-service.
type Cluster interface {
	// Brokers lists the live brokers.
	Brokers() []Broker
	// Controller is the node that places partitions.
	Controller() int32
	// Partition is a partition's leader, its epoch (-1: none to check) and
	// its replicas and in-sync replicas.
	Partition(topic string, partition int32) PartitionInfo
	// Coordinator is the node that coordinates a group.
	Coordinator(group string) Broker
}

// Broker is one node as clients reach it.
type Broker struct {
	NodeID int32
	Host   string
	Port   int32
}

// PartitionInfo is where a partition is served.
type PartitionInfo struct {
	Leader        int32
	LeaderEpoch   int32
	Replicas, ISR []int32
}

// singleNode is the one node strata runs as without a cluster: it leads
// every partition and coordinates every group, at the address it listens
// on. Its one leader epoch never changes, so Metadata reports none (-1) and
// clients skip epoch checks; OffsetForLeaderEpoch answers for epoch 0.
type singleNode struct{ s *Server }

func (n singleNode) self() Broker {
	n.s.openMu.Lock()
	defer n.s.openMu.Unlock()
	return Broker{NodeID: 0, Host: n.s.host, Port: n.s.port}
}

func (n singleNode) Brokers() []Broker { return []Broker{n.self()} }

func (n singleNode) Controller() int32 { return 0 }

func (n singleNode) Partition(string, int32) PartitionInfo {
	return PartitionInfo{Leader: 0, LeaderEpoch: -1, Replicas: []int32{0}, ISR: []int32{0}}
}

func (n singleNode) Coordinator(string) Broker { return n.self() }
