package tiering

import (
	"testing"

	"go.uber.org/goleak"
)

// The job's uploads and the pipes' readers end with what started them.
func TestMain(m *testing.M) { goleak.VerifyTestMain(m) }
