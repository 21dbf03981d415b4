package cluster

import (
	"github.com/prometheus/client_golang/prometheus"

	"strata/internal/promreg"
)

type metrics struct {
	live         prometheus.Gauge
	controller   prometheus.Gauge
	sessionsLost prometheus.Counter
	elections    prometheus.Counter
	writes       prometheus.Counter
	refused      *prometheus.CounterVec
	handoffs     *prometheus.CounterVec
	isrWrites    *prometheus.CounterVec
	candidates   *prometheus.CounterVec
}

// newMetrics makes the cluster's metrics and registers them with reg,
// unless it is nil. A Member joining again with the same registry (after
// a refused Join, or a Close) takes over the metrics already registered.
func newMetrics(reg prometheus.Registerer) *metrics {
	return &metrics{
		live: promreg.Gauge(reg, "strata_cluster_live",
			"1 while this node is registered under a live lease, 0 while it has lost it."),
		controller: promreg.Gauge(reg, "strata_cluster_controller",
			"1 while this node is the elected controller."),
		sessionsLost: promreg.Counter(reg, "strata_cluster_sessions_lost_total",
			"Times this node lost its lease (etcd unreachable past the session TTL, or revoked)."),
		elections: promreg.Counter(reg, "strata_cluster_elections_won_total",
			"Times this node was elected controller."),
		writes: promreg.Counter(reg, "strata_cluster_placement_writes_total",
			"Partition records this node wrote as controller."),
		refused: promreg.CounterVec(reg, "strata_cluster_placement_refused_total",
			"Placement transactions etcd refused, by reason: deposed (the term is over) or conflict (planned from an old view).", "reason"),
		handoffs: promreg.CounterVec(reg, "strata_cluster_handoffs_total",
			"Partitions this node handed to the node chosen for their next segment at a roll, by result: done, or refused (the record changed first).", "result"),
		isrWrites: promreg.CounterVec(reg, "strata_cluster_isr_writes_total",
			"ISR changes this node wrote as a partition's leader, by result: done, conflict (the record changed since it was read) or not_leader (not the leader at that epoch, or the lease is lost).", "result"),
		candidates: promreg.CounterVec(reg, "strata_cluster_candidate_reports_total",
			"Log positions this node reported for a quorum election, by result: done, or refused (the record changed, or the lease is lost).", "result"),
	}
}
