package main

import (
	"testing"

	"go.uber.org/goleak"

	"github.com/anarchon/anarchon/internal/maintest"
)

// The command closes its connection; the tests stop their replicas and servers.
func TestMain(m *testing.M) {
	maintest.Main(main) // a child of maintest.Run: the program itself
	goleak.VerifyTestMain(m)
}
