package sqlbackend_test

import (
	"context"
	"database/sql"
	"errors"
	"fmt"
	"net"
	"path/filepath"
	"sync"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/anarchon/anarchon/backend"
	"github.com/anarchon/anarchon/backend/backendtest"
	"github.com/anarchon/anarchon/sqlbackend"
)

// dialects runs fn for PostgreSQL and SQLite, each with backends on their own pools.
func dialects(t *testing.T, fn func(t *testing.T, open func(t *testing.T, opts ...sqlbackend.Option) *sqlbackend.Backend)) {
	t.Run("postgres", func(t *testing.T) {
		t.Parallel()
		p := prefix("st")
		fn(t, func(t *testing.T, opts ...sqlbackend.Option) *sqlbackend.Backend {
			return closeAtEnd(t, newPG(t, p, opts...))
		})
	})
	t.Run("sqlite", func(t *testing.T) {
		t.Parallel()
		path := sqliteFile(t)
		fn(t, func(t *testing.T, opts ...sqlbackend.Option) *sqlbackend.Backend {
			return closeAtEnd(t, newSQLite(t, path, opts...))
		})
	})
}

// The lease race with one pool per claimer, as separate processes: exactly one
// won per round, every other claimer running with the winner as holder, and the
// winner's claim repeated through another pool (its answer lost) wins again with
// the same fence.
func TestLeaseRaceAcrossPools(t *testing.T) {
	t.Parallel()
	dialects(t, func(t *testing.T, open func(t *testing.T, opts ...sqlbackend.Option) *sqlbackend.Backend) {
		const claimers, rounds = 8, 15
		ctx := backendtest.Context(t)
		stores := make([]backend.RunStore, claimers)
		for i := range stores {
			stores[i] = open(t).Runs()
		}
		job := backendtest.JobName("race")
		for round := range rounds {
			slot := time.UnixMilli(1_900_000_000_000 + int64(round)*1000)
			results := make([]backend.ClaimResult, claimers)
			claims := make([]backend.RunClaim, claimers)
			errs := make([]error, claimers)
			gate := make(chan struct{})
			var wg sync.WaitGroup
			for i := range claimers {
				claims[i] = backend.RunClaim{Job: job, Slot: slot, Token: backendtest.Token(), Instance: fmt.Sprint("i", i),
					Lease: time.Minute, Deadline: time.Now().Add(time.Hour)}
				wg.Go(func() {
					<-gate
					results[i], errs[i] = stores[i].Claim(ctx, claims[i])
				})
			}
			close(gate)
			wg.Wait()
			require.NoError(t, errors.Join(errs...))
			winner := -1
			for i, r := range results {
				if r.Outcome == backend.OutcomeWon {
					require.Equal(t, -1, winner, "round %d: two winners: %+v", round, results)
					winner = i
				} else {
					assert.Equal(t, backend.OutcomeRunning, r.Outcome, "round %d claimer %d", round, i)
				}
			}
			require.NotEqual(t, -1, winner, "round %d: no winner: %+v", round, results)
			again, err := stores[(winner+1)%claimers].Claim(ctx, claims[winner])
			require.NoError(t, err)
			assert.Equal(t, backend.OutcomeWon, again.Outcome, "round %d: the winner's claim repeated through another pool", round)
			assert.Equal(t, results[winner].Fence, again.Fence)
		}
	})
}

