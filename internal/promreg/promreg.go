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
