// Package cluster is how several strata nodes agree, through etcd, on who
// is alive, who places partitions (the controller) and which node leads
// each partition. A Member registers its node under a lease, campaigns for
// controller, and keeps a local view of nodes, topics and partitions from a
// watch; the elected controller turns that view into placement writes with
// Place (placement.go), each fenced by its term. docs/cluster.md tells the
// whole story.
package cluster

import (
	"errors"
	"fmt"
	"log/slog"
	"regexp"
	"strconv"
	"strings"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	clientv3 "go.etcd.io/etcd/client/v3"
)

// Node is a live node as clients reach it.
type Node struct {
	ID        int32  `json:"id"`
	KafkaAddr string `json:"kafka_addr"`
	AdminAddr string `json:"admin_addr,omitempty"`
}

// Topic is a topic as CreateTopic recorded it.
type Topic struct {
	Name              string    `json:"name"`
	Partitions        int32     `json:"partitions"`
	ReplicationFactor int16     `json:"replication_factor"`
	Created           time.Time `json:"created"`
	// Incarnation tells a topic from an earlier one of the same name: its
	// key's creation revision in etcd (not stored in the value).
	Incarnation int64 `json:"-"`
}

// Partition is where a partition is served. Leader is -1 while it is
// leaderless; Epoch grows by one at every leader change; Replicas lists the
// nodes of its active segment, the leader first; ISR those of them in sync.
type Partition struct {
	Topic     string  `json:"topic"`
	Partition int32   `json:"partition"`
	Leader    int32   `json:"leader"`
	Epoch     int32   `json:"epoch"`
	Replicas  []int32 `json:"replicas"`
	ISR       []int32 `json:"isr"`
}

func (p Partition) clone() Partition {
	p.Replicas = append([]int32(nil), p.Replicas...)
	p.ISR = append([]int32(nil), p.ISR...)
	return p
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
	// Logger gets membership and controller changes; nil: slog.Default().
	Logger *slog.Logger
	// Registerer gets the cluster's metrics; nil: none.
	Registerer prometheus.Registerer
}

var (
	// ErrNodeIDTaken: another live node is registered with this id.
	ErrNodeIDTaken = errors.New("cluster: node id taken by a live node")
	// ErrTopicExists: CreateTopic of a topic that exists.
	ErrTopicExists = errors.New("cluster: topic exists")
	// ErrUnknownTopic: DeleteTopic of a topic that does not exist.
	ErrUnknownTopic = errors.New("cluster: unknown topic")
	// ErrInvalidTopic: a name Kafka would not accept.
	ErrInvalidTopic = errors.New("cluster: invalid topic name")
	// ErrInvalidPartitions: a partition count below 1.
	ErrInvalidPartitions = errors.New("cluster: invalid partition count")
	// ErrInvalidReplicationFactor: below 1, or above the live nodes.
	ErrInvalidReplicationFactor = errors.New("cluster: invalid replication factor")
	// ErrDeposed: a placement write from a controller whose term is over.
	ErrDeposed = errors.New("cluster: controller deposed: its term is over")
	// errConflict: a placement write whose partition, or topic, changed
	// since the view it was planned from; the controller plans again.
	errConflict = errors.New("cluster: placement write conflicts with a newer record")
)

// keys builds the cluster's etcd keys under one prefix.
type keys struct{ prefix string }

func (k keys) nodes() string                   { return k.prefix + "/nodes/" }
func (k keys) node(id int32) string            { return k.nodes() + strconv.Itoa(int(id)) }
func (k keys) controller() string              { return k.prefix + "/controller" } // concurrency.Election adds "/"
func (k keys) topics() string                  { return k.prefix + "/topics/" }
func (k keys) topic(name string) string        { return k.topics() + name }
func (k keys) partitions() string              { return k.prefix + "/partitions/" }
func (k keys) topicPartitions(t string) string { return k.partitions() + t + "/" }

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