// A watch is woken by another replica's write: on PostgreSQL by NOTIFY (the watcher
// polls only once a minute here, so nothing else can wake it in time), on SQLite by
// polling.
func TestWatchSeesAnotherReplicasRelease(t *testing.T) {
	t.Parallel()
	dialects(t, func(t *testing.T, open func(t *testing.T, opts ...sqlbackend.Option) *sqlbackend.Backend) {
		ctx := backendtest.Context(t)
		watcher := open(t, sqlbackend.WithPollInterval(time.Minute)).Store()
		if t.Name() == "TestWatchSeesAnotherReplicasRelease/sqlite" {
			watcher = open(t, sqlbackend.WithPollInterval(50*time.Millisecond)).Store()
		}
		holder := open(t).Runs()
		job := backendtest.JobName("watch")
		slot := time.UnixMilli(1_900_000_000_000)
		token := backendtest.Token()
		res, err := holder.Claim(ctx, backend.RunClaim{Job: job, Slot: slot, Token: token, Instance: "h", Lease: time.Minute})
		require.NoError(t, err)
		require.Equal(t, backend.OutcomeWon, res.Outcome)
		ch, err := watcher.WatchRun(ctx, job, slot)
		require.NoError(t, err)
		select {
		case <-ch:
			t.Fatal("the watch of a live lease fired at once")
		default:
		}
		require.NoError(t, holder.Heartbeat(ctx, backend.RunKey{Job: job, Slot: slot, Token: token}, time.Minute))
		require.NoError(t, holder.Release(ctx, backend.RunKey{Job: job, Slot: slot, Token: token}))
		select {
		case <-ch:
		case <-time.After(10 * time.Second):
			t.Fatal("the watch did not see another replica's release")
		}
	})
}

// A database whose schema a newer version recorded is refused, clearly.
func TestSchemaTooNew(t *testing.T) {
	t.Parallel()
	dialects(t, func(t *testing.T, open func(t *testing.T, opts ...sqlbackend.Option) *sqlbackend.Backend) {
		ctx := backendtest.Context(t)
		b := open(t)
		require.NoError(t, b.Init(ctx))
		// The tables exist now; a newer version records its number.
		placeholder := "?"
		if b.Name() == "sql/postgres" {
			placeholder = "$1"
		}
		_, err := b.DB().ExecContext(ctx, "UPDATE "+b.TablePrefix()+"schema SET version = "+placeholder+" WHERE id = 1", sqlbackend.SchemaVersion+1)
		require.NoError(t, err)
		err = open(t).Init(ctx)
		require.ErrorIs(t, err, sqlbackend.ErrSchemaTooNew)
		assert.Contains(t, err.Error(), fmt.Sprint(sqlbackend.SchemaVersion+1))
	})
}

func TestInvalidConfig(t *testing.T) {
	t.Parallel()
	db := openPG(t)
	_, err := sqlbackend.New(nil, sqlbackend.Postgres)
	assert.ErrorIs(t, err, backend.ErrInvalidConfig)
	_, err = sqlbackend.New(db, sqlbackend.Dialect{Name: "half"})
	assert.ErrorIs(t, err, sqlbackend.ErrDialect)
	assert.ErrorContains(t, err, "NowMs")
	for name, opt := range map[string]sqlbackend.Option{
		"upper case prefix": sqlbackend.WithTablePrefix("Anarchon_"),
		"prefix with a dot": sqlbackend.WithTablePrefix("a.b_"),
		"empty prefix":      sqlbackend.WithTablePrefix(""),
		"poll too short":    sqlbackend.WithPollInterval(time.Millisecond),
		"claims kept a 1s":  sqlbackend.WithClaimRetention(time.Second),
		"zero call timeout": sqlbackend.WithCallTimeout(0),
	} {
		_, err := sqlbackend.New(db, sqlbackend.Postgres, opt)
		assert.ErrorIs(t, err, backend.ErrInvalidOption, name)
		assert.ErrorIs(t, err, sqlbackend.ErrInvalidOption, name)
	}
	_, err = sqlbackend.New(db, sqlbackend.Postgres, nil)
	assert.NoError(t, err, "a nil option is skipped")
	b, err := sqlbackend.New(db, sqlbackend.Postgres, sqlbackend.WithClaimRetention(time.Hour))
	require.NoError(t, err)
	assert.Equal(t, time.Hour, b.DedupeWindow())
	_, err = sqlbackend.OpenSQLite("")
	assert.Error(t, err)

	// SQLite without a busy timeout is refused at Init.
	bare, err := sql.Open("sqlite", "file:"+filepath.Join(t.TempDir(), "bare.db"))
	require.NoError(t, err)
	defer bare.Close()
	b, err = sqlbackend.New(bare, sqlbackend.SQLite)
	require.NoError(t, err)
	assert.ErrorContains(t, b.Init(t.Context()), "busy timeout")

	// The Postgres dialect on a database of another driver is refused at Init.
	other, err := sqlbackend.OpenSQLite(filepath.Join(t.TempDir(), "x.db"))
	require.NoError(t, err)
	defer other.Close()
	b, err = sqlbackend.New(other, sqlbackend.Postgres)
	require.NoError(t, err)
	err = b.Init(t.Context())
	assert.ErrorContains(t, err, "pgx driver")
}

