package main

import (
	"testing"
	"time"

	"github.com/stretchr/testify/assert"

	"github.com/anarchon/anarchon/internal/maintest"
)

func TestMain(m *testing.M) {
	maintest.Main(main) // a child of maintest.Run: the program itself
	m.Run()
}

// TestHelpExitsZero runs the program as a person does, with -h and --help: the
// usage is printed and the exit code is 0.
func TestHelpExitsZero(t *testing.T) {
	for _, arg := range []string{"-h", "--help"} {
		code, stdout, stderr := maintest.Run(t, 30*time.Second, arg)
		assert.Equal(t, 0, code, "%s: stdout %q, stderr %q", arg, stdout, stderr)
		assert.Contains(t, stdout+stderr, "Usage of sqlite:", arg)
		assert.NotContains(t, stdout+stderr, "sqlite: ", "%s: no error line", arg)
	}
}
