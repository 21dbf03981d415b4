package partition

import (
	"testing"

	"go.uber.org/goleak"
)

// An append's acks wait and the long polls' wake-ups end with their
// contexts: none outlives a test.
func TestMain(m *testing.M) { goleak.VerifyTestMain(m) }
