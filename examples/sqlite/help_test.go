package main

import (
	"testing"

	"github.com/anarchon/anarchon/internal/maintest"
)

func TestMain(m *testing.M) {
	maintest.Main(main) // a child of maintest.Run: the program itself
	m.Run()
}

// TestHelpExitsZero runs the program as a person does, with -h and --help: the
// usage is printed and the exit code is 0.
func TestHelpExitsZero(t *testing.T) {
	maintest.CheckHelp(t, "Usage of sqlite:", "sqlite: ")
}
