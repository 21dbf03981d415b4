package replica

import (
	"github.com/prometheus/client_golang/prometheus"

	"strata/internal/promreg"
)

type metrics struct {
	partitions      *prometheus.GaugeVec
	underReplicated prometheus.Gauge
	underMinISR     prometheus.Gauge
	isrChanges      *prometheus.CounterVec
	acks            *prometheus.CounterVec
	truncated       prometheus.Counter
	refusedCuts     prometheus.Counter
	refills         prometheus.Counter
	copied          prometheus.Counter
	seals           *prometheus.CounterVec
	sealSeconds     prometheus.Histogram
	unsealed        prometheus.Gauge
	unsealedOldest  prometheus.Gauge
}

func newMetrics(reg prometheus.Registerer) *metrics {
	return &metrics{
		partitions: promreg.GaugeVec(reg, "strata_replica_partitions",
			"Replicated partitions on this node, by role: leader or follower.", "role"),
		underReplicated: promreg.Gauge(reg, "strata_replica_under_replicated_partitions",
			"Partitions this node leads whose ISR is smaller than their replica set (Kafka's UnderReplicatedPartitions)."),
		underMinISR: promreg.Gauge(reg, "strata_replica_under_min_isr_partitions",
			"Partitions this node leads whose ISR is below min.insync.replicas: acks=all produces are refused."),
		isrChanges: promreg.CounterVec(reg, "strata_replica_isr_changes_total",
			"ISR changes this node proposed as a leader, by result: committed, or refused (etcd's compare-and-swap failed).", "result"),
		acks: promreg.CounterVec(reg, "strata_replica_acks_total",
			"acks=all produces to replicated partitions, by how they ended (OK, NOT_ENOUGH_REPLICAS, NOT_ENOUGH_REPLICAS_AFTER_APPEND, REQUEST_TIMED_OUT, NOT_LEADER_OR_FOLLOWER).", "result"),
		truncated: promreg.Counter(reg, "strata_replica_truncated_records_total",
			"Records this node cut from its logs as a follower, where they parted from a new leader's."),
		refills: promreg.Counter(reg, "strata_replica_damaged_refills_total",
			"Times this node, as a follower, found its copy of a partition damaged and started copying the leader's log again."),
		refusedCuts: promreg.Counter(reg, "strata_replica_refused_truncations_total",
			"Times this node, as a follower, refused to cut its log below its high watermark to follow a leader lacking committed records (allowed only by unclean.leader.election.enable)."),
		copied: promreg.Counter(reg, "strata_replica_copied_records_total",
			"Records this node copied from leaders as a follower."),
		seals: promreg.CounterVec(reg, "strata_replica_seals_total",
			"Segments this node sealed for the cluster as a leader, by result: agreed (every ISR member's copy equal), or differ (some left out of its replicas).", "result"),
		sealSeconds: promreg.Register(reg, prometheus.NewHistogram(prometheus.HistogramOpts{Name: "strata_replica_seal_seconds",
			Help:    "Time from the leader's roll to the segment's seal recorded in etcd with the ISR's agreement.",
			Buckets: prometheus.ExponentialBuckets(0.005, 2, 14)})),
		unsealed: promreg.Gauge(reg, "strata_replica_unsealed_segments",
			"Segments sealed on this node's disk that have no seal record for the cluster yet, as this node last read etcd: tiering waits for them."),
		unsealedOldest: promreg.Gauge(reg, "strata_replica_unsealed_oldest_seconds",
			"Age of the oldest of strata_replica_unsealed_segments since this node sealed it (0: none); growing, tiering of its partition is stalled."),
	}
}
