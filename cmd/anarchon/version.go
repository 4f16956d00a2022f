package main

import (
	"fmt"
	"runtime"
	"runtime/debug"
	"strings"

	"github.com/spf13/cobra"

	"github.com/anarchon/anarchon/fleet"
)

// version is the command's release, set when a release is built
// (-ldflags "-X main.version=1.2.3"). Unset, it is the module's version that
// go install recorded (v1.2.3 is printed 1.2.3), or "devel" for a build from a
// clone. A release of the command has the number of the library release it is
// built with (docs/development.md, Releases).
var version = ""

func commandVersion() string {
	if version != "" {
		return strings.TrimPrefix(version, "v")
	}
	if bi, ok := debug.ReadBuildInfo(); ok && bi.Main.Version != "" && bi.Main.Version != "(devel)" {
		return strings.TrimPrefix(bi.Main.Version, "v")
	}
	return "devel"
}

// versionText is what version and --version print: the command's release, the
// library's version it was built with (fleet.Version, which replicas report),
// and the Go release and platform.
func versionText() string {
	return fmt.Sprintf("anarchon %s (library %s, %s %s/%s)", commandVersion(), fleet.Version, runtime.Version(), runtime.GOOS, runtime.GOARCH)
}

func (c *cli) versionCommand() *cobra.Command {
	return &cobra.Command{
		Use:   "version",
		Short: "Print the command's version, and the library version it speaks",
		Args:  noArgs,
		RunE: func(*cobra.Command, []string) error {
			if c.jsonOut() {
				return c.printJSON(struct {
					Version string `json:"version"`
					Library string `json:"library"`
					Go      string `json:"go"`
				}{commandVersion(), fleet.Version, runtime.Version()})
			}
			_, err := fmt.Fprintln(c.stdout, versionText())
			return err
		},
	}
}
