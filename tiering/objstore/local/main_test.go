package local

import (
	"testing"

	"go.uber.org/goleak"
)

// The contract suite's concurrent uploads and readers end with the test.
func TestMain(m *testing.M) { goleak.VerifyTestMain(m) }
