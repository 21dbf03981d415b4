package metadata

import (
	"testing"

	"go.uber.org/goleak"
)

// Nothing metadata starts outlives a test.
func TestMain(m *testing.M) { goleak.VerifyTestMain(m) }
