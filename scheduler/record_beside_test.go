package scheduler_test

import (
	"context"
	"testing"
	"testing/synctest"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/anarchon/anarchon/backend"
	"github.com/anarchon/anarchon/backend/memory"
	"github.com/anarchon/anarchon/scheduler"
)

// recorder is a leased memory backend whose history record of a won lease takes a
// long time (it waits for its context), and that says whether the record decides.
type recorder struct {
	*memory.Backend
	decides bool
}

func (r recorder) RecordClaim(ctx context.Context, _ backend.ClaimInput) error {
	<-ctx.Done()
	return ctx.Err()
}

func (r recorder) RecordDecides(string) bool { return r.decides }

// A record that may decide is written before the handler (which starts only once
// the record's bounded wait, a third of the lease, is over); one that decides
// nothing is written beside the handler, which starts at the slot.
func TestRecordBesideTheHandler(t *testing.T) {
	for _, tc := range []struct {
		decides bool
		delay   time.Duration
	}{{true, time.Second}, {false, 0}} {
		synctest.Test(t, func(t *testing.T) {
			time.Sleep(90 * time.Second) // between slots
			b := recorder{Backend: memory.New(), decides: tc.decides}
			s := newScheduler(t, b, "A")
			started := make(chan time.Time, 1)
			require.NoError(t, s.Every("job", time.Hour, func(context.Context, scheduler.Run) error {
				started <- time.Now()
				return nil
			}, scheduler.WithLease(3*time.Second)))
			require.NoError(t, s.Start(t.Context()))
			slot := time.Now().Truncate(time.Hour).Add(time.Hour)
			at := <-started
			assert.Equal(t, tc.delay, at.Sub(slot), "decides=%v: the handler starts this long after the slot", tc.decides)
			require.NoError(t, s.Stop(t.Context()))
		})
	}
}

// A claim that Stop cuts short after the store applied it is settled, not left
// unfinished in the store: the scheduler asks once more with the same token, and the
// slot the store gave it runs while Stop waits for handlers, then finishes.
func TestStopSettlesAClaimItCutShort(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		time.Sleep(90 * time.Second) // between slots
		mem := memory.New()
		v := &faultView{Backend: mem}
		v.loseAnswerOf.Store(1) // the first claim is applied, its answer never comes
		s := newScheduler(t, v, "A")
		ran := make(chan struct{}, 1)
		require.NoError(t, s.Every("job", time.Hour, func(context.Context, scheduler.Run) error {
			ran <- struct{}{}
			return nil
		}, scheduler.WithLease(30*time.Second)))
		require.NoError(t, s.Start(t.Context()))
		slot := time.Now().Truncate(time.Hour).Add(time.Hour)
		time.Sleep(time.Until(slot) + time.Second) // the slot's claim is applied and waits for its answer
		synctest.Wait()
		require.EqualValues(t, 1, v.claims.Load(), "the slot's claim is in flight")
		ctx, cancel := context.WithTimeout(t.Context(), time.Minute)
		defer cancel()
		require.NoError(t, s.Stop(ctx))
		select {
		case <-ran:
		default:
			t.Fatal("the slot the store gave this instance's token did not run")
		}
		active, err := mem.Runs().Active(t.Context(), "job")
		require.NoError(t, err)
		assert.Empty(t, active, "nothing is left unfinished in the run store")
	})
}

// Stop while a won lease's deciding record is in flight hands the lease over unrun,
// and is not reported as a failure of the backend: the record's call was cut short
// by Stop, not refused.
func TestStopDuringTheRecordHandsTheLeaseOver(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		time.Sleep(90 * time.Second) // between slots
		b := recorder{Backend: memory.New(), decides: true}
		var failures []scheduler.Event
		s := newScheduler(t, b, "A", func(c *scheduler.Config) {
			c.OnEvent = func(e scheduler.Event) {
				if e.Kind == scheduler.EventBackendError {
					failures = append(failures, e)
				}
			}
		})
		ran := false
		require.NoError(t, s.Every("job", time.Hour, func(context.Context, scheduler.Run) error {
			ran = true
			return nil
		}, scheduler.WithLease(30*time.Second)))
		require.NoError(t, s.Start(t.Context()))
		slot := time.Now().Truncate(time.Hour).Add(time.Hour)
		time.Sleep(time.Until(slot) + time.Second) // the lease is won, its record waits
		synctest.Wait()
		require.NoError(t, s.Stop(t.Context()))

		assert.False(t, ran, "the slot is not run once Stop cut its record short")
		assert.Empty(t, failures, "a record cut short by Stop is not a backend failure")
		active, err := b.Runs().Active(t.Context(), "job")
		require.NoError(t, err)
		require.Len(t, active, 1, "the run stays for a backup to take over")
		assert.False(t, active[0].Live, "its lease is released, not left to expire")
	})
}
