package memory_test

import (
	"os"
	"strings"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

// docs/backends.md ("A run store on the machine") quotes runs.go: each quoted
// block is a run of lines of runs.go, as it is compiled, indentation aside.
func TestBackendsPageQuotesRuns(t *testing.T) {
	src, err := os.ReadFile("runs.go")
	require.NoError(t, err)
	code := unindented(string(src))
	page, err := os.ReadFile("../../docs/backends.md")
	require.NoError(t, err)
	_, section, ok := strings.Cut(string(page), "### A run store on the machine\n")
	require.True(t, ok, "docs/backends.md has the section")
	section, _, _ = strings.Cut(section, "\n### ")
	blocks := 0
	for _, part := range strings.Split(section, "```go\n")[1:] {
		block, _, ok := strings.Cut(part, "```")
		require.True(t, ok, "a closed go block")
		quote := unindented(block)
		assert.True(t, strings.Contains(code, quote), "runs.go holds the quote:\n%s", quote)
		blocks++
	}
	assert.Equal(t, 2, blocks, "the section's quotes")
}

// unindented is s's lines without their leading blanks, empty lines dropped.
func unindented(s string) string {
	var lines []string
	for line := range strings.SplitSeq(s, "\n") {
		if line = strings.TrimLeft(line, " \t"); line != "" {
			lines = append(lines, line)
		}
	}
	return strings.Join(lines, "\n")
}
