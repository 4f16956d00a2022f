package scheduler_test

import (
	"context"
	"errors"
	"strings"
	"testing"
	"testing/synctest"
	"time"
	"unicode/utf8"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/anarchon/anarchon/backend"
	"github.com/anarchon/anarchon/backend/memory"
	"github.com/anarchon/anarchon/scheduler"
)

func TestTruncateText(t *testing.T) {
	long := strings.Repeat("é", 3000) // 6000 bytes
	for _, tc := range []struct {
		name string
		in   string
		max  int
		want string
	}{
		{"short", "boom", 10, "boom"},
		{"exact", "0123456789", 10, "0123456789"},
		{"cut", strings.Repeat("x", 100), 40, strings.Repeat("x", 16) + " …[cut from 100 bytes]"},
		{"no room for the mark", strings.Repeat("x", 100), 10, strings.Repeat("x", 10)},
		{"no room, at a rune", "aéé", 2, "a"},
		{"zero", "x", 0, ""},
	} {
		t.Run(tc.name, func(t *testing.T) {
			got := backend.TruncateText(tc.in, tc.max)
			assert.Equal(t, tc.want, got)
			assert.LessOrEqual(t, len(got), max(tc.max, 0))
		})
	}
	got := backend.TruncateText(long, 1001)
	assert.LessOrEqual(t, len(got), 1001)
	assert.True(t, utf8.ValidString(got), "cut at a rune boundary: %q", got[len(got)-40:])
	assert.True(t, strings.HasSuffix(got, " …[cut from 6000 bytes]"))
}

// A handler's error longer than MaxErrorText is stored cut, with the mark: one
// record never outgrows a store's message, whatever the handler returns.
func TestLongErrorIsStoredCut(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		b := memory.New()
		s := newScheduler(t, b, "A")
		huge := strings.Repeat("e", 1<<20)
		require.NoError(t, s.Every("failing", time.Second, func(context.Context, scheduler.Run) error { return errors.New(huge) }))
		require.NoError(t, s.Start(t.Context()))
		time.Sleep(1500 * time.Millisecond)
		require.NoError(t, s.Stop(t.Context()))
		recs, err := s.History(t.Context(), "failing", 10)
		require.NoError(t, err)
		require.NotEmpty(t, recs)
		for _, r := range recs {
			assert.Equal(t, scheduler.StatusError, r.Status)
			assert.LessOrEqual(t, len(r.Error), scheduler.MaxErrorText)
			assert.True(t, strings.HasSuffix(r.Error, " …[cut from 1048576 bytes]"), r.Error[len(r.Error)-40:])
		}
	})
}

// Manual runs of one job are bounded per instance: beyond WithMaxManualRuns the
// call is refused before anything runs, and OnStart is called only for the runs
// that start.
func TestManualRunsAreBounded(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		b := memory.New()
		s := newScheduler(t, b, "A")
		release := make(chan struct{})
		require.NoError(t, s.Every("slow", time.Hour, func(ctx context.Context, _ scheduler.Run) error {
			<-release
			return nil
		}, scheduler.WithMaxManualRuns(2)))
		require.NoError(t, s.Start(t.Context()))
		defer func() { require.NoError(t, s.Stop(t.Context())) }()

		started := make(chan scheduler.Run, 3)
		errs := make(chan error, 3)
		for range 2 {
			go func() {
				_, err := s.RunNow(t.Context(), "slow", scheduler.OnStart(func(r scheduler.Run) { started <- r }))
				errs <- err
			}()
		}
		synctest.Wait()
		require.Len(t, started, 2, "both runs started")
		_, err := s.RunNow(t.Context(), "slow", scheduler.OnStart(func(r scheduler.Run) { started <- r }))
		require.ErrorIs(t, err, scheduler.ErrTooManyManualRuns)
		assert.Len(t, started, 2, "the refused run never started")
		close(release)
		require.NoError(t, <-errs)
		require.NoError(t, <-errs)
		r := <-started
		assert.True(t, r.Manual)
		assert.Equal(t, "slow", r.Job)
		// Once they ended, a manual run is accepted again.
		rec, err := s.RunNow(t.Context(), "slow")
		require.NoError(t, err)
		assert.Equal(t, scheduler.StatusOK, rec.Status)
	})
}

func TestMaxManualRunsOption(t *testing.T) {
	s := newScheduler(t, memory.New(), "A")
	err := s.Every("x", time.Second, func(context.Context, scheduler.Run) error { return nil }, scheduler.WithMaxManualRuns(0))
	require.ErrorIs(t, err, scheduler.ErrInvalidOption)
	assert.Contains(t, err.Error(), "max manual runs 0")
}
