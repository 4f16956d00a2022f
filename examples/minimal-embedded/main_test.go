package main

import (
	"os"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

// TestREADMEShowsThisProgram: the README shows this program as it is, so what a
// newcomer copies from it is what this test compiles.
func TestREADMEShowsThisProgram(t *testing.T) {
	src, err := os.ReadFile("main.go")
	require.NoError(t, err)
	readme, err := os.ReadFile("../../README.md")
	require.NoError(t, err)
	assert.Contains(t, string(readme), "```go\n"+string(src)+"```\n",
		"README.md shows examples/minimal-embedded/main.go as it is: copy the file into its go block")
}
