package replica

import (
	"testing"

	"go.uber.org/goleak"
)

// A node's goroutines end with Run (Node.goBackground): none outlives a
// test.
func TestMain(m *testing.M) { goleak.VerifyTestMain(m) }
