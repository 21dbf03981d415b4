package memory

import (
	"testing"

	"go.uber.org/goleak"
)

// The store contract's concurrent writers end with the test.
func TestMain(m *testing.M) { goleak.VerifyTestMain(m) }
