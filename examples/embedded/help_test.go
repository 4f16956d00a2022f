package main

import (
	"testing"

	"github.com/anarchon/anarchon/internal/maintest"
)

// TestHelpExitsZero runs the program as a person does, with -h and --help: the
// usage is printed and the exit code is 0.
func TestHelpExitsZero(t *testing.T) {
	maintest.CheckHelp(t, "Usage of embedded:", "embedded: ")
}
