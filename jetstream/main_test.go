package jetstream

import (
	"testing"

	"go.uber.org/goleak"
)

// TestMain fails the package when a test leaves goroutines behind: the backend owns
// none, and every server and connection a test starts is stopped by its cleanup.
func TestMain(m *testing.M) {
	goleak.VerifyTestMain(m)
}
