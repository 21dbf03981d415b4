package replica

import (
	"errors"

	"github.com/prometheus/client_golang/prometheus"
)

type metrics struct {
	partitions      *prometheus.GaugeVec
	underReplicated prometheus.Gauge
	underMinISR     prometheus.Gauge
	isrChanges      *prometheus.CounterVec
	acks            *prometheus.CounterVec
	truncated       prometheus.Counter
	copied          prometheus.Counter
	seals           *prometheus.CounterVec
	sealSeconds     prometheus.Histogram
}

func newMetrics(reg prometheus.Registerer) *metrics {
	return &metrics{
		partitions: register(reg, prometheus.NewGaugeVec(prometheus.GaugeOpts{Name: "strata_replica_partitions",
			Help: "Replicated partitions on this node, by role: leader or follower."}, []string{"role"})),
		underReplicated: register(reg, prometheus.NewGauge(prometheus.GaugeOpts{Name: "strata_replica_under_replicated_partitions",
			Help: "Partitions this node leads whose ISR is smaller than their replica set (Kafka's UnderReplicatedPartitions)."})),
		underMinISR: register(reg, prometheus.NewGauge(prometheus.GaugeOpts{Name: "strata_replica_under_min_isr_partitions",
			Help: "Partitions this node leads whose ISR is below min.insync.replicas: acks=all produces are refused."})),
		isrChanges: register(reg, prometheus.NewCounterVec(prometheus.CounterOpts{Name: "strata_replica_isr_changes_total",
			Help: "ISR changes this node proposed as a leader, by result: committed, or refused (etcd's compare-and-swap failed)."},
			[]string{"result"})),
		acks: register(reg, prometheus.NewCounterVec(prometheus.CounterOpts{Name: "strata_replica_acks_total",
			Help: "acks=all produces to replicated partitions, by how they ended (OK, NOT_ENOUGH_REPLICAS, NOT_ENOUGH_REPLICAS_AFTER_APPEND, REQUEST_TIMED_OUT, NOT_LEADER_OR_FOLLOWER)."},
			[]string{"result"})),
		truncated: register(reg, prometheus.NewCounter(prometheus.CounterOpts{Name: "strata_replica_truncated_records_total",
			Help: "Records this node cut from its logs as a follower, where they parted from a new leader's."})),
		copied: register(reg, prometheus.NewCounter(prometheus.CounterOpts{Name: "strata_replica_copied_records_total",
			Help: "Records this node copied from leaders as a follower."})),
		seals: register(reg, prometheus.NewCounterVec(prometheus.CounterOpts{Name: "strata_replica_seals_total",
			Help: "Segments this node sealed for the cluster as a leader, by result: agreed (every ISR member's copy equal), or differ (some left out of its replicas)."},
			[]string{"result"})),
		sealSeconds: register(reg, prometheus.NewHistogram(prometheus.HistogramOpts{Name: "strata_replica_seal_seconds",
			Help:    "Time from the leader's roll to the segment's seal recorded in etcd with the ISR's agreement.",
			Buckets: prometheus.ExponentialBuckets(0.005, 2, 14)})),
	}
}

func register[C prometheus.Collector](reg prometheus.Registerer, c C) C {
	if reg == nil {
		return c
	}
	if err := reg.Register(c); err != nil {
		var dup prometheus.AlreadyRegisteredError
		if errors.As(err, &dup) {
			if existing, ok := dup.ExistingCollector.(C); ok {
				return existing
			}
		}
		panic(err)
	}
	return c
}
