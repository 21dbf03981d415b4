package kafka

import (
	"testing"

	"go.uber.org/goleak"
)

// The server's connection, long-poll and group goroutines end with Close,
// and its tests' franz-go clients with theirs: none outlives a test.
func TestMain(m *testing.M) { goleak.VerifyTestMain(m) }