// Init fails with a clear error, without hanging, when the server is unreachable.
func TestInitUnreachable(t *testing.T) {
	t.Parallel()
	db := openPGAt(t, "postgres://anarchon@127.0.0.1:1/postgres?sslmode=disable&connect_timeout=2")
	b, err := sqlbackend.New(db, sqlbackend.Postgres)
	require.NoError(t, err)
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
	defer cancel()
	err = b.Init(ctx)
	require.Error(t, err)
	assert.Contains(t, err.Error(), "sqlbackend: postgres")
}

// A call whose context has no deadline is bounded by the call timeout: a server
// that accepts the connection and never answers does not hang Init.
func TestCallTimeoutBoundsACallWithoutDeadline(t *testing.T) {
	t.Parallel()
	l, err := net.Listen("tcp", "127.0.0.1:0")
	require.NoError(t, err)
	var held []net.Conn
	var mu sync.Mutex
	go func() {
		for {
			c, err := l.Accept()
			if err != nil {
				return
			}
			mu.Lock()
			held = append(held, c) // accepted, never answered
			mu.Unlock()
		}
	}()
	t.Cleanup(func() {
		_ = l.Close()
		mu.Lock()
		defer mu.Unlock()
		for _, c := range held {
			_ = c.Close()
		}
	})
	db := openPGAt(t, fmt.Sprintf("postgres://anarchon@%s/postgres?sslmode=disable", l.Addr()))
	b, err := sqlbackend.New(db, sqlbackend.Postgres, sqlbackend.WithCallTimeout(500*time.Millisecond))
	require.NoError(t, err)
	done := make(chan error, 1)
	go func() { done <- b.Init(context.Background()) }()
	select {
	case err := <-done:
		require.Error(t, err)
		assert.ErrorIs(t, err, context.DeadlineExceeded)
	case <-time.After(30 * time.Second):
		t.Fatal("Init without a deadline hung on a server that never answers")
	}
}

