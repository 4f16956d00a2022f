package fleet_test

import (
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/anarchon/anarchon/fleet"
	"github.com/anarchon/anarchon/scheduler"
)

// Replicas that declare a job's run limit differently are reported, naming who
// declares what.
func TestRegistryReportsMaxRunsConflict(t *testing.T) {
	f := startFleet(t, fleetSetup{quiet: true, jobs: func(id string) []testJob {
		j := every(jobReport, time.Hour)
		if id != "C" {
			j.Opts = []scheduler.JobOption{scheduler.WithMaxRuns(5)}
		}
		return []testJob{j}
	}})
	f.waitConflict(t, f.replicas[0], jobReport, `max runs: "5" on A, B; "no limit" on C`, 5*time.Second)
}

// A job whose run limit was reached is shown ended, with its limit, once a
// replica was told so (the limit is counted fleet-wide).
func TestJobsViewShowsLimitReached(t *testing.T) {
	f := startFleet(t, fleetSetup{instances: []string{"A", "B"}, jobs: func(string) []testJob {
		j := every("limited", time.Second)
		j.Opts = []scheduler.JobOption{scheduler.WithMaxRuns(1)}
		return []testJob{j, every(jobReport, time.Hour)}
	}})
	deadline := time.Now().Add(15 * time.Second)
	for {
		fl, err := f.client.Jobs(requestCtx(t))
		require.NoError(t, err)
		var limited fleet.JobSummary
		for _, j := range fl.Jobs {
			if j.Name == "limited" {
				limited = j
			}
		}
		assert.Equal(t, 1, limited.MaxRuns)
		if limited.LimitReached {
			assert.Equal(t, fleet.JobEnded, limited.State)
			for _, r := range fl.Replicas {
				for _, j := range r.Jobs {
					if j.Name == "limited" && j.LimitReached {
						assert.Equal(t, fleet.JobEnded, j.State, r.Instance)
						assert.True(t, j.Next.IsZero(), r.Instance)
					}
				}
			}
			return
		}
		assert.Equal(t, fleet.JobActive, limited.State, "before the limit")
		require.True(t, time.Now().Before(deadline), "the limit of one run was not reached: %+v", limited)
		time.Sleep(100 * time.Millisecond)
	}
}
