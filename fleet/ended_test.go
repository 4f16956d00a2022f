package fleet_test

import (
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/anarchon/anarchon/fleet"
	"github.com/anarchon/anarchon/scheduler"
)

// A job whose schedule has no slot left is shown ended, once every replica that
// declares it says so; a replica whose schedule of it goes on keeps it active.
func TestJobsViewShowsEndedJobs(t *testing.T) {
	over := scheduler.WithEndAt(time.Now().Add(-2 * time.Hour))
	f := startFleet(t, fleetSetup{instances: []string{"A", "B"}, jobs: func(id string) []testJob {
		ended := every("ended", time.Hour)
		ended.Opts = []scheduler.JobOption{over}
		mixed := every("mixed", time.Hour)
		if id == "A" {
			mixed.Opts = []scheduler.JobOption{over}
		}
		return []testJob{ended, mixed, every(jobReport, time.Hour)}
	}})
	fl, err := f.client.Jobs(requestCtx(t))
	require.NoError(t, err)
	states := map[string]string{}
	for _, j := range fl.Jobs {
		states[j.Name] = j.State
		if j.Name == "ended" {
			assert.True(t, j.Next.IsZero(), "no next slot")
		}
	}
	assert.Equal(t, map[string]string{"ended": fleet.JobEnded, "mixed": fleet.JobActive, jobReport: fleet.JobActive}, states)
}
