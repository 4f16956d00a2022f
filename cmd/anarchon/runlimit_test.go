package main

import (
	"testing"

	"github.com/stretchr/testify/assert"

	"github.com/anarchon/anarchon/fleet"
)

// The jobs table's state of a job: ended when its schedule has no slot left; with
// a run limit, the limit while it runs, ended once it is reached; a pause says
// the pause.
func TestJobStateRunLimit(t *testing.T) {
	for _, c := range []struct {
		j    fleet.JobSummary
		want string
	}{
		{fleet.JobSummary{State: fleet.JobActive}, "active"},
		{fleet.JobSummary{State: fleet.JobEnded}, "ended"},
		{fleet.JobSummary{State: fleet.JobActive, MaxRuns: 3}, "active (run limit 3)"},
		{fleet.JobSummary{State: fleet.JobEnded, MaxRuns: 3, LimitReached: true}, "ended: run limit 3 reached"},
		{fleet.JobSummary{State: fleet.JobPaused, MaxRuns: 3, Pause: &fleet.PauseInfo{Job: "j", Reason: "r"}, Replicas: []string{"A"}, PausedOn: []string{"A"}}, "paused: r"},
	} {
		assert.Equal(t, c.want, jobState(c.j), "%+v", c.j)
	}
}
