// Package cluster is how several strata nodes agree, through etcd, on who
// is alive, who places partitions (the controller) and which node leads
// each partition. A Member registers its node under a lease, campaigns for
// controller, and keeps a local view of nodes, topics and partitions from a
// watch; the elected controller turns that view into placement writes with
// Place (placement.go), each fenced by its term. docs/cluster.md tells the
// whole story.
package cluster

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"maps"
	"regexp"
	"slices"
	"strconv"
	"strings"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"go.etcd.io/etcd/api/v3/v3rpc/rpctypes"
	clientv3 "go.etcd.io/etcd/client/v3"

	"strata/catalog"
	"strata/partition"
	"strata/topicconfig"
)

// Node is a live node as clients reach it.
type Node struct {
	ID        int32  `json:"id"`
	KafkaAddr string `json:"kafka_addr"`
	AdminAddr string `json:"admin_addr,omitempty"`
	// Dir is the identity of the node's data folder, made when the folder
	// was (Kafka's directory id): a node back with another Dir lost the log
	// its ISR memberships were earned with (Partition.Dirs).
	Dir string `json:"dir,omitempty"`
	// Damaged are the partitions whose local copy the node found damaged
	// (at start, or by a scrub) and has not refilled yet: it is out of
	// sync for them as a node back on a new folder is for all.
	Damaged []TopicPartition `json:"damaged,omitempty"`
}

// Topic is a topic as CreateTopic recorded it.
type Topic struct {
	Name              string    `json:"name"`
	Partitions        int32     `json:"partitions"`
	ReplicationFactor int16     `json:"replication_factor"`
	Created           time.Time `json:"created"`
	// Configs are the topic's own configs (strata/topicconfig), changed
	// only by AlterTopicConfigs' compare-and-swap.
	Configs map[string]string `json:"configs,omitempty"`
	// Incarnation tells a topic from an earlier one of the same name: its
	// key's creation revision in etcd (not stored in the value).
	Incarnation int64 `json:"-"`
}

// Partition is where a partition is served. Leader is -1 while it is
// leaderless; Epoch grows by one at every leader change; Replicas lists the
// nodes of its active segment, the leader first; ISR those of them in sync.
//
// A partition's log can be split across nodes: when its leadership moves
// at a roll, the sealed segments stay on the node that wrote them and the
// new leader's log begins where the old one ended. Spans says which node
// holds which part; Next is the node the controller chose for the next
// active segment (0: the leader keeps it).
type Partition struct {
	Topic     string  `json:"topic"`
	Partition int32   `json:"partition"`
	Leader    int32   `json:"leader"`
	Epoch     int32   `json:"epoch"`
	Replicas  []int32 `json:"replicas"`
	ISR       []int32 `json:"isr"`
	Spans     []Span  `json:"spans,omitempty"`
	Next      int32   `json:"next,omitempty"`
	// Dirs are the data folders (Node.Dir) the ISR's members were in sync
	// with, by node. A live member registered with another folder lost its
	// log: it counts as out of sync, may not lead, and is taken out of the
	// ISR (placement.go). A member without an entry (a record written
	// before folders had an identity) is taken at its word.
	Dirs map[int32]string `json:"dirs,omitempty"`
}

// A Span is a part of a partition's log: the offsets from Start up to the
// next span's Start (the last span: the log end) are on Node.
type Span struct {
	Start int64 `json:"start"`
	Node  int32 `json:"node"`
}

func (p Partition) clone() Partition {
	p.Replicas = append([]int32(nil), p.Replicas...)
	p.ISR = append([]int32(nil), p.ISR...)
	p.Spans = append([]Span(nil), p.Spans...)
	if p.Dirs != nil {
		p.Dirs = maps.Clone(p.Dirs)
	}
	return p
}

// Holder is the node that holds offset, and where its part of the log ends
// (-1 for the last part, which grows). Without spans (several replicas,
// each holding the whole log) it is the leader, or while there is none
// the first in-sync replica.
func (p Partition) Holder(offset int64) (node int32, end int64) {
	if len(p.Spans) == 0 {
		if p.Leader < 0 && len(p.ISR) > 0 {
			return p.ISR[0], -1
		}
		return p.Leader, -1
	}
	i := len(p.Spans) - 1
	for i > 0 && p.Spans[i].Start > offset {
		i--
	}
	end = -1
	if i+1 < len(p.Spans) {
		end = p.Spans[i+1].Start
	}
	return p.Spans[i].Node, end
}

// LogStart is where this node's part of the log begins when it leads p:
// the last span's start.
func (p Partition) LogStart() int64 {
	if len(p.Spans) == 0 {
		return 0
	}
	return p.Spans[len(p.Spans)-1].Start
}

// held says whether node holds any part of p's log.
func (p Partition) held(node int32) bool {
	for _, s := range p.Spans {
		if s.Node == node {
			return true
		}
	}
	return len(p.Spans) == 0 && slices.Contains(p.ISR, node)
}

