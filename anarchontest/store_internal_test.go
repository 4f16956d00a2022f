package anarchontest

import (
	"go/ast"
	"go/parser"
	"go/token"
	"path/filepath"
	"reflect"
	"strings"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/anarchon/anarchon/backend"
	"github.com/anarchon/anarchon/backend/memory"
)

// capabilities are the interfaces of package backend, each by its name.
var capabilities = map[string]reflect.Type{
	"Backend":        reflect.TypeFor[backend.Backend](),
	"LeaseBackend":   reflect.TypeFor[backend.LeaseBackend](),
	"ClaimRecorder":  reflect.TypeFor[backend.ClaimRecorder](),
	"RecordDecider":  reflect.TypeFor[backend.RecordDecider](),
	"RecordWriter":   reflect.TypeFor[backend.RecordWriter](),
	"OnceRecorder":   reflect.TypeFor[backend.OnceRecorder](),
	"Pauser":         reflect.TypeFor[backend.Pauser](),
	"EntryStore":     reflect.TypeFor[backend.EntryStore](),
	"CalendarStore":  reflect.TypeFor[backend.CalendarStore](),
	"Membership":     reflect.TypeFor[backend.Membership](),
	"JobChecker":     reflect.TypeFor[backend.JobChecker](),
	"JobWindower":    reflect.TypeFor[backend.JobWindower](),
	"LastRunsReader": reflect.TypeFor[backend.LastRunsReader](),

	"RunStore":           reflect.TypeFor[backend.RunStore](),
	"Settler":            reflect.TypeFor[backend.Settler](),
	"RecordsUser":        reflect.TypeFor[backend.RecordsUser](),
	"LeaseWatcher":       reflect.TypeFor[backend.LeaseWatcher](),
	"ActiveLister":       reflect.TypeFor[backend.ActiveLister](),
	"EntryRunLister":     reflect.TypeFor[backend.EntryRunLister](),
	"Retrier":            reflect.TypeFor[backend.Retrier](),
	"OverlapCanceller":   reflect.TypeFor[backend.OverlapCanceller](),
	"OverlapBufferer":    reflect.TypeFor[backend.OverlapBufferer](),
	"RunCounter":         reflect.TypeFor[backend.RunCounter](),
	"BufferedRunCounter": reflect.TypeFor[backend.BufferedRunCounter](),
	"RunCountReader":     reflect.TypeFor[backend.RunCountReader](),
	"ConcurrencyCapper":  reflect.TypeFor[backend.ConcurrencyCapper](),
}

// notCapabilities are the interfaces of package backend that a store does not
// implement.
var notCapabilities = map[string]bool{"Clock": true, "Timer": true}

// A replica's view of the store has every capability the memory store has,
// and no other: the scheduler loses no feature and gains none. The run store's
// RecordsUser is left out on purpose: where the store writes its records is
// the fleet's, not one replica's.
func TestViewKeepsTheStoresCapabilities(t *testing.T) {
	for _, name := range backendInterfaces(t) {
		if notCapabilities[name] {
			continue
		}
		_, ok := capabilities[name]
		assert.True(t, ok, "backend.%s is new: add it to capabilities, and to the view if the memory store implements it", name)
	}
	mem := memory.New()
	v := &view{mem: mem}
	pairs := []struct {
		what      string
		store, in any
	}{
		{"backend", mem, v},
		{"run store", mem.Runs(), v.Runs()},
	}
	for _, p := range pairs {
		for name, c := range capabilities {
			want := reflect.TypeOf(p.store).Implements(c)
			if p.what == "run store" && name == "RecordsUser" {
				want = false
			}
			assert.Equal(t, want, reflect.TypeOf(p.in).Implements(c), "the view of the %s as a backend.%s", p.what, name)
		}
	}
	runs, view := mem.Runs().(memRuns), v.Runs().(memRuns)
	assert.Equal(t, runs.CancelsOverlap(), view.CancelsOverlap())
	assert.Equal(t, runs.BuffersOverlap(), view.BuffersOverlap())
	assert.Equal(t, runs.CountsRuns(), view.CountsRuns())
	assert.Equal(t, runs.CountsBufferedRuns(), view.CountsBufferedRuns())
	assert.Equal(t, runs.CapsConcurrency(), view.CapsConcurrency())
}

// backendInterfaces returns the names of the interfaces package backend
// declares.
func backendInterfaces(t *testing.T) []string {
	t.Helper()
	files, err := filepath.Glob("../backend/*.go")
	require.NoError(t, err)
	var names []string
	for _, path := range files {
		if strings.HasSuffix(path, "_test.go") {
			continue
		}
		file, err := parser.ParseFile(token.NewFileSet(), path, nil, 0)
		require.NoError(t, err)
		for _, decl := range file.Decls {
			gd, ok := decl.(*ast.GenDecl)
			if !ok || gd.Tok != token.TYPE {
				continue
			}
			for _, spec := range gd.Specs {
				ts := spec.(*ast.TypeSpec)
				if _, ok := ts.Type.(*ast.InterfaceType); ok && ts.Name.IsExported() {
					names = append(names, ts.Name.Name)
				}
			}
		}
	}
	require.NotEmpty(t, names)
	return names
}
