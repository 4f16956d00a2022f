package main

import (
	"testing"

	"go.uber.org/goleak"
)

// The command closes its connection; the tests stop their replicas and servers.
func TestMain(m *testing.M) {
	goleak.VerifyTestMain(m)
}
