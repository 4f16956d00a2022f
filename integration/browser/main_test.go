package browser

import (
	"testing"

	"go.uber.org/goleak"
)

// Every test stops what it started: the browser, servers, schedulers, services.
func TestMain(m *testing.M) {
	goleak.VerifyTestMain(m)
}
