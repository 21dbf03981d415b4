package pebblestore

import (
	"testing"

	"go.uber.org/goleak"
)

// Pebble's goroutines end with Close, the store contract's writers with
// the test.
func TestMain(m *testing.M) { goleak.VerifyTestMain(m) }
