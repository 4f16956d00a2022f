package scheduler

import (
	"fmt"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/anarchon/anarchon/backend"
)

// The ranking spreads the jobs evenly over the members, and a member leaving
// moves only the jobs it was first for.
func TestTurnRankSpreadsAndIsStable(t *testing.T) {
	const runs, members = 20000, 10
	var all []backend.Member
	for i := range members {
		all = append(all, backend.Member{Instance: fmt.Sprintf("replica-%d", i), Group: "g"})
	}
	first := func(tr *turns, run string) string {
		for _, m := range tr.members() {
			above, known, _ := tr.rank(run, m)
			require.True(t, known)
			if len(above) == 0 {
				return m
			}
		}
		t.Fatalf("no member is first for %s", run)
		return ""
	}
	tr := newTurns(nil)
	tr.setGroup("g", "replica-0")
	tr.set(all, true, "replica-0")
	share := map[string]int{}
	before := map[string]string{}
	for i := range runs {
		run := fmt.Sprintf("tenants\x00tenant-%07d", i)
		f := first(tr, run)
		share[f]++
		before[run] = f
	}
	for m, n := range share {
		assert.InDelta(t, runs/members, n, runs/members/5, "%s is first for %d of %d", m, n, runs)
	}
	tr.set(all[:members-1], true, "replica-0") // replica-9 leaves
	moved := 0
	for run, was := range before {
		now := first(tr, run)
		if was != "replica-9" {
			assert.Equal(t, was, now, "%s moved though its first member stayed", run)
		} else {
			moved++
		}
	}
	assert.Equal(t, share["replica-9"], moved)
}

// Every member, ranking by its own view, agrees on the order.
func TestTurnRankAgreesAcrossMembers(t *testing.T) {
	var all []backend.Member
	for i := range 5 {
		all = append(all, backend.Member{Instance: fmt.Sprintf("r%d", i), Group: "g"})
	}
	for i := range 200 {
		run := fmt.Sprintf("job-%d", i)
		turnOf := map[int]string{}
		for _, m := range all {
			tr := newTurns(nil)
			tr.setGroup("g", m.Instance)
			tr.set(all, true, m.Instance)
			above, _, _ := tr.rank(run, m.Instance)
			_, dup := turnOf[len(above)]
			require.False(t, dup, "two members have turn %d of %s", len(above), run)
			turnOf[len(above)] = m.Instance
		}
	}
}
