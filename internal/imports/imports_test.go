// Package imports_test holds the repository's import boundaries: the core imports
// no NATS, SQL, Prometheus or OpenTelemetry package, the backends import the
// contract and not the scheduler, and no package imports one from a floor above
// its own.
package imports_test

import (
	"bufio"
	"bytes"
	"io/fs"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
)

const module = "github.com/anarchon/anarchon"

// floors orders the repository's packages: a package may import packages of its own
// floor or below, never above. Keys are package paths relative to the module; a key
// ending in "/..." also covers the packages below it. A package with no floor fails
// the test, so a new one is placed on purpose.
var floors = map[string]int{
	"backend":                 0, // the contract
	"backend/machine":         0, // the slot's state machine, which every store applies
	"internal/option":         0,
	"backend/memory":          1, // what implements the contract alone
	"stepclock":               1,
	"scheduler":               2, // the engine
	"backend/backendtest":     3, // the conformance suite and the model check run schedulers
	"internal/modelcheck":     3,
	"anarchontest":            3, // a fleet of schedulers on the memory store, for users' tests
	"internal/retrytest":      3, // a retried job's handler and checks, for the backends' tests
	"internal/natsutil":       4, // plug-ins: backends, metrics, servers
	"internal/backendutil":    1,
	"jetstream":               4,
	"kvlease":                 4,
	"sqlbackend":              4,
	"sqlbackend/internal/...": 6,
	"metrics":                 4,
	"embedded":                4,
	"internal/natstest":       4, // embedded servers for tests
	"connect":                 4,
	"fleet":                   5, // surfaces: the fleet service, the status pages, tracing
	"web":                     5,
	"otel":                    5,
	"internal/maintest":       6, // programs and the tests across packages
	"internal/imports":        6,
	"cmd/...":                 6,
	"examples/...":            6,
	"integration/...":         6,
}

// foreign are the import path prefixes the core must not depend on.
var foreign = []string{
	"github.com/nats-io/", "github.com/prometheus/", "database/sql", "github.com/jackc/",
	"modernc.org/", "go.opentelemetry.io/",
}

// contractOnly are the backends: they import the contract, not the scheduler.
var contractOnly = []string{"jetstream", "kvlease", "sqlbackend"}

func floorOf(t *testing.T, rel string) int {
	best, floor := -1, 0
	for key, f := range floors {
		prefix, tree := strings.CutSuffix(key, "/...")
		if (rel == prefix || tree && strings.HasPrefix(rel, prefix+"/")) && len(prefix) > best {
			best, floor = len(prefix), f
		}
	}
	if best < 0 {
		t.Fatalf("package %s has no floor: add it to floors", rel)
	}
	return floor
}

// deps lists, for every package of the module in dir, the packages it depends on
// (not its tests'), by go list.
func deps(t *testing.T, dir string) map[string][]string {
	t.Helper()
	cmd := exec.Command("go", "list", "-f", "{{.ImportPath}}{{range .Deps}} {{.}}{{end}}", "./...")
	cmd.Dir = dir
	var stderr bytes.Buffer
	cmd.Stderr = &stderr
	out, err := cmd.Output()
	if err != nil {
		t.Fatalf("go list in %s: %v\n%s", dir, err, stderr.String())
	}
	all := map[string][]string{}
	sc := bufio.NewScanner(bytes.NewReader(out))
	sc.Buffer(nil, 1<<20)
	for sc.Scan() {
		f := strings.Fields(sc.Text())
		all[f[0]] = f[1:]
	}
	return all
}

func rel(path string) (string, bool) {
	if path == module {
		return "", true
	}
	r, ok := strings.CutPrefix(path, module+"/")
	return r, ok
}

// check reports every import of pkgs that breaks a boundary.
func check(t *testing.T, all map[string][]string) []string {
	var bad []string
	for pkg, ds := range all {
		from, ok := rel(pkg)
		if !ok {
			continue
		}
		floor := floorOf(t, from)
		for _, d := range ds {
			to, ours := rel(d)
			switch {
			case ours && floorOf(t, to) > floor:
				bad = append(bad, from+" imports "+to+", a floor above it")
			case ours && to == "scheduler" && floor == 4 && isOneOf(from, contractOnly):
				bad = append(bad, from+" imports scheduler: a backend imports the contract, package backend")
			case !ours && floor <= 2 && hasPrefix(d, foreign):
				bad = append(bad, from+" depends on "+d+": the core imports no NATS, SQL, Prometheus or OpenTelemetry package")
			}
		}
	}
	return bad
}

func isOneOf(rel string, prefixes []string) bool {
	for _, p := range prefixes {
		if rel == p || strings.HasPrefix(rel, p+"/") {
			return true
		}
	}
	return false
}

func hasPrefix(s string, prefixes []string) bool {
	for _, p := range prefixes {
		if strings.HasPrefix(s, p) {
			return true
		}
	}
	return false
}

func TestImportBoundaries(t *testing.T) {
	if testing.Short() {
		t.Skip("runs go list over the repository's modules")
	}
	root := filepath.Join("..", "..")
	mods := modules(t, root)
	if len(mods) < 2 {
		t.Fatalf("found the modules %q: the root and the modules below it", mods)
	}
	for _, dir := range mods {
		all := deps(t, filepath.Join(root, dir))
		if len(all) == 0 {
			t.Fatalf("go list found no package in %s", dir)
		}
		for _, b := range check(t, all) {
			t.Error(b)
		}
	}
}

// modules lists the directories below root that hold a go.mod, as .ci/modules does.
func modules(t *testing.T, root string) []string {
	var out []string
	err := filepath.WalkDir(root, func(path string, d fs.DirEntry, err error) error {
		if err != nil {
			return err
		}
		name := d.Name()
		if d.IsDir() && path != root && (strings.HasPrefix(name, ".") || name == "testdata") {
			return filepath.SkipDir
		}
		if name == "go.mod" {
			rel, err := filepath.Rel(root, filepath.Dir(path))
			if err != nil {
				return err
			}
			out = append(out, rel)
		}
		return nil
	})
	if err != nil {
		t.Fatal(err)
	}
	return out
}

// TestImportBoundariesCatch shows the checker failing on the imports it is for.
func TestImportBoundariesCatch(t *testing.T) {
	bad := check(t, map[string][]string{
		module + "/scheduler":      {module + "/backend", "github.com/nats-io/nats.go"},
		module + "/backend":        {module + "/scheduler"},
		module + "/jetstream":      {module + "/scheduler", module + "/backend"},
		module + "/metrics":        {module + "/fleet", "github.com/prometheus/client_golang/prometheus"},
		module + "/backend/memory": {module + "/backend", module + "/scheduler"},
		module + "/stepclock":      {module + "/backend", "time"},
	})
	want := []string{
		"scheduler depends on github.com/nats-io/nats.go",
		"backend imports scheduler, a floor above it",
		"jetstream imports scheduler: a backend imports the contract",
		"metrics imports fleet, a floor above it",
		"backend/memory imports scheduler, a floor above it",
	}
	if len(bad) != len(want) {
		t.Fatalf("found %d breaks, want %d: %q", len(bad), len(want), bad)
	}
	for _, w := range want {
		found := false
		for _, b := range bad {
			found = found || strings.HasPrefix(b, w)
		}
		if !found {
			t.Errorf("no break reported as %q in %q", w, bad)
		}
	}
}
