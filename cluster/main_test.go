package cluster

import (
	"testing"

	"go.uber.org/goleak"
)

// A Member's sessions, watches, election and loops end with Close: none
// outlives a test.
func TestMain(m *testing.M) { goleak.VerifyTestMain(m) }