// Config is what Join needs.
type Config struct {
	// Client is the etcd client; the caller opens and closes it.
	Client *clientv3.Client
	// Prefix roots every key (docs/cluster.md), so clusters can share an etcd.
	Prefix string
	// Self is this node as clients reach it.
	Self Node
	// SessionTTL is the lease's time to live: a node that cannot reach etcd
	// for that long is dead. Default 10s; etcd rounds it up to its minimum.
	SessionTTL time.Duration
	// Gates are this node's partitions' append gates (partition.Gates),
	// shared with its append path: a handoff holds a partition's gate to
	// fence it, so no append is in flight and none follows. nil: its own.
	Gates *partition.Gates
	// Logger gets membership and controller changes; nil: slog.Default().
	Logger *slog.Logger
	// Registerer gets the cluster's metrics; nil: none.
	Registerer prometheus.Registerer
	// ClearTopic removes what a deleted topic left outside etcd (its
	// objects in the shared bucket); the controller calls it, and the name
	// can be used again once it returns nil. Nil: nothing to clear.
	ClearTopic func(ctx context.Context, topic string, partitions int32) error
	// TopicDefaults are the broker's settings topic configs fall back to
	// (topicconfig.Broker); the controller reads
	// unclean.leader.election.enable from them. Nil: Kafka's defaults.
	TopicDefaults topicconfig.Broker
	// ReplicaGrace is how long after a replicated segment's seal its
	// preferred replica has to tier it alone: past it, any replica whose
	// copy agreed may, and a node whose copy did not tiers it from one
	// that did (docs/replication.md). Default 1m.
	ReplicaGrace time.Duration
	// MaxPartitions bounds the partitions of the whole cluster, each
	// counted once whatever its replication factor (kafka.max_partitions):
	// CreateTopic and CreatePartitions check it in the transaction that
	// writes the topic record, so nodes creating at once cannot pass it
	// together. 0: no bound.
	MaxPartitions int
	// EtcdCompactionRetention: the controller compacts etcd's history to
	// the revision of this long ago, so etcd keeps only recent history
	// (docs/cluster.md, "Keeping etcd healthy"). 0: strata does not
	// compact (an operator runs etcd with --auto-compaction-retention).
	EtcdCompactionRetention time.Duration
	// EtcdQuotaBytes is etcd's --quota-backend-bytes, for the metric of
	// its size against it. Default 2 GiB, etcd's default.
	EtcdQuotaBytes int64
	// EtcdCheckInterval is how often etcd's size and alarms are read and
	// its history compacted. Default 30s.
	EtcdCheckInterval time.Duration
}

var (
	// ErrNodeIDTaken: another live node is registered with this id.
	ErrNodeIDTaken = errors.New("cluster: node id taken by a live node")
	// ErrDeposed: a placement write from a controller whose term is over.
	ErrDeposed = errors.New("cluster: controller deposed: its term is over")
	// errConflict: a placement write whose partition, or topic, changed
	// since the view it was planned from; the controller plans again.
	errConflict = errors.New("cluster: placement write conflicts with a newer record")
)

// keys builds the cluster's etcd keys under one prefix.
type keys struct{ prefix string }

func (k keys) nodes() string        { return k.prefix + "/nodes/" }
func (k keys) node(id int32) string { return k.nodes() + strconv.Itoa(int(id)) }
func (k keys) nodeID(key string) (int32, error) {
	id, err := strconv.ParseInt(strings.TrimPrefix(key, k.nodes()), 10, 32)
	return int32(id), err
}
func (k keys) controller() string              { return k.prefix + "/controller" } // concurrency.Election adds "/"
func (k keys) topics() string                  { return k.prefix + "/topics/" }
func (k keys) topic(name string) string        { return k.topics() + name }
func (k keys) partitions() string              { return k.prefix + "/partitions/" }
func (k keys) topicPartitions(t string) string { return k.partitions() + t + "/" }
func (k keys) loads() string                   { return k.prefix + "/loads/" }
func (k keys) deletions() string               { return k.prefix + "/deleting/" }
func (k keys) deletion(topic string) string    { return k.deletions() + topic }
func (k keys) load(id int32) string            { return k.loads() + strconv.Itoa(int(id)) }
func (k keys) candidates() string              { return k.prefix + "/candidates/" }
func (k keys) topicCandidates(t string) string { return k.candidates() + t + "/" }

// partitionCandidates holds the log positions reported for partition p's
// quorum election, one key per node.
func (k keys) partitionCandidates(t string, p int32) string {
	return fmt.Sprintf("%s%010d/", k.topicCandidates(t), p)
}

func (k keys) candidate(t string, p int32, node int32) string {
	return k.partitionCandidates(t, p) + strconv.Itoa(int(node))
}

// partition's number is zero-padded so a topic's partitions list in order.
func (k keys) partition(t string, p int32) string {
	return fmt.Sprintf("%s%010d", k.topicPartitions(t), p)
}

// Kafka's rule for topic names; it also keeps "/" out of the keys.
var topicName = regexp.MustCompile(`^[a-zA-Z0-9._-]{1,249}$`)

func validTopic(name string) bool {
	return topicName.MatchString(name) && name != "." && name != ".."
}

func normalizePrefix(p string) string { return strings.TrimRight(p, "/") }

// full marks etcd's out-of-space refusal as catalog.ErrMetadataFull, for
// the Kafka front end to answer with a clear error.
func full(err error) error {
	if errors.Is(err, rpctypes.ErrNoSpace) {
		return fmt.Errorf("%w: %w", catalog.ErrMetadataFull, err)
	}
	return err
}
