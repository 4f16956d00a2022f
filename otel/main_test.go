package otel_test

import (
	"testing"

	"go.uber.org/goleak"
)

// Every test stops what it started: no goroutine is left behind.
func TestMain(m *testing.M) {
	goleak.VerifyTestMain(m)
}
