package kvlease_test

import (
	"context"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	"go.uber.org/goleak"

	"github.com/anarchon/anarchon/backend"
	"github.com/anarchon/anarchon/kvlease"
)

// Watches end with their context or with Close and leave no goroutine behind.
func TestWatchesLeaveNoGoroutines(t *testing.T) {
	js := singleJS(t) // the server and the connection are not the store's
	s, err := kvlease.New(js, kvlease.WithBucket(bucket))
	require.NoError(t, err)
	require.NoError(t, s.Init(t.Context()))
	job, slot := "leak "+token(), time.UnixMilli(1_900_000_000_000)
	a := token()
	mustClaim(t, s, claimOf(job, slot, a, time.Minute), backend.OutcomeWon)
	_, err = s.Active(t.Context(), job)
	require.NoError(t, err)
	ignore := goleak.IgnoreCurrent()

	ctx, cancel := context.WithCancel(context.Background())
	var chans []<-chan struct{}
	for range 5 {
		ch, err := s.WatchRun(ctx, job, slot)
		require.NoError(t, err)
		chans = append(chans, ch)
	}
	long, err := s.WatchRun(context.Background(), job, slot)
	require.NoError(t, err)
	fired, err := s.WatchRun(context.Background(), job, time.UnixMilli(0)) // nothing live: fires at once
	require.NoError(t, err)
	<-fired
	cancel()
	for _, ch := range chans {
		<-ch
	}
	require.NoError(t, s.Release(t.Context(), backend.RunKey{Job: job, Slot: slot, Token: a}))
	<-long
	s.Close()
	goleak.VerifyNone(t, ignore)
}

// Close racing WatchRun: a standby that starts watching while the store closes
// either gets ErrClosed or its watcher is waited for by Close, never a watcher
// started beside Close's wait (a WaitGroup added to while waited on).
func TestCloseRacesWatchRun(t *testing.T) {
	js := singleJS(t)
	for range 10 {
		s, err := kvlease.New(js, kvlease.WithBucket(bucket))
		require.NoError(t, err)
		require.NoError(t, s.Init(t.Context()))
		job, slot := "close race "+token(), time.UnixMilli(1_900_000_000_000)
		mustClaim(t, s, claimOf(job, slot, token(), time.Minute), backend.OutcomeWon)
		ignore := goleak.IgnoreCurrent()
		watching := make(chan struct{})
		done := make(chan struct{})
		go func() {
			defer close(done)
			close(watching)
			for {
				if _, err := s.WatchRun(context.Background(), job, slot); err != nil {
					assert.ErrorIs(t, err, kvlease.ErrClosed)
					return
				}
			}
		}()
		<-watching
		s.Close()
		<-done
		goleak.VerifyNone(t, ignore)
	}
}
