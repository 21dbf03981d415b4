package main

import (
	"fmt"
	"net/http"
	"os"
	"testing"

	"go.uber.org/goleak"
)

// A served node (startServe runs `run` in the test process) leaves nothing
// running once its context ends: the listeners, the engine's workers, the
// tiering schedule, the cluster member and the peers' clients all end with
// run. Tests that start `strata serve` processes check only their own
// clients here. The tests' HTTP clients (admin calls, metrics scrapes) keep
// idle keep-alive connections to services already stopped: those are the
// clients', not a leak of strata's, so the default client's are closed and
// any other's connection loops are not counted.
func TestMain(m *testing.M) {
	code := m.Run()
	http.DefaultClient.CloseIdleConnections()
	if code == 0 {
		if err := goleak.Find(goleak.IgnoreTopFunction("net/http.(*persistConn).readLoop"),
			goleak.IgnoreTopFunction("net/http.(*persistConn).writeLoop")); err != nil {
			fmt.Fprintf(os.Stderr, "goleak: Errors on successful test run: %v\n", err)
			code = 1
		}
	}
	os.Exit(code)
}
