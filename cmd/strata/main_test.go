package main

import (
	"testing"

	"go.uber.org/goleak"
)

// A served node (startServe runs `run` in the test process) leaves nothing
// running once its context ends: the listeners, the engine's workers, the
// tiering schedule, the cluster member and the peers' clients all end with
// run. Tests that start `strata serve` processes check only their own
// clients here.
func TestMain(m *testing.M) { goleak.VerifyTestMain(m) }
