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

var updateRoleTable = flag.Bool("update", false, "rewrite the role table of docs/operating.md from fleet.Permissions")

// rolePage is the documentation page that holds the role table, from this package's
// directory.
const rolePage = "../docs/operating.md"

const (
	tableStart = "<!-- roles: generated from fleet.Permissions by TestREADMERoleTable (go test ./fleet -run TestREADMERoleTable -update) -->\n"
	tableEnd   = "<!-- end of roles -->\n"
)

// roleTable is the documentation's table of NATS permissions per role, written from
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

// TestREADMERoleTable: the role table of the operating guide (docs/operating.md,
// linked from the README) is exactly what fleet.Permissions gives, the permissions
// TestRolesOnARealServer runs the roles with.
func TestREADMERoleTable(t *testing.T) {
	data, err := os.ReadFile(rolePage)
	require.NoError(t, err)
	page := string(data)
	start, end := strings.Index(page, tableStart), strings.Index(page, tableEnd)
	require.True(t, start >= 0 && end > start, "%s marks its role table with %q and %q", rolePage, tableStart, tableEnd)
	table := roleTable(t)
	if *updateRoleTable {
		page = page[:start+len(tableStart)] + table + page[end:]
		require.NoError(t, os.WriteFile(rolePage, []byte(page), 0o644))
		return
	}
	assert.Equal(t, table, page[start+len(tableStart):end], "the role table of %s is not fleet.Permissions': run with -update", rolePage)
}
