package metrics

import (
	"runtime/debug"
	"testing"

	"github.com/stretchr/testify/assert"
)

// The module's version as a program that requires it, replaces it or is it
// sees it.
func TestModuleVersion(t *testing.T) {
	dep := func(d debug.Module) *debug.BuildInfo {
		return &debug.BuildInfo{Main: debug.Module{Path: "example.com/svc", Version: "v9.9.9"}, Deps: []*debug.Module{
			{Path: "github.com/nats-io/nats.go", Version: "v1.55.0"}, &d}}
	}
	for _, tc := range []struct {
		name string
		bi   *debug.BuildInfo
		want string
	}{
		{"required", dep(debug.Module{Path: modulePath, Version: "v1.2.0"}), "v1.2.0"},
		{"pseudo-version", dep(debug.Module{Path: modulePath, Version: "v0.0.0-20260101000000-abcdef123456"}), "v0.0.0-20260101000000-abcdef123456"},
		{"replaced by a clone", dep(debug.Module{Path: modulePath, Version: "v0.0.0-00010101000000-000000000000", Replace: &debug.Module{Path: "../anarchon"}}), "(devel)"},
		{"replaced by a fork", dep(debug.Module{Path: modulePath, Version: "v1.2.0", Replace: &debug.Module{Path: "example.com/fork", Version: "v1.2.1"}}), "v1.2.1"},
		{"the module itself", &debug.BuildInfo{Main: debug.Module{Path: modulePath, Version: "(devel)"}}, "(devel)"},
		{"not listed", &debug.BuildInfo{Main: debug.Module{Path: "example.com/svc"}}, "unknown"},
	} {
		assert.Equal(t, tc.want, moduleVersion(tc.bi), tc.name)
	}
}
