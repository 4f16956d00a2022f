package fleet_test

import (
	"testing"

	"go.uber.org/goleak"
)

// Every test stops what it started: services, schedulers, connections and servers.
func TestMain(m *testing.M) {
	goleak.VerifyTestMain(m)
}
