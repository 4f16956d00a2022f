package machine_test

import (
	"os"
	"strings"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

// The package documentation shows the example store's Claim as it is compiled.
func TestDocShowsExampleClaim(t *testing.T) {
	src, err := os.ReadFile("example_test.go")
	require.NoError(t, err)
	start := strings.Index(string(src), "func (s *store) Claim(")
	require.GreaterOrEqual(t, start, 0, "example_test.go has the store's Claim")
	end := strings.Index(string(src)[start:], "\n}\n")
	require.Greater(t, end, 0)
	code := string(src)[start : start+end+2]

	doc, err := os.ReadFile("doc.go")
	require.NoError(t, err)
	var shown []string
	for line := range strings.SplitSeq(string(doc), "\n") {
		if rest, ok := strings.CutPrefix(line, "//\t"); ok {
			shown = append(shown, rest)
		}
	}
	assert.Contains(t, strings.Join(shown, "\n"), code,
		"doc.go shows the store's Claim as example_test.go has it")
}
