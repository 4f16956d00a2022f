package fleet_test

import (
	"flag"
	"fmt"
	"os"
	"strings"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/anarchon/anarchon/fleet"
)

var updateREADME = flag.Bool("update-readme", false, "rewrite the README's role table from fleet.Permissions")

const (
	tableStart = "<!-- roles: generated from fleet.Permissions by TestREADMERoleTable (go test ./fleet -run TestREADMERoleTable -update-readme) -->\n"
	tableEnd   = "<!-- end of roles -->\n"
)

// roleTable is the README's table of NATS permissions per role, written from
// fleet.Permissions (the replica's with the JetStream backend and kvlease store):
// the permissions the tests run the roles with.
func roleTable(t *testing.T) string {
	t.Helper()
	code := func(subjects []string) string {
		q := make([]string, len(subjects))
		for i, s := range subjects {
			q[i] = "`" + s + "`"
		}
		return strings.Join(q, ", ")
	}
	var b strings.Builder
	b.WriteString("| role | inbox prefix | publish | subscribe |\n|---|---|---|---|\n")
	for _, role := range fleet.Roles {
		p, err := fleet.Permissions(role, fleet.PermissionsConfig{Backend: replicaBackend(t)[role]})
		require.NoError(t, err)
		publish := code(p.Publish)
		if p.Responses != nil {
			publish += fmt.Sprintf("; and its answers on the reply subjects of the requests it gets (`allow_responses`: max %d, expires %v)",
				p.Responses.Max, p.Responses.TTL)
		}
		fmt.Fprintf(&b, "| %s | `%s` | %s | %s |\n", role, p.InboxPrefix, publish, code(p.Subscribe))
	}
	return b.String()
}

// TestREADMERoleTable: the README's role table is exactly what fleet.Permissions
// gives, the permissions TestRolesOnARealServer runs the roles with.
func TestREADMERoleTable(t *testing.T) {
	data, err := os.ReadFile("../README.md")
	require.NoError(t, err)
	readme := string(data)
	start, end := strings.Index(readme, tableStart), strings.Index(readme, tableEnd)
	require.True(t, start >= 0 && end > start, "the README marks its role table with %q and %q", tableStart, tableEnd)
	table := roleTable(t)
	if *updateREADME {
		readme = readme[:start+len(tableStart)] + table + readme[end:]
		require.NoError(t, os.WriteFile("../README.md", []byte(readme), 0o644))
		return
	}
	assert.Equal(t, table, readme[start+len(tableStart):end], "the README's role table is not fleet.Permissions': run with -update-readme")
}