// LastRuns reads the newest run, success and failure of several jobs in one query.
func TestLastRuns(t *testing.T) {
	t.Parallel()
	dialects(t, func(t *testing.T, open func(t *testing.T, opts ...sqlbackend.Option) *sqlbackend.Backend) {
		ctx := backendtest.Context(t)
		b := open(t)
		a, c, none := backendtest.JobName("last-a"), backendtest.JobName("last-c"), backendtest.JobName("last-none")
		base := time.UnixMilli(1_800_000_000_000).UTC()
		save := func(job string, k int, st backend.Status, manual bool) backend.ClaimInput {
			in := backend.ClaimInput{Job: job, Slot: base.Add(time.Duration(k) * time.Second), Token: backendtest.Token(),
				Instance: fmt.Sprint("i", k), Attempt: 1, At: base.Add(time.Duration(k) * time.Second), RequestedBy: "ops"}
			if manual {
				_, err := b.RecordManualRun(ctx, in)
				require.NoError(t, err)
			} else {
				won, err := b.Claim(ctx, in)
				require.NoError(t, err)
				require.True(t, won)
			}
			if st != "" {
				r := backend.StoredResult{
					Slot: in.Slot, Token: in.Token, Instance: in.Instance, Attempt: 1, Manual: manual, Status: st,
					StartedAt: in.Slot.Add(10 * time.Millisecond), FinishedAt: in.Slot.Add(time.Second), Error: string(st),
				}
				if st == backend.StatusSkipped { // recorded, never started
					r.StartedAt = time.Time{}
				}
				require.NoError(t, b.SaveResult(ctx, job, r, backend.Retention{Size: 10}))
			}
			return in
		}
		okA := save(a, 1, backend.StatusOK, false)
		failA := save(a, 2, backend.StatusError, false)
		save(a, 3, backend.StatusSkipped, false)
		save(a, 4, "", false) // running: no result yet
		manualC := save(c, 1, backend.StatusTimeout, true)

		got, err := b.LastRuns(ctx, []string{a, c, none})
		require.NoError(t, err)
		require.Len(t, got, 3)
		la := got[a]
		require.NotNil(t, la.Run)
		require.NotNil(t, la.Success)
		require.NotNil(t, la.Failure)
		assert.Equal(t, failA.Token, la.Run.Token, "the newest run that started (a skipped slot never started)")
		assert.Equal(t, okA.Token, la.Success.Token)
		assert.Equal(t, failA.Token, la.Failure.Token)
		assert.Equal(t, backend.StatusError, la.Failure.Status)
		assert.Equal(t, time.Second-10*time.Millisecond, la.Success.Duration)
		assert.True(t, la.Success.ClaimedAt.Equal(okA.At), "the claim's time comes with the record")
		lc := got[c]
		require.NotNil(t, lc.Failure)
		assert.Nil(t, lc.Success)
		assert.Equal(t, manualC.Token, lc.Failure.Token)
		assert.True(t, lc.Failure.Manual)
		assert.Equal(t, "ops", lc.Failure.RequestedBy)
		assert.Equal(t, backend.LastRuns{Job: none}, got[none])

		// The same as the history fallback would say.
		for _, job := range []string{a, c} {
			hist, err := b.History(ctx, job, backend.LastRunsDepth)
			require.NoError(t, err)
			want := backend.SummarizeRuns(job, hist)
			assert.Equal(t, want.Run.Token, got[job].Run.Token, job)
		}
	})
}

// Replicas starting together on an empty database all get their tables: none fails
// on another's CREATE TABLE.
func TestInitTogether(t *testing.T) {
	t.Parallel()
	dialects(t, func(t *testing.T, open func(t *testing.T, opts ...sqlbackend.Option) *sqlbackend.Backend) {
		ctx := backendtest.Context(t)
		const replicas = 8
		bs := make([]*sqlbackend.Backend, replicas)
		for i := range bs {
			bs[i] = open(t)
		}
		errs := make([]error, replicas)
		gate := make(chan struct{})
		var wg sync.WaitGroup
		for i, b := range bs {
			wg.Go(func() {
				<-gate
				errs[i] = b.Init(ctx)
			})
		}
		close(gate)
		wg.Wait()
		require.NoError(t, errors.Join(errs...))
		won, err := bs[0].Claim(ctx, backend.ClaimInput{Job: backendtest.JobName("init"), Slot: time.UnixMilli(1_800_000_000_000), Token: backendtest.Token(), Instance: "a"})
		require.NoError(t, err)
		assert.True(t, won)
	})
}

