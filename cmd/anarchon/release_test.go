package main

import (
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strings"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	"gopkg.in/yaml.v3"
)

// TestReleaseConfig holds the release configuration (.goreleaser.yaml) and the
// check CI runs (.ci/release) to the same command, targets and flags: CI builds
// what a release would, without building goreleaser.
func TestReleaseConfig(t *testing.T) {
	root := filepath.Join("..", "..")
	data, err := os.ReadFile(filepath.Join(root, ".goreleaser.yaml"))
	require.NoError(t, err)
	var cfg struct {
		Version int `yaml:"version"`
		Builds  []struct {
			Dir     string   `yaml:"dir"`
			Binary  string   `yaml:"binary"`
			Env     []string `yaml:"env"`
			Goos    []string `yaml:"goos"`
			Goarch  []string `yaml:"goarch"`
			Flags   []string `yaml:"flags"`
			Ldflags []string `yaml:"ldflags"`
		} `yaml:"builds"`
		Archives []struct {
			NameTemplate string   `yaml:"name_template"`
			Files        []string `yaml:"files"`
		} `yaml:"archives"`
		Release struct {
			Disable bool `yaml:"disable"`
		} `yaml:"release"`
	}
	require.NoError(t, yaml.Unmarshal(data, &cfg))
	assert.Equal(t, 2, cfg.Version)
	require.Len(t, cfg.Builds, 1)
	b := cfg.Builds[0]
	assert.Equal(t, "cmd/anarchon", b.Dir)
	assert.Equal(t, "anarchon", b.Binary)
	assert.Equal(t, []string{"linux", "darwin"}, b.Goos)
	assert.Equal(t, []string{"amd64", "arm64"}, b.Goarch)
	assert.Contains(t, b.Env, "CGO_ENABLED=0")
	assert.Equal(t, []string{"-trimpath"}, b.Flags)
	require.Len(t, b.Ldflags, 1)
	assert.Equal(t, "-s -w -X main.version={{ .Version }}", b.Ldflags[0], "the version the command prints")
	assert.True(t, cfg.Release.Disable, "nothing publishes from here")
	require.Len(t, cfg.Archives, 1)

	script, err := os.ReadFile(filepath.Join(root, ".ci", "release"))
	require.NoError(t, err)
	s := string(script)
	assert.Contains(t, s, "for goos in "+strings.Join(b.Goos, " ")+"; do")
	assert.Contains(t, s, "for goarch in "+strings.Join(b.Goarch, " ")+"; do")
	assert.Contains(t, s, "CGO_ENABLED=0 ")
	assert.Contains(t, s, "go build -C "+b.Dir+" "+strings.Join(b.Flags, " "))
	assert.Contains(t, s, `-ldflags "`+strings.ReplaceAll(b.Ldflags[0], "{{ .Version }}", "$version")+`"`)
	assert.Contains(t, s, strings.ReplaceAll(strings.ReplaceAll(cfg.Archives[0].NameTemplate, "{{ .Version }}", "${version}"),
		"{{ .Os }}_{{ .Arch }}", "${goos}_${goarch}"))
	assert.Contains(t, s, "cp "+strings.Join(cfg.Archives[0].Files, " ")+" ")

	run, err := os.ReadFile(filepath.Join(root, ".ci", "run"))
	require.NoError(t, err)
	assert.True(t, slices.ContainsFunc(strings.Split(string(run), "\n"), func(l string) bool {
		return !strings.HasPrefix(strings.TrimSpace(l), "#") && strings.Contains(l, ".ci/release") && !strings.HasPrefix(strings.TrimSpace(l), "echo")
	}), "CI runs the check")
}

// TestTheLinkerDropsUnusedMethods: nothing in the command executes a
// text/template (cobra's help and usage templates are replaced by functions),
// which would keep every exported method of the program in the binary: 15.7 MB
// instead of 11.2 MB.
func TestTheLinkerDropsUnusedMethods(t *testing.T) {
	bin := filepath.Join(t.TempDir(), "anarchon")
	out, err := exec.Command("go", "build", "-o", bin, ".").CombinedOutput()
	require.NoError(t, err, "%s", out)
	syms, err := exec.Command("go", "tool", "nm", bin).CombinedOutput()
	require.NoError(t, err, "%s", syms)
	assert.NotContains(t, string(syms), "text/template.(*state).evalCall", "a template is executed somewhere")
}
