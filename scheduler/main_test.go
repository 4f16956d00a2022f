package scheduler_test

import (
	"testing"

	"go.uber.org/goleak"
)

// Every test stops what it started: no goroutine is left behind after Stop.
func TestMain(m *testing.M) {
	goleak.VerifyTestMain(m)
}
