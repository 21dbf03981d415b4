package cluster

import "github.com/prometheus/client_golang/prometheus"

type metrics struct {
	live         prometheus.Gauge
	controller   prometheus.Gauge
	sessionsLost prometheus.Counter
	elections    prometheus.Counter
	writes       prometheus.Counter
	refused      *prometheus.CounterVec
}

// newMetrics makes the cluster's metrics and registers them with reg,
// unless it is nil.
func newMetrics(reg prometheus.Registerer) *metrics {
	m := &metrics{
		live: prometheus.NewGauge(prometheus.GaugeOpts{Name: "strata_cluster_live",
			Help: "1 while this node is registered under a live lease, 0 while it has lost it."}),
		controller: prometheus.NewGauge(prometheus.GaugeOpts{Name: "strata_cluster_controller",
			Help: "1 while this node is the elected controller."}),
		sessionsLost: prometheus.NewCounter(prometheus.CounterOpts{Name: "strata_cluster_sessions_lost_total",
			Help: "Times this node lost its lease (etcd unreachable past the session TTL, or revoked)."}),
		elections: prometheus.NewCounter(prometheus.CounterOpts{Name: "strata_cluster_elections_won_total",
			Help: "Times this node was elected controller."}),
		writes: prometheus.NewCounter(prometheus.CounterOpts{Name: "strata_cluster_placement_writes_total",
			Help: "Partition records this node wrote as controller."}),
		refused: prometheus.NewCounterVec(prometheus.CounterOpts{Name: "strata_cluster_placement_refused_total",
			Help: "Placement transactions etcd refused, by reason: deposed (the term is over) or conflict (planned from an old view)."},
			[]string{"reason"}),
	}
	if reg != nil {
		reg.MustRegister(m.live, m.controller, m.sessionsLost, m.elections, m.writes, m.refused)
	}
	return m
}
