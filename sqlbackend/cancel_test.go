package sqlbackend_test

import (
	"context"
	"errors"
	"math/rand/v2"
	"sync"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/anarchon/anarchon/backend"
	"github.com/anarchon/anarchon/backend/backendtest"
	"github.com/anarchon/anarchon/scheduler"
)

// A holder's Heartbeat at the moment its lease ends races a backup's claim of the
// slot, on PostgreSQL, each through its own pool: with a cancel request stored
// (the claim would end the run cancelled) and without (it would take it over).
// Either the heartbeat extends the lease and the claim is answered running, or the
// claim ends the lease and the heartbeat is told the lease is lost. Never both: a
// holder that goes on past a takeover runs beside the next attempt, or beside the
// later slot that waits for it.
func TestHeartbeatRacesTakeover(t *testing.T) {
	t.Parallel()
	for _, asked := range []bool{true, false} {
		name := "takeover"
		if asked {
			name = "cancel requested"
		}
		t.Run(name, func(t *testing.T) {
			t.Parallel()
			testHeartbeatRacesTakeover(t, asked)
		})
	}
}

func testHeartbeatRacesTakeover(t *testing.T, asked bool) {
	const rounds = 40
	ctx := backendtest.Context(t)
	p := prefix("hbrace")
	holderB := closeAtEnd(t, newPG(t, p))
	holder, backup, asker := holderB.Runs(), closeAtEnd(t, newPG(t, p)).Runs(), closeAtEnd(t, newPG(t, p)).Runs()
	slot, later := time.UnixMilli(1_900_000_000_000), time.UnixMilli(1_900_000_001_000)
	var extended, ended int
	for round := range rounds {
		job := backendtest.JobName("hb-race")
		claim := func(s time.Time, token, instance string) backend.RunClaim {
			return backend.RunClaim{Job: job, Slot: s, Token: token, Instance: instance, Lease: time.Minute,
				Deadline: time.Now().Add(time.Hour), Overlap: backend.OverlapCancelOther}
		}
		tok := backendtest.Token()
		res, err := holder.Claim(ctx, claim(slot, tok, "holder"))
		require.NoError(t, err)
		require.Equal(t, backend.OutcomeWon, res.Outcome)
		if asked {
			res, err = asker.Claim(ctx, claim(later, backendtest.Token(), "asker"))
			require.NoError(t, err)
			require.Equal(t, backend.OutcomeRunning, res.Outcome, "the later slot waits")
		}
		// The lease ends a few milliseconds from now, by the database's clock.
		_, err = holderB.DB().ExecContext(ctx, "UPDATE "+p+"runs SET expires = "+nowMs+" + $1 WHERE job = $2 AND slot = $3",
			rand.IntN(8), job, slot.UnixMilli())
		require.NoError(t, err)
		var (
			hbErr    error
			hbDone   = make(chan struct{})
			outcomes []backend.ClaimOutcome
			claimErr error
			wg       sync.WaitGroup
		)
		key := backend.RunKey{Job: job, Slot: slot, Token: tok}
		gate := make(chan struct{})
		wg.Go(func() {
			defer close(hbDone)
			<-gate
			time.Sleep(time.Duration(rand.IntN(8000)) * time.Microsecond)
			hbErr = holder.Heartbeat(ctx, key, time.Minute)
		})
		wg.Go(func() {
			<-gate
			// Until the claim ends the run, or is answered running once the
			// heartbeat has returned.
			for end := time.Now().Add(10 * time.Second); time.Now().Before(end); {
				after := false
				select {
				case <-hbDone:
					after = true
				default:
				}
				res, err := backup.Claim(ctx, claim(slot, backendtest.Token(), "backup"))
				if err != nil {
					claimErr = err
					return
				}
				outcomes = append(outcomes, res.Outcome)
				if res.Outcome != backend.OutcomeRunning || after {
					return
				}
			}
		})
		close(gate)
		wg.Wait()
		require.NoError(t, claimErr)
		last := outcomes[len(outcomes)-1]
		if last == backend.OutcomeRunning {
			extended++
			if asked {
				var ce *backend.CancelError
				require.True(t, errors.As(hbErr, &ce), "round %d: the backup waits: the heartbeat extended the lease and says a cancel was asked: %v", round, hbErr)
			} else {
				require.NoError(t, hbErr, "round %d: the backup waits: the heartbeat extended the lease", round)
			}
			runs, err := backup.Active(ctx, job)
			require.NoError(t, err)
			require.NotEmpty(t, runs)
			assert.True(t, runs[0].Live, "round %d: the extended lease is live", round)
			continue
		}
		ended++
		require.ErrorIs(t, hbErr, backend.ErrLeaseLost, "round %d: the backup's claim ended the run (%v), yet the holder's heartbeat was accepted", round, outcomes)
		if asked {
			assert.Equal(t, backend.OutcomeDone, last, "round %d: a run asked to end is not taken over", round)
		} else {
			assert.Equal(t, backend.OutcomeWon, last, "round %d", round)
		}
	}
	t.Logf("%d rounds: the heartbeat first %d, the claim first %d", rounds, extended, ended)
}

// nowMs is the Postgres dialect's clock, for tests that move a lease's expiry.
const nowMs = "(floor(extract(epoch from clock_timestamp()) * 1000))::bigint"

// Two replicas run a job with OverlapCancelOther whose handler runs for three
// slots unless it is cancelled: each slot ends the run before it, and no two runs
// are ever under way at once.
func TestCancelOtherOnSQL(t *testing.T) {
	t.Parallel()
	onBoth(t, "cancel_other", testCancelOtherOnSQL)
}

func testCancelOtherOnSQL(t *testing.T, open opener) {
	ctx := backendtest.Context(t)
	job := backendtest.JobName("cancel-other")
	var (
		mu                    sync.Mutex
		running, most         int
		started, ended, asked int
	)
	var scheds []*scheduler.Scheduler
	for _, inst := range []string{"a", "b"} {
		_, b := open(t)
		sc, err := scheduler.New(scheduler.Config{Backend: b, Instance: inst})
		require.NoError(t, err)
		require.NoError(t, sc.Every(job, time.Second, func(ctx context.Context, _ scheduler.Run) error {
			mu.Lock()
			running++
			started++
			most = max(most, running)
			mu.Unlock()
			defer func() {
				mu.Lock()
				running--
				ended++
				mu.Unlock()
			}()
			select {
			case <-ctx.Done(): // a later slot asked
				mu.Lock()
				asked++
				mu.Unlock()
				return ctx.Err()
			case <-time.After(3 * time.Second):
				return nil
			}
		}, scheduler.WithOverlap(backend.OverlapCancelOther), scheduler.WithLease(time.Second), scheduler.WithMaxLate(900*time.Millisecond)))
		require.NoError(t, sc.Start(ctx))
		scheds = append(scheds, sc)
	}
	time.Sleep(4500 * time.Millisecond)
	for _, sc := range scheds {
		require.NoError(t, sc.Stop(ctx))
	}
	mu.Lock()
	defer mu.Unlock()
	assert.Equal(t, 1, most, "never two runs of the job at once")
	assert.GreaterOrEqual(t, started, 3, "later slots ran")
	assert.Equal(t, started, ended)
	assert.GreaterOrEqual(t, asked, 2, "runs were asked to end")
	hist, err := scheds[0].History(ctx, job, 0)
	require.NoError(t, err)
	cancelled := 0
	for _, r := range hist {
		if r.Status == scheduler.StatusCancelled {
			cancelled++
		}
	}
	assert.GreaterOrEqual(t, cancelled, 1, "a run asked to end ended cancelled: %+v", hist)
}
