// Package promreg registers Prometheus collectors for the packages that
// may be set up more than once with one registry (a cluster member that
// joins again, a replication node restarted in a test).
package promreg

import (
	"errors"

	"github.com/prometheus/client_golang/prometheus"
)

// Register registers c with reg and returns it, or the collector already
// registered under its name (the earlier set-up's, which keeps counting);
// with a nil reg, c unregistered. Any other conflict is a programming error.
func Register[C prometheus.Collector](reg prometheus.Registerer, c C) C {
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

// Counter registers (Register) a counter with its name and help.
func Counter(reg prometheus.Registerer, name, help string) prometheus.Counter {
	return Register(reg, prometheus.NewCounter(prometheus.CounterOpts{Name: name, Help: help}))
}

// CounterVec registers (Register) a counter with its name, help and labels.
func CounterVec(reg prometheus.Registerer, name, help string, labels ...string) *prometheus.CounterVec {
	return Register(reg, prometheus.NewCounterVec(prometheus.CounterOpts{Name: name, Help: help}, labels))
}

// Gauge registers (Register) a gauge with its name and help.
func Gauge(reg prometheus.Registerer, name, help string) prometheus.Gauge {
	return Register(reg, prometheus.NewGauge(prometheus.GaugeOpts{Name: name, Help: help}))
}

// GaugeVec registers (Register) a gauge with its name, help and labels.
func GaugeVec(reg prometheus.Registerer, name, help string, labels ...string) *prometheus.GaugeVec {
	return Register(reg, prometheus.NewGaugeVec(prometheus.GaugeOpts{Name: name, Help: help}, labels))
}
