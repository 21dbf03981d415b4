package peer

import (
	"testing"

	"go.uber.org/goleak"
)

// A Client's franz-go clients end with Close: none outlives a test.
func TestMain(m *testing.M) { goleak.VerifyTestMain(m) }
