package objstore

import (
	"testing"

	"go.uber.org/goleak"
)

// The retry and handle wrappers' goroutines end with what started them.
func TestMain(m *testing.M) { goleak.VerifyTestMain(m) }
