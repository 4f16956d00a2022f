package main

import (
	"os"
	"testing"

	"go.uber.org/goleak"

	"github.com/anarchon/anarchon/internal/maintest"
)

// The command closes its connection; the tests stop their replicas and servers.
// No test reads the NATS settings or contexts of whoever runs the tests: the
// variables are cleared and the configuration directory is empty, unless a test
// sets its own.
func TestMain(m *testing.M) {
	maintest.Main(main) // a child of maintest.Run: the program itself
	for _, e := range envOf {
		os.Unsetenv(e.env)
	}
	dir, err := os.MkdirTemp("", "anarchon-test-config-")
	if err != nil {
		panic(err)
	}
	os.Setenv("XDG_CONFIG_HOME", dir)
	code := func() int {
		defer os.RemoveAll(dir)
		return m.Run()
	}()
	if code == 0 {
		if err := goleak.Find(); err != nil {
			os.Stderr.WriteString("goleak: " + err.Error() + "\n")
			code = 1
		}
	}
	os.Exit(code)
}
