package offsets

import (
	"testing"

	"go.uber.org/goleak"
)

// The etcd store's client goroutines end with Close: none outlives a test.
func TestMain(m *testing.M) { goleak.VerifyTestMain(m) }
