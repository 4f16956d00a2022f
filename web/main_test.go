package web_test

import (
	"testing"

	"go.uber.org/goleak"
)

// Every test stops what it started: servers, schedulers, services, connections.
func TestMain(m *testing.M) {
	goleak.VerifyTestMain(m)
}
