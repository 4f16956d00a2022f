package sqlbackend_test

import (
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/anarchon/anarchon/backend"
	"github.com/anarchon/anarchon/backend/backendtest"
	"github.com/anarchon/anarchon/sqlbackend"
)

// A decision whose record cannot be written is not stored either: the state
// and the record are one transaction. A Settle refused so leaves the run its
// holder's, live; a claim that would decide the slot late stores nothing. Once
// records are written again, each ends with exactly one record.
func TestSettleStateAndRecordAreOneTransaction(t *testing.T) {
	t.Parallel()
	dialects(t, func(t *testing.T, open func(t *testing.T, opts ...sqlbackend.Option) *sqlbackend.Backend) {
		ctx := backendtest.Context(t)
		b := open(t)
		require.NoError(t, b.Init(ctx))
		refuse, allow := refuseResults(t, b)
		runs := b.Store()
		job := backendtest.JobName("one-tx")
		keep := backend.Retention{Size: 10}
		at := func(k int) time.Time { return time.UnixMilli(1_900_000_000_000 + int64(k)*1000).UTC() }
		claim := func(k int, token string, deadline time.Time) (backend.ClaimResult, error) {
			return runs.Claim(ctx, backend.RunClaim{Job: job, Slot: at(k), Token: token, Instance: "i-" + token[:4],
				Lease: time.Minute, Deadline: deadline, Retention: keep})
		}
		holder := backendtest.Token()
		res, err := claim(1, holder, time.Now().Add(time.Hour))
		require.NoError(t, err)
		require.Equal(t, backend.OutcomeWon, res.Outcome)
		settle := backend.Settlement{Key: backend.RunKey{Job: job, Slot: at(1), Token: holder}, Status: backend.StatusOK,
			StartedAt: time.Now(), FinishedAt: time.Now(), Retention: keep}

		refuse()
		require.Error(t, runs.Settle(ctx, settle), "the record is refused")
		active, err := runs.Active(ctx, job)
		require.NoError(t, err)
		require.Len(t, active, 1, "the run is not finished")
		assert.True(t, active[0].Live)
		assert.Equal(t, holder, active[0].Token)
		_, err = claim(2, backendtest.Token(), time.Now().Add(-time.Minute))
		require.Error(t, err, "the late decision's record is refused")

		allow()
		late := backendtest.Token()
		res, err = claim(2, late, time.Now().Add(-time.Minute))
		require.NoError(t, err)
		assert.Equal(t, backend.OutcomeLate, res.Outcome, "nothing was stored for the slot: this claim decides it")
		require.NoError(t, runs.Settle(ctx, settle))
		require.NoError(t, runs.Settle(ctx, settle), "a repeat")
		hist, err := b.History(ctx, job, 0)
		require.NoError(t, err)
		got := map[string]backend.Status{}
		for _, h := range hist {
			got[h.Token] = h.Status
		}
		assert.Equal(t, map[string]backend.Status{holder: backend.StatusOK, late: backend.StatusLate}, got)
		var n int
		require.NoError(t, b.DB().QueryRowContext(ctx, "SELECT COUNT(*) FROM "+b.TablePrefix()+"results").Scan(&n))
		assert.Equal(t, 2, n, "one record per attempt")
	})
}

// refuseResults returns functions that make every insert into b's results
// table fail (a trigger), and that let them through again.
func refuseResults(t *testing.T, b *sqlbackend.Backend) (refuse, allow func()) {
	t.Helper()
	ctx := backendtest.Context(t)
	p := b.TablePrefix()
	exec := func(q string) {
		t.Helper()
		_, err := b.DB().ExecContext(ctx, strings.ReplaceAll(q, "{p}", p))
		require.NoError(t, err, q)
	}
	if b.Name() == "sql/postgres" {
		exec(`CREATE FUNCTION {p}refuse() RETURNS trigger AS $$ BEGIN RAISE EXCEPTION 'records refused'; END $$ LANGUAGE plpgsql`)
		return func() {
				exec(`CREATE TRIGGER {p}refuse BEFORE INSERT ON {p}results FOR EACH ROW EXECUTE FUNCTION {p}refuse()`)
			}, func() {
				exec(`DROP TRIGGER {p}refuse ON {p}results`)
			}
	}
	return func() {
			exec(`CREATE TRIGGER {p}refuse BEFORE INSERT ON {p}results BEGIN SELECT RAISE(ABORT, 'records refused'); END`)
		}, func() {
			exec(`DROP TRIGGER {p}refuse`)
		}
}
