package backendtest

import (
	"context"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/anarchon/anarchon/backend"
)

// RunPauses runs the pause section of the conformance suite against a backend that
// implements backend.Pauser: pauses are stored per job (and for all jobs), replaced,
// cleared, listed, and watched. Backends returned by newBackend within one test must
// share one store, as for Run. It fails the test at once when the backend is not a
// Pauser.
func RunPauses(t *testing.T, newBackend func(t *testing.T) backend.Backend) {
	t.Helper()
	t.Run("Pauses", func(t *testing.T) {
		open := func() backend.Pauser {
			b := setup(t, newBackend)
			p, ok := b.(backend.Pauser)
			require.True(t, ok, "%T is not a backend.Pauser", b)
			return p
		}
		a, b := open(), open()
		ctx := Context(t)
		job := JobName("paused ✓ a.b/c")
		until := time.Now().Add(time.Hour).Truncate(time.Millisecond).UTC()
		changes := make(chan []backend.Pause, 16)
		wctx, stop := context.WithCancel(ctx)
		watched := make(chan error, 1)
		go func() {
			watched <- b.WatchPauses(wctx, func(all []backend.Pause) { changes <- all })
		}()
		first := next(t, changes)
		for _, p := range first {
			assert.NotEqual(t, job, p.Job, "a fresh job is not paused")
		}

		want := backend.Pause{Job: job, Reason: "migrating", By: "ops", At: time.Now().Truncate(time.Millisecond).UTC(), Until: until}
		require.NoError(t, a.SetPause(ctx, want))
		got := waitPause(t, changes, job, want.Reason)
		assert.Equal(t, want.Reason, got.Reason)
		assert.Equal(t, want.By, got.By)
		assert.True(t, want.Until.Equal(got.Until), "until %s, want %s", got.Until, want.Until)
		assert.True(t, want.At.Equal(got.At), "at %s, want %s", got.At, want.At)

		all := backend.Pause{Job: "", Reason: "freeze", By: "ops"}
		require.NoError(t, a.SetPause(ctx, all))
		waitPause(t, changes, "", "freeze")
		want.Reason = "migrating, take two"
		require.NoError(t, a.SetPause(ctx, want))
		waitPause(t, changes, job, want.Reason) // a pause of the same job replaces it

		listed, err := b.Pauses(ctx)
		require.NoError(t, err)
		jobs := map[string]string{}
		for _, p := range listed {
			jobs[p.Job] = p.Reason
		}
		assert.Equal(t, "migrating, take two", jobs[job], "listed: %+v", listed)
		assert.Equal(t, "freeze", jobs[""], "the all-jobs pause is listed: %+v", listed)

		require.NoError(t, a.ClearPause(ctx, job))
		waitPause(t, changes, job, "")
		require.NoError(t, a.ClearPause(ctx, job), "clearing a pause that is not stored")
		require.NoError(t, a.ClearPause(ctx, ""))
		waitPause(t, changes, "", "")

		stop()
		select {
		case err := <-watched:
			assert.NoError(t, err, "a watch ended by its context returns nil")
		case <-time.After(10 * time.Second):
			t.Fatal("WatchPauses did not return after its context ended")
		}
	})
	t.Run("FarUntil", func(t *testing.T) { testFarPauses(t, newBackend) })
}

func next(t *testing.T, ch <-chan []backend.Pause) []backend.Pause {
	t.Helper()
	select {
	case all := <-ch:
		return all
	case <-time.After(10 * time.Second):
		require.FailNow(t, "WatchPauses reported nothing within 10s")
		return nil
	}
}

// waitPause reads watch reports until one shows job's pause with reason (or, with
// reason "", no pause of job), and returns that pause.
func waitPause(t *testing.T, ch <-chan []backend.Pause, job, reason string) backend.Pause {
	t.Helper()
	deadline := time.After(10 * time.Second)
	for {
		select {
		case all := <-ch:
			var found *backend.Pause
			for i := range all {
				if all[i].Job == job {
					found = &all[i]
				}
			}
			switch {
			case reason == "" && found == nil:
				return backend.Pause{}
			case reason != "" && found != nil && found.Reason == reason:
				return *found
			}
		case <-deadline:
			require.FailNow(t, "the watch never showed the pause", "job %q reason %q", job, reason)
		}
	}
}