// WithClaimRetention forgets claims older than the retention: once a slot's claim is
// past it, the next SaveResult of the job deletes it, and the slot can be claimed
// again. Claims within the retention stay.
func TestClaimRetentionForgetsOldClaims(t *testing.T) {
	t.Parallel()
	dialects(t, func(t *testing.T, open func(t *testing.T, opts ...sqlbackend.Option) *sqlbackend.Backend) {
		ctx := backendtest.Context(t)
		b := open(t, sqlbackend.WithClaimRetention(time.Hour))
		job := backendtest.JobName("retention")
		old, recent := time.UnixMilli(1_800_000_000_000), time.UnixMilli(1_800_000_001_000)
		for _, slot := range []time.Time{old, recent} {
			won, err := b.Claim(ctx, backend.ClaimInput{Job: job, Slot: slot, Token: backendtest.Token(), Instance: "a"})
			require.NoError(t, err)
			require.True(t, won)
		}
		// The old slot was claimed two hours ago, by the database's clock.
		placeholder := func(n int) string {
			if b.Name() == "sql/postgres" {
				return fmt.Sprintf("$%d", n)
			}
			return "?"
		}
		_, err := b.DB().ExecContext(ctx, "UPDATE "+b.TablePrefix()+"claims SET created = created - 7200000 WHERE job = "+placeholder(1)+" AND slot = "+placeholder(2), job, old.UnixMilli())
		require.NoError(t, err)
		require.NoError(t, b.SaveResult(ctx, job, backend.StoredResult{Slot: recent, Token: "t", Status: backend.StatusOK}, backend.Retention{Size: 10}))
		won, err := b.Claim(ctx, backend.ClaimInput{Job: job, Slot: old, Token: backendtest.Token(), Instance: "b"})
		require.NoError(t, err)
		assert.True(t, won, "a claim past the retention is forgotten")
		won, err = b.Claim(ctx, backend.ClaimInput{Job: job, Slot: recent, Token: backendtest.Token(), Instance: "b"})
		require.NoError(t, err)
		assert.False(t, won, "a claim within the retention is remembered")
	})
}

// A holder's Finish that races a backup's takeover of its released lease: either the
// Finish stands and the backup is told done, or the backup took the run over and the
// Finish is refused as stale. Never both: a finished run taken over runs again.
func TestFinishRacesTakeover(t *testing.T) {
	t.Parallel()
	dialects(t, func(t *testing.T, open func(t *testing.T, opts ...sqlbackend.Option) *sqlbackend.Backend) {
		const rounds = 60
		ctx := backendtest.Context(t)
		holder, backup := open(t).Runs(), open(t).Runs()
		job := backendtest.JobName("finish-race")
		var finished, takenOver int
		for round := range rounds {
			slot := time.UnixMilli(1_900_000_000_000 + int64(round)*1000)
			claim := func(token, instance string) backend.RunClaim {
				return backend.RunClaim{Job: job, Slot: slot, Token: token, Instance: instance, Lease: time.Minute, Deadline: time.Now().Add(time.Hour)}
			}
			tok := backendtest.Token()
			res, err := holder.Claim(ctx, claim(tok, "holder"))
			require.NoError(t, err)
			require.Equal(t, backend.OutcomeWon, res.Outcome)
			key := backend.RunKey{Job: job, Slot: slot, Token: tok}
			require.NoError(t, holder.Release(ctx, key))
			var (
				finishErr error
				took      backend.ClaimResult
				claimErr  error
				wg        sync.WaitGroup
			)
			gate := make(chan struct{})
			wg.Go(func() { <-gate; finishErr = holder.Finish(ctx, key, backend.StatusOK) })
			wg.Go(func() { <-gate; took, claimErr = backup.Claim(ctx, claim(backendtest.Token(), "backup")) })
			close(gate)
			wg.Wait()
			require.NoError(t, claimErr)
			switch took.Outcome {
			case backend.OutcomeWon:
				takenOver++
				assert.ErrorIs(t, finishErr, backend.ErrStaleToken, "round %d: the run was taken over, yet its holder's Finish was accepted", round)
			case backend.OutcomeDone:
				finished++
				assert.NoError(t, finishErr, "round %d", round)
			default:
				t.Fatalf("round %d: backup's claim answered %s", round, took.Outcome)
			}
		}
		t.Logf("%d rounds: finished first %d, taken over first %d", rounds, finished, takenOver)
	})
}
