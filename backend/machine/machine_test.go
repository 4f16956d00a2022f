package machine

import (
	"errors"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/anarchon/anarchon/backend"
)

var t0 = time.Date(2026, 1, 2, 3, 0, 0, 0, time.UTC)

const lease = 10 * time.Second

// at is the slot i minutes after t0.
func at(i int) time.Time { return t0.Add(time.Duration(i) * time.Minute) }

// now is the store's clock in the rows: slot 10 plus a few seconds.
var now = at(10).Add(5 * time.Second)

func live(slot int, token string, attempt int) Run {
	return Run{Slot: at(slot), Phase: Running, Token: token, Instance: "i-" + token, Attempt: attempt,
		Fence: uint64(attempt * 10), Lease: lease, Expires: now.Add(lease / 2), Claimed: now.Add(-lease / 2)}
}

// ended is a running run whose lease ended at now - ago.
func ended(slot int, token string, attempt int, ago time.Duration) Run {
	r := live(slot, token, attempt)
	r.Expires = now.Add(-ago)
	return r
}

func retrying(slot int, token string, attempt int, from, to time.Duration) Run {
	r := ended(slot, token, attempt, time.Second)
	r.Phase, r.RetryAt, r.RetryBy, r.Recorded = Retrying, now.Add(from), now.Add(to), true
	return r
}

func buffered(slot int, token string) Run {
	return Run{Slot: at(slot), Phase: Buffered, Token: token, Instance: "i-" + token}
}

func finished(slot int, token string, attempt int, status backend.Status) Run {
	return Run{Slot: at(slot), Phase: Finished, Token: token, Instance: "i-" + token, Attempt: attempt,
		Status: status, Recorded: true, Changed: now.Add(-time.Second), Keep: time.Hour}
}

func pending(slot int) Run { return Run{Slot: at(slot)} }

// claimOf is the claim of slot 10 by token "c" with opts applied.
func claimOf(opts ...func(*backend.RunClaim)) backend.RunClaim {
	in := backend.RunClaim{Job: "job", Slot: at(10), Token: "c", Instance: "i-c", Lease: lease, Deadline: now.Add(time.Second)}
	for _, o := range opts {
		o(&in)
	}
	return in
}

func policy(p backend.OverlapPolicy) func(*backend.RunClaim) {
	return func(in *backend.RunClaim) { in.Overlap = p }
}

var (
	takeoverOnly = func(in *backend.RunClaim) { in.TakeoverOnly = true }
	pastDeadline = func(in *backend.RunClaim) { in.Deadline = now.Add(-time.Millisecond) }
	noDeadline   = func(in *backend.RunClaim) { in.Deadline = time.Time{} }
	paused       = func(in *backend.RunClaim) { in.PausedWhy = "job paused by ops: deploy" }
	excluded     = func(in *backend.RunClaim) { in.ExcludedWhy = `excluded by calendar "holidays" (2026-12-25)` }
	entryGone    = func(in *backend.RunClaim) { in.EntryGone = true }
	reopenPaused = func(in *backend.RunClaim) { in.ReopenPaused = true }
	backfill     = func(in *backend.RunClaim) { in.Backfill = true }
	manual       = func(in *backend.RunClaim) { in.Manual = true }
	missed       = func(in *backend.RunClaim) { in.Missed, in.Deadline = true, time.Unix(1, 0) }
)

func limit(n int) func(*backend.RunClaim) { return func(in *backend.RunClaim) { in.MaxRuns = n } }
func incarnation(n uint64) func(*backend.RunClaim) {
	return func(in *backend.RunClaim) { in.Incarnation = n }
}
func slots(n int) func(*backend.RunClaim) { return func(in *backend.RunClaim) { in.Concurrency = n } }
func bufferCap(n int) func(*backend.RunClaim) {
	return func(in *backend.RunClaim) { in.Overlap, in.BufferCap = backend.OverlapBufferAll, n }
}
func rerun(attempt int) func(*backend.RunClaim) {
	return func(in *backend.RunClaim) { in.Backfill, in.Rerun, in.RerunAttempt = true, true, attempt }
}

// want is what a row expects of a Claim.
type want struct {
	outcome backend.ClaimOutcome
	// phase, status and attempt of the slot after the claim, and its token.
	phase   Phase
	status  backend.Status
	attempt int
	token   string
	write   bool
	// records are the statuses of the records written, in order.
	records []backend.Status
	// counted: the count went up by one.
	counted bool
	// others: the slots of other runs changed (cancel requests stored).
	others []time.Time
	// waitsFor is the answer's WaitsFor.
	waitsFor time.Time
}

func TestClaim(t *testing.T) {
	withCancel := func(r Run) Run {
		r.Cancel = &backend.CancelRequest{Slot: at(11), Instance: "i-x", Token: "x"}
		return r
	}
	recorded := func(r Run) Run { r.Recorded = true; return r }
	inc := func(r Run, n uint64) Run { r.Incarnation = n; return r }
	man := func(r Run) Run { r.Manual = true; return r }
	last := func(r Run) Run { r.Last = true; return r }
	counted := func(r Run) Run { r.Counted = true; return r }

	rows := []struct {
		name   string
		cur    Run
		others []Run
		count  int
		in     backend.RunClaim
		want   want
	}{
		// A slot nothing was stored for.
		{name: "pending: won", cur: pending(10), in: claimOf(),
			want: want{outcome: backend.OutcomeWon, phase: Running, attempt: 1, token: "c", write: true}},
		{name: "pending: won and counted under a limit", cur: pending(10), count: 2, in: claimOf(limit(5)),
			want: want{outcome: backend.OutcomeWon, phase: Running, attempt: 1, token: "c", write: true, counted: true}},
		{name: "pending: no deadline is never late", cur: pending(10), in: claimOf(noDeadline),
			want: want{outcome: backend.OutcomeWon, phase: Running, attempt: 1, token: "c", write: true}},
		{name: "pending: takeover-only creates nothing", cur: pending(10), in: claimOf(takeoverOnly),
			want: want{outcome: backend.OutcomeNone}},
		{name: "pending: an entry seen removed creates nothing", cur: pending(10), in: claimOf(entryGone),
			want: want{outcome: backend.OutcomeNone}},
		{name: "pending: past its deadline, late", cur: pending(10), in: claimOf(pastDeadline, paused, limit(1)), count: 1,
			want: want{outcome: backend.OutcomeLate, phase: Finished, status: backend.StatusLate, attempt: 1, token: "c", write: true,
				records: []backend.Status{backend.StatusLate}}},
		{name: "pending: missed", cur: pending(10), in: claimOf(missed, limit(2)), count: 1,
			want: want{outcome: backend.OutcomeLate, phase: Finished, status: backend.StatusMissed, attempt: 1, token: "c", write: true,
				records: []backend.Status{backend.StatusMissed}}},
		{name: "pending: missed is missed before its deadline too", cur: pending(10), in: claimOf(missed, func(in *backend.RunClaim) { in.Deadline = now.Add(time.Hour) }),
			want: want{outcome: backend.OutcomeLate, phase: Finished, status: backend.StatusMissed, attempt: 1, token: "c", write: true,
				records: []backend.Status{backend.StatusMissed}}},
		{name: "pending: missed while paused, paused", cur: pending(10), in: claimOf(missed, paused),
			want: want{outcome: backend.OutcomePaused, phase: Finished, status: backend.StatusPaused, attempt: 1, token: "c", write: true,
				records: []backend.Status{backend.StatusPaused}}},
		{name: "pending: missed after the run limit, nothing stored", cur: pending(10), in: claimOf(missed, limit(2)), count: 2,
			want: want{outcome: backend.OutcomeNone}},
		{name: "running: a missed claim of a live run stands by", cur: live(10, "a", 1), in: claimOf(missed),
			want: want{outcome: backend.OutcomeRunning, phase: Running, attempt: 1, token: "a"}},
		{name: "finished: a missed claim of a slot that ran is told done", cur: finished(10, "a", 1, backend.StatusOK), in: claimOf(missed),
			want: want{outcome: backend.OutcomeDone, phase: Finished, status: backend.StatusOK, attempt: 1, token: "a"}},
		{name: "finished missed: its decider is told late again", cur: finished(10, "c", 1, backend.StatusMissed), in: claimOf(missed),
			want: want{outcome: backend.OutcomeLate, phase: Finished, status: backend.StatusMissed, attempt: 1, token: "c"}},
		{name: "finished missed: backfill reopens it", cur: finished(10, "a", 1, backend.StatusMissed), in: claimOf(backfill),
			want: want{outcome: backend.OutcomeWon, phase: Running, attempt: 2, token: "c", write: true}},
		{name: "pending: paused", cur: pending(10), in: claimOf(paused, limit(1)), count: 1,
			want: want{outcome: backend.OutcomePaused, phase: Finished, status: backend.StatusPaused, attempt: 1, token: "c", write: true,
				records: []backend.Status{backend.StatusPaused}}},
		{name: "pending: excluded, before missed, late, paused and the limit", cur: pending(10), count: 3,
			in: claimOf(excluded, missed, paused, limit(3), policy(backend.OverlapSkip)), others: []Run{live(9, "a", 1)},
			want: want{outcome: backend.OutcomeExcluded, phase: Finished, status: backend.StatusExcluded, attempt: 1, token: "c", write: true,
				records: []backend.Status{backend.StatusExcluded}}},
		{name: "pending: excluded, cancel-other asks no earlier run to end", cur: pending(10),
			in: claimOf(excluded, policy(backend.OverlapCancelOther)), others: []Run{live(8, "a", 1), live(9, "b", 1)},
			want: want{outcome: backend.OutcomeExcluded, phase: Finished, status: backend.StatusExcluded, attempt: 1, token: "c", write: true,
				records: []backend.Status{backend.StatusExcluded}}},
		{name: "pending: excluded, buffer-all takes no place in the buffer, counts no run", cur: pending(10), count: 1,
			in: claimOf(excluded, bufferCap(1), limit(2)), others: []Run{live(8, "a", 1)},
			want: want{outcome: backend.OutcomeExcluded, phase: Finished, status: backend.StatusExcluded, attempt: 1, token: "c", write: true,
				records: []backend.Status{backend.StatusExcluded}}},
		{name: "retrying: the retry of a slot claimed before a calendar held its day goes on", cur: retrying(10, "a", 1, -time.Second, time.Minute),
			in:   claimOf(excluded),
			want: want{outcome: backend.OutcomeWon, phase: Running, attempt: 2, token: "c", write: true}},
		{name: "pending: excluded past its deadline", cur: pending(10), in: claimOf(excluded, pastDeadline),
			want: want{outcome: backend.OutcomeExcluded, phase: Finished, status: backend.StatusExcluded, attempt: 1, token: "c", write: true,
				records: []backend.Status{backend.StatusExcluded}}},
		{name: "pending: a takeover-only claim creates nothing, excluded or not", cur: pending(10), in: claimOf(excluded, takeoverOnly),
			want: want{outcome: backend.OutcomeNone}},
		{name: "running: a lease ended is taken over, whatever a calendar says now", cur: ended(10, "a", 1, time.Second), in: claimOf(excluded),
			want: want{outcome: backend.OutcomeWon, phase: Running, attempt: 2, token: "c", write: true, records: []backend.Status{backend.StatusLost}}},
		{name: "buffered: a calendar does not end a buffered slot", cur: buffered(10, "b"), in: claimOf(policy(backend.OverlapBufferOne), excluded),
			want: want{outcome: backend.OutcomeWon, phase: Running, attempt: 1, token: "c", write: true}},
		{name: "finished excluded: its decider is told excluded again", cur: finished(10, "c", 1, backend.StatusExcluded), in: claimOf(excluded),
			want: want{outcome: backend.OutcomeExcluded, phase: Finished, status: backend.StatusExcluded, attempt: 1, token: "c"}},
		{name: "finished excluded: others are told done", cur: finished(10, "a", 1, backend.StatusExcluded), in: claimOf(),
			want: want{outcome: backend.OutcomeDone, phase: Finished, status: backend.StatusExcluded, attempt: 1, token: "a"}},
		{name: "finished excluded: never reopened, by catch-up, backfill or rerun", cur: finished(10, "a", 1, backend.StatusExcluded), in: claimOf(backfill, reopenPaused, rerun(1)),
			want: want{outcome: backend.OutcomeDone, phase: Finished, status: backend.StatusExcluded, attempt: 1, token: "a"}},
		{name: "pending: the run limit reached", cur: pending(10), count: 3, in: claimOf(limit(3)),
			want: want{outcome: backend.OutcomeLimit, phase: Finished, status: backend.StatusLimit, attempt: 1, token: "c", write: true,
				records: []backend.Status{backend.StatusLimit}}},
		{name: "pending: a backfill is never refused by the limit nor counted", cur: pending(10), count: 3, in: claimOf(limit(3), backfill),
			want: want{outcome: backend.OutcomeWon, phase: Running, attempt: 1, token: "c", write: true}},
		{name: "pending: allow ignores other slots", cur: pending(10), others: []Run{live(9, "a", 1)}, in: claimOf(),
			want: want{outcome: backend.OutcomeWon, phase: Running, attempt: 1, token: "c", write: true}},

		// OverlapSkip.
		{name: "skip: another slot live", cur: pending(10), others: []Run{live(9, "a", 1)}, in: claimOf(policy(backend.OverlapSkip), limit(5)),
			want: want{outcome: backend.OutcomeOverlap, phase: Finished, status: backend.StatusSkipped, attempt: 1, token: "c", write: true,
				records: []backend.Status{backend.StatusSkipped}}},
		{name: "skip: a later slot live", cur: pending(10), others: []Run{live(11, "a", 1)}, in: claimOf(policy(backend.OverlapSkip)),
			want: want{outcome: backend.OutcomeOverlap, phase: Finished, status: backend.StatusSkipped, attempt: 1, token: "c", write: true,
				records: []backend.Status{backend.StatusSkipped}}},
		{name: "skip: a lease ended less than a lease ago still holds the job", cur: pending(10),
			others: []Run{ended(9, "a", 1, lease/2)}, in: claimOf(policy(backend.OverlapSkip)),
			want: want{outcome: backend.OutcomeOverlap, phase: Finished, status: backend.StatusSkipped, attempt: 1, token: "c", write: true,
				records: []backend.Status{backend.StatusSkipped}}},
		{name: "skip: a lease ended more than a lease ago does not", cur: pending(10),
			others: []Run{ended(9, "a", 1, 2*lease)}, in: claimOf(policy(backend.OverlapSkip)),
			want: want{outcome: backend.OutcomeWon, phase: Running, attempt: 1, token: "c", write: true}},
		{name: "skip: a pending retry holds the job", cur: pending(10),
			others: []Run{retrying(9, "a", 1, time.Second, 5*time.Second)}, in: claimOf(policy(backend.OverlapSkip)),
			want: want{outcome: backend.OutcomeOverlap, phase: Finished, status: backend.StatusSkipped, attempt: 1, token: "c", write: true,
				records: []backend.Status{backend.StatusSkipped}}},
		{name: "skip: a finished slot does not", cur: pending(10),
			others: []Run{finished(9, "a", 1, backend.StatusOK)}, in: claimOf(policy(backend.OverlapSkip)),
			want: want{outcome: backend.OutcomeWon, phase: Running, attempt: 1, token: "c", write: true}},

		// Concurrency: a few slots at once under skip and the buffer policies.
		{name: "skip, 2 at once: one other slot busy runs", cur: pending(10), others: []Run{live(9, "a", 1)},
			in:   claimOf(policy(backend.OverlapSkip), slots(2)),
			want: want{outcome: backend.OutcomeWon, phase: Running, attempt: 1, token: "c", write: true}},
		{name: "skip, 2 at once: two other slots busy skips", cur: pending(10), others: []Run{live(8, "a", 1), retrying(9, "b", 1, time.Second, 5*time.Second)},
			in: claimOf(policy(backend.OverlapSkip), slots(2)),
			want: want{outcome: backend.OutcomeOverlap, phase: Finished, status: backend.StatusSkipped, attempt: 1, token: "c", write: true,
				records: []backend.Status{backend.StatusSkipped}}},
		{name: "allow ignores Concurrency", cur: pending(10), others: []Run{live(8, "a", 1), live(9, "b", 1)}, in: claimOf(slots(1)),
			want: want{outcome: backend.OutcomeWon, phase: Running, attempt: 1, token: "c", write: true}},
		{name: "cancel-other ignores Concurrency", cur: pending(10), others: []Run{live(9, "a", 1)},
			in:   claimOf(policy(backend.OverlapCancelOther), slots(3)),
			want: want{outcome: backend.OutcomeRunning, phase: Pending, others: []time.Time{at(9)}, waitsFor: at(9)}},
		{name: "buffer-one, 2 at once: one other slot busy runs", cur: pending(10), others: []Run{live(9, "a", 1)},
			in:   claimOf(policy(backend.OverlapBufferOne), slots(2)),
			want: want{outcome: backend.OutcomeWon, phase: Running, attempt: 1, token: "c", write: true}},
		{name: "buffer-all, 2 at once: two busy buffers, waiting for the oldest", cur: pending(10), others: []Run{live(8, "a", 1), live(9, "b", 1)},
			in:   claimOf(bufferCap(3), slots(2)),
			want: want{outcome: backend.OutcomeBuffered, phase: Buffered, token: "c", write: true, waitsFor: at(8)}},
		{name: "buffer-all, 2 at once: one busy and an earlier slot buffered waits its turn", cur: pending(10), others: []Run{live(8, "a", 1), buffered(9, "b")},
			in:   claimOf(bufferCap(3), slots(2)),
			want: want{outcome: backend.OutcomeBuffered, phase: Buffered, token: "c", write: true, waitsFor: at(9)}},
		{name: "buffered, 2 at once: one other busy, none buffered before: runs", cur: buffered(10, "b"), others: []Run{live(9, "a", 1), buffered(11, "e")},
			in:   claimOf(bufferCap(3), slots(2)),
			want: want{outcome: backend.OutcomeWon, phase: Running, attempt: 1, token: "c", write: true}},
		{name: "buffered, 2 at once: two busy waits for the oldest", cur: buffered(10, "b"), others: []Run{live(8, "a", 1), live(9, "d", 1)},
			in:   claimOf(bufferCap(3), slots(2)),
			want: want{outcome: backend.OutcomeBuffered, phase: Buffered, token: "b", waitsFor: at(8)}},
		{name: "running, 2 at once: one other slot live: taken over", cur: ended(10, "a", 1, time.Second), others: []Run{live(11, "b", 1)},
			in: claimOf(policy(backend.OverlapSkip), slots(2)),
			want: want{outcome: backend.OutcomeWon, phase: Running, attempt: 2, token: "c", write: true,
				records: []backend.Status{backend.StatusLost}}},
		{name: "running, 2 at once: two other slots live: waits", cur: ended(10, "a", 1, time.Second), others: []Run{live(11, "b", 1), live(9, "d", 1)},
			in:   claimOf(policy(backend.OverlapSkip), slots(2)),
			want: want{outcome: backend.OutcomeRunning, phase: Running, attempt: 1, token: "a"}},
		{name: "retrying, 2 at once: one other slot live: the retry runs", cur: retrying(10, "a", 1, -time.Second, time.Second),
			others: []Run{live(11, "b", 1)}, in: claimOf(policy(backend.OverlapBufferOne), slots(2)),
			want: want{outcome: backend.OutcomeWon, phase: Running, attempt: 2, token: "c", write: true}},

		// OverlapCancelOther.
		{name: "cancel-other: a later slot busy skips", cur: pending(10), others: []Run{live(11, "a", 1)},
			in: claimOf(policy(backend.OverlapCancelOther)),
			want: want{outcome: backend.OutcomeOverlap, phase: Finished, status: backend.StatusSkipped, attempt: 1, token: "c", write: true,
				records: []backend.Status{backend.StatusSkipped}}},
		{name: "cancel-other: earlier slots busy are asked to end", cur: pending(10),
			others: []Run{live(8, "a", 1), ended(9, "b", 1, lease/2), ended(7, "d", 1, 2*lease)},
			in:     claimOf(policy(backend.OverlapCancelOther)),
			want:   want{outcome: backend.OutcomeRunning, phase: Pending, others: []time.Time{at(8), at(9)}, waitsFor: at(9)}},
		{name: "cancel-other: a request stored already is kept", cur: pending(10),
			others: []Run{withCancel(live(9, "a", 1))}, in: claimOf(policy(backend.OverlapCancelOther)),
			want: want{outcome: backend.OutcomeRunning, phase: Pending, waitsFor: at(9)}},

		// The buffer policies.
		{name: "buffer-one: another slot busy buffers", cur: pending(10), others: []Run{live(9, "a", 1)},
			in:   claimOf(policy(backend.OverlapBufferOne), limit(5)),
			want: want{outcome: backend.OutcomeBuffered, phase: Buffered, token: "c", write: true, counted: true, waitsFor: at(9)}},
		{name: "buffer-one: one buffered already skips", cur: pending(10), others: []Run{live(8, "a", 1), buffered(9, "b")},
			in: claimOf(policy(backend.OverlapBufferOne)),
			want: want{outcome: backend.OutcomeOverlap, phase: Finished, status: backend.StatusSkipped, attempt: 1, token: "c", write: true,
				records: []backend.Status{backend.StatusSkipped}}},
		{name: "buffer-all: the cap reached skips", cur: pending(10), others: []Run{live(7, "a", 1), buffered(8, "b"), buffered(9, "d")},
			in: claimOf(bufferCap(2)),
			want: want{outcome: backend.OutcomeOverlap, phase: Finished, status: backend.StatusSkipped, attempt: 1, token: "c", write: true,
				records: []backend.Status{backend.StatusSkipped}}},
		{name: "buffer-all: under the cap waits for the oldest buffered", cur: pending(10), others: []Run{buffered(8, "b"), buffered(9, "d")},
			in:   claimOf(bufferCap(3)),
			want: want{outcome: backend.OutcomeBuffered, phase: Buffered, token: "c", write: true, waitsFor: at(8)}},
		{name: "buffer-all: only later slots buffered goes first", cur: pending(10), others: []Run{buffered(11, "b")},
			in:   claimOf(bufferCap(3), limit(5)),
			want: want{outcome: backend.OutcomeWon, phase: Running, attempt: 1, token: "c", write: true, counted: true}},
		{name: "buffer: nothing else held wins", cur: pending(10), others: []Run{finished(9, "a", 1, backend.StatusOK)},
			in:   claimOf(policy(backend.OverlapBufferOne)),
			want: want{outcome: backend.OutcomeWon, phase: Running, attempt: 1, token: "c", write: true}},

		// A buffered slot.
		{name: "buffered: waits for the busy slot", cur: buffered(10, "b"), others: []Run{live(9, "a", 1)},
			in:   claimOf(policy(backend.OverlapBufferOne)),
			want: want{outcome: backend.OutcomeBuffered, phase: Buffered, token: "b", waitsFor: at(9)}},
		{name: "buffered: waits for an earlier buffered one", cur: buffered(10, "b"), others: []Run{buffered(9, "d"), buffered(11, "e")},
			in:   claimOf(bufferCap(5)),
			want: want{outcome: backend.OutcomeBuffered, phase: Buffered, token: "b", waitsFor: at(9)}},
		{name: "buffered: taken once nothing holds the job, past its deadline too", cur: last(buffered(10, "b")),
			others: []Run{buffered(11, "e")}, in: claimOf(bufferCap(5), pastDeadline, takeoverOnly),
			want: want{outcome: backend.OutcomeWon, phase: Running, attempt: 1, token: "c", write: true}},
		{name: "buffered: a manual slot waits for its own RunNow", cur: man(buffered(10, "b")), in: claimOf(policy(backend.OverlapBufferOne)),
			want: want{outcome: backend.OutcomeBuffered, phase: Buffered, token: "b", waitsFor: at(10)}},
		{name: "buffered: a manual slot waits for its own RunNow, another slot busy too", cur: man(buffered(10, "b")),
			others: []Run{live(9, "a", 1)}, in: claimOf(policy(backend.OverlapBufferOne)),
			want: want{outcome: backend.OutcomeBuffered, phase: Buffered, token: "b", waitsFor: at(10)}},
		{name: "buffered: a manual slot adopted waits while another slot is busy", cur: man(buffered(10, "b")),
			others: []Run{live(9, "a", 1)}, in: claimOf(policy(backend.OverlapBufferOne), takeoverOnly),
			want: want{outcome: backend.OutcomeBuffered, phase: Buffered, token: "b", waitsFor: at(9)}},
		{name: "buffered: a manual slot taken by its own RunNow", cur: man(buffered(10, "c")), in: claimOf(policy(backend.OverlapBufferOne)),
			want: want{outcome: backend.OutcomeWon, phase: Running, attempt: 1, token: "c", write: true}},
		{name: "buffered: a manual slot adopted is ended lost", cur: man(buffered(10, "b")), in: claimOf(policy(backend.OverlapBufferOne), takeoverOnly),
			want: want{outcome: backend.OutcomeDone, phase: Finished, status: backend.StatusLost, token: "b", write: true,
				records: []backend.Status{backend.StatusLost}}},
		{name: "buffered: a paused job holds it buffered", cur: buffered(10, "b"), in: claimOf(policy(backend.OverlapBufferOne), paused),
			want: want{outcome: backend.OutcomeBuffered, phase: Buffered, token: "b"}},
		{name: "buffered: of a removed entry, cancelled", cur: inc(buffered(10, "b"), 7), in: claimOf(policy(backend.OverlapBufferOne), incarnation(8)),
			want: want{outcome: backend.OutcomeDone, phase: Finished, status: backend.StatusCancelled, token: "b", write: true,
				records: []backend.Status{backend.StatusCancelled}}},

		// A running run.
		{name: "running: its own token repeats", cur: live(10, "c", 1), in: claimOf(),
			want: want{outcome: backend.OutcomeWon, phase: Running, attempt: 1, token: "c"}},
		{name: "running: another token stands by", cur: live(10, "a", 1), in: claimOf(),
			want: want{outcome: backend.OutcomeRunning, phase: Running, attempt: 1, token: "a"}},
		{name: "running: its own token whose lease ended is not given it again", cur: ended(10, "c", 1, time.Second), in: claimOf(),
			want: want{outcome: backend.OutcomeRunning, phase: Running, attempt: 1, token: "c"}},
		{name: "running: lease ended, taken over", cur: ended(10, "a", 1, time.Second), in: claimOf(takeoverOnly, pastDeadline),
			want: want{outcome: backend.OutcomeWon, phase: Running, attempt: 2, token: "c", write: true,
				records: []backend.Status{backend.StatusLost}}},
		{name: "running: handed over, taken over without a lost record", cur: recorded(ended(10, "a", 1, time.Second)), in: claimOf(),
			want: want{outcome: backend.OutcomeWon, phase: Running, attempt: 2, token: "c", write: true}},
		{name: "running: asked to end, its lease ended", cur: withCancel(ended(10, "a", 1, time.Second)), in: claimOf(),
			want: want{outcome: backend.OutcomeDone, phase: Finished, status: backend.StatusCancelled, attempt: 1, token: "a", write: true,
				records: []backend.Status{backend.StatusCancelled}}},
		{name: "running: a manual run's lease ended", cur: man(ended(10, "a", 1, time.Second)), in: claimOf(takeoverOnly),
			want: want{outcome: backend.OutcomeDone, phase: Finished, status: backend.StatusLost, attempt: 1, token: "a", write: true,
				records: []backend.Status{backend.StatusLost}}},
		{name: "running: of another incarnation of the entry", cur: inc(ended(10, "a", 1, time.Second), 7), in: claimOf(incarnation(8)),
			want: want{outcome: backend.OutcomeDone, phase: Finished, status: backend.StatusCancelled, attempt: 1, token: "a", write: true,
				records: []backend.Status{backend.StatusCancelled}}},
		{name: "running: of an entry seen removed", cur: inc(ended(10, "a", 1, time.Second), 7), in: claimOf(entryGone, takeoverOnly),
			want: want{outcome: backend.OutcomeDone, phase: Finished, status: backend.StatusCancelled, attempt: 1, token: "a", write: true,
				records: []backend.Status{backend.StatusCancelled}}},
		{name: "running: of another incarnation, live, waits", cur: inc(live(10, "a", 1), 7), in: claimOf(incarnation(8)),
			want: want{outcome: backend.OutcomeRunning, phase: Running, attempt: 1, token: "a"}},
		{name: "running: lease ended while paused: the takeover is paused", cur: ended(10, "a", 1, time.Second), in: claimOf(paused),
			want: want{outcome: backend.OutcomePaused, phase: Finished, status: backend.StatusPaused, attempt: 2, token: "c", write: true,
				records: []backend.Status{backend.StatusLost, backend.StatusPaused}}},
		{name: "running: one at a time, another slot live: waits", cur: ended(10, "a", 1, time.Second), others: []Run{live(11, "b", 1)},
			in:   claimOf(policy(backend.OverlapSkip)),
			want: want{outcome: backend.OutcomeRunning, phase: Running, attempt: 1, token: "a"}},
		{name: "running: one at a time, another slot's lease ended: taken over", cur: ended(10, "a", 1, time.Second),
			others: []Run{ended(11, "b", 1, time.Second)}, in: claimOf(policy(backend.OverlapBufferOne)),
			want: want{outcome: backend.OutcomeWon, phase: Running, attempt: 2, token: "c", write: true,
				records: []backend.Status{backend.StatusLost}}},

		// A stored retry.
		{name: "retrying: the failed token never takes it", cur: retrying(10, "c", 1, -time.Second, time.Second), in: claimOf(),
			want: want{outcome: backend.OutcomeDone, phase: Retrying, attempt: 1, token: "c"}},
		{name: "retrying: before its window", cur: retrying(10, "a", 1, time.Second, 2*time.Second), in: claimOf(),
			want: want{outcome: backend.OutcomeRetry, phase: Retrying, attempt: 1, token: "a"}},
		{name: "retrying: after its window, the failure stands", cur: retrying(10, "a", 1, -2*time.Second, -time.Second), in: claimOf(),
			want: want{outcome: backend.OutcomeDone, phase: Finished, status: backend.StatusError, attempt: 1, token: "a", write: true}},
		{name: "retrying: in its window, retried", cur: retrying(10, "a", 1, -time.Second, time.Second), in: claimOf(takeoverOnly, pastDeadline),
			want: want{outcome: backend.OutcomeWon, phase: Running, attempt: 2, token: "c", write: true}},
		{name: "retrying: asked to end", cur: withCancel(retrying(10, "a", 1, -time.Second, time.Second)), in: claimOf(),
			want: want{outcome: backend.OutcomeDone, phase: Finished, status: backend.StatusCancelled, attempt: 1, token: "a", write: true}},
		{name: "retrying: asked to end before its retry is due", cur: withCancel(retrying(10, "a", 1, time.Second, 2*time.Second)), in: claimOf(),
			want: want{outcome: backend.OutcomeDone, phase: Finished, status: backend.StatusCancelled, attempt: 1, token: "a", write: true}},
		{name: "retrying: paused", cur: retrying(10, "a", 1, -time.Second, time.Second), in: claimOf(paused),
			want: want{outcome: backend.OutcomePaused, phase: Finished, status: backend.StatusPaused, attempt: 2, token: "c", write: true,
				records: []backend.Status{backend.StatusPaused}}},
		{name: "retrying: one at a time, another slot live", cur: retrying(10, "a", 1, -time.Second, time.Second),
			others: []Run{live(11, "b", 1)}, in: claimOf(policy(backend.OverlapCancelOther)),
			want: want{outcome: backend.OutcomeRunning, phase: Retrying, attempt: 1, token: "a"}},
		{name: "retrying: of a removed entry", cur: inc(retrying(10, "a", 1, -time.Second, time.Second), 7), in: claimOf(entryGone),
			want: want{outcome: backend.OutcomeDone, phase: Finished, status: backend.StatusCancelled, attempt: 1, token: "a", write: true}},

		// A finished run.
		{name: "finished: done", cur: finished(10, "a", 1, backend.StatusOK), in: claimOf(),
			want: want{outcome: backend.OutcomeDone, phase: Finished, status: backend.StatusOK, attempt: 1, token: "a"}},
		{name: "finished: the late decider told again", cur: finished(10, "c", 1, backend.StatusLate), in: claimOf(),
			want: want{outcome: backend.OutcomeLate, phase: Finished, status: backend.StatusLate, attempt: 1, token: "c"}},
		{name: "finished: the skip decider told again", cur: finished(10, "c", 1, backend.StatusSkipped), in: claimOf(),
			want: want{outcome: backend.OutcomeOverlap, phase: Finished, status: backend.StatusSkipped, attempt: 1, token: "c"}},
		{name: "finished: the limit decider told again", cur: finished(10, "c", 1, backend.StatusLimit), in: claimOf(),
			want: want{outcome: backend.OutcomeLimit, phase: Finished, status: backend.StatusLimit, attempt: 1, token: "c"}},
		{name: "finished: the pause decider told again", cur: finished(10, "c", 1, backend.StatusPaused), in: claimOf(reopenPaused),
			want: want{outcome: backend.OutcomePaused, phase: Finished, status: backend.StatusPaused, attempt: 1, token: "c"}},
		{name: "finished: a paused slot reopened by catch-up", cur: finished(10, "a", 1, backend.StatusPaused), in: claimOf(reopenPaused),
			want: want{outcome: backend.OutcomeWon, phase: Running, attempt: 2, token: "c", write: true}},
		{name: "finished: a paused slot past the catch-up deadline", cur: finished(10, "a", 1, backend.StatusPaused), in: claimOf(reopenPaused, pastDeadline),
			want: want{outcome: backend.OutcomeDone, phase: Finished, status: backend.StatusPaused, attempt: 1, token: "a"}},
		{name: "finished: a paused slot reopened counts", cur: finished(10, "a", 1, backend.StatusPaused), count: 1, in: claimOf(reopenPaused, limit(2)),
			want: want{outcome: backend.OutcomeWon, phase: Running, attempt: 2, token: "c", write: true, counted: true}},
		{name: "finished: a paused slot is not reopened past the limit", cur: finished(10, "a", 1, backend.StatusPaused), count: 2,
			in:   claimOf(reopenPaused, limit(2)),
			want: want{outcome: backend.OutcomeDone, phase: Finished, status: backend.StatusPaused, attempt: 1, token: "a"}},
		{name: "finished: late reopened by a backfill", cur: finished(10, "a", 1, backend.StatusLate), in: claimOf(backfill),
			want: want{outcome: backend.OutcomeWon, phase: Running, attempt: 2, token: "c", write: true}},
		{name: "finished: ok is not reopened by a backfill", cur: finished(10, "a", 1, backend.StatusOK), in: claimOf(backfill),
			want: want{outcome: backend.OutcomeDone, phase: Finished, status: backend.StatusOK, attempt: 1, token: "a"}},
		{name: "finished: a rerun of the attempt read", cur: finished(10, "a", 2, backend.StatusOK), in: claimOf(rerun(2)),
			want: want{outcome: backend.OutcomeWon, phase: Running, attempt: 3, token: "c", write: true}},
		{name: "finished: a rerun of an older attempt", cur: finished(10, "a", 2, backend.StatusOK), in: claimOf(rerun(1)),
			want: want{outcome: backend.OutcomeDone, phase: Finished, status: backend.StatusOK, attempt: 2, token: "a"}},
		{name: "finished: a backfill while paused is paused", cur: finished(10, "a", 1, backend.StatusSkipped), in: claimOf(backfill, paused),
			want: want{outcome: backend.OutcomePaused, phase: Finished, status: backend.StatusPaused, attempt: 2, token: "c", write: true,
				records: []backend.Status{backend.StatusPaused}}},
		{name: "finished: reopened one at a time, another slot live: waits", cur: finished(10, "a", 1, backend.StatusPaused),
			others: []Run{live(11, "b", 1)}, in: claimOf(reopenPaused, policy(backend.OverlapSkip)),
			want: want{outcome: backend.OutcomeRunning, phase: Finished, status: backend.StatusPaused, attempt: 1, token: "a"}},
		{name: "finished: of a removed entry, never reopened", cur: inc(finished(10, "a", 1, backend.StatusLate), 7), in: claimOf(backfill, incarnation(8)),
			want: want{outcome: backend.OutcomeDone, phase: Finished, status: backend.StatusLate, attempt: 1, token: "a"}},
		{name: "finished: a paused slot counted when won is reopened past the limit, not counted again",
			cur: counted(finished(10, "a", 1, backend.StatusPaused)), count: 2, in: claimOf(reopenPaused, limit(2)),
			want: want{outcome: backend.OutcomeWon, phase: Running, attempt: 2, token: "c", write: true}},
	}
	for _, row := range rows {
		t.Run(row.name, func(t *testing.T) {
			d := Claim(row.cur, row.in, Job{Others: row.others, Count: row.count, Fence: 100}, now)
			w := row.want
			assert.Equal(t, w.outcome, d.Result.Outcome, "outcome")
			assert.Equal(t, w.phase, d.Run.Phase, "phase")
			assert.Equal(t, w.status, d.Run.Status, "status")
			assert.Equal(t, w.attempt, d.Run.Attempt, "attempt")
			if w.phase != Pending {
				assert.Equal(t, w.token, d.Run.Token, "token")
			}
			assert.Equal(t, w.write, d.Write, "write")
			var recs []backend.Status
			for _, r := range d.Records {
				recs = append(recs, r.Status)
				assert.Equal(t, at(10), r.Slot, "record slot")
			}
			assert.Equal(t, w.records, recs, "records")
			assert.Equal(t, w.counted, d.Counted, "counted")
			if w.counted {
				assert.Equal(t, row.count+1, d.Count)
			} else {
				assert.Equal(t, row.count, d.Count)
			}
			var others []time.Time
			for _, o := range d.Others {
				others = append(others, o.Slot)
				require.NotNil(t, o.Cancel)
				assert.Equal(t, at(10), o.Cancel.Slot, "the request names the asking slot")
			}
			assert.ElementsMatch(t, w.others, others, "others changed")
			assert.Equal(t, w.waitsFor, d.Result.WaitsFor, "waits for")
			if w.write {
				assert.Equal(t, now, d.Run.Changed, "a write is stamped")
			}
			if d.Result.Outcome == backend.OutcomeWon && d.Write {
				assert.Greater(t, d.Run.Fence, row.cur.Fence, "a new holder's fence grows")
				assert.GreaterOrEqual(t, d.Run.Fence, uint64(100), "and is at least the store's next")
				assert.Equal(t, now.Add(lease), d.Run.Expires, "its lease runs from now")
				assert.Equal(t, now, d.Run.Claimed)
				assert.False(t, d.Run.Recorded, "a new attempt has no record yet")
			}
			if d.Run.Phase == Finished && d.Write {
				assert.True(t, d.Run.Recorded, "a finished run's last attempt is recorded")
			}
		})
	}
}

func TestClaimAnswers(t *testing.T) {
	t.Run("a takeover names the attempt it took over", func(t *testing.T) {
		d := Claim(ended(10, "a", 2, time.Second), claimOf(), Job{}, now)
		assert.Equal(t, "i-a", d.Result.Previous)
		assert.Equal(t, "a", d.Result.PreviousToken)
		assert.Equal(t, 2, d.Result.PreviousAttempt)
		require.Len(t, d.Records, 1)
		r := d.Records[0]
		assert.Equal(t, "a", r.Token)
		assert.Equal(t, 2, r.Attempt)
		assert.Equal(t, uint64(20), r.Fence)
		assert.Contains(t, r.Error, "taken over by i-c")
		assert.Equal(t, now.Add(-lease/2), r.StartedAt, "the lost attempt started when it was granted")
		// Its repeat is answered the same.
		again := Claim(d.Run, claimOf(), Job{}, now.Add(time.Second))
		assert.Equal(t, backend.OutcomeWon, again.Result.Outcome)
		assert.Equal(t, "a", again.Result.PreviousToken)
		assert.False(t, again.Write)
	})
	t.Run("a takeover says whether the attempt before handed the run over", func(t *testing.T) {
		handed := ended(10, "a", 1, time.Second)
		handed.Recorded = true
		d := Claim(handed, claimOf(), Job{}, now)
		require.Equal(t, backend.OutcomeWon, d.Result.Outcome)
		assert.True(t, d.Run.HandedOver)
		d = Claim(ended(10, "a", 1, time.Second), claimOf(), Job{}, now)
		assert.False(t, d.Run.HandedOver, "lost")
		d = Claim(retrying(10, "a", 1, -time.Second, time.Second), claimOf(), Job{}, now)
		assert.False(t, d.Run.HandedOver, "retried")
	})
	t.Run("a retry is answered with how long until it is due", func(t *testing.T) {
		d := Claim(retrying(10, "a", 1, 3*time.Second, 4*time.Second), claimOf(), Job{}, now)
		assert.Equal(t, 3*time.Second, d.Result.RetryIn)
		d = Claim(retrying(10, "a", 1, -time.Second, time.Second), claimOf(), Job{}, now)
		assert.True(t, d.Result.Retried)
		assert.Equal(t, "a", d.Result.PreviousToken)
	})
	t.Run("running is answered with the holder and its expiry", func(t *testing.T) {
		cur := live(10, "a", 1)
		d := Claim(cur, claimOf(), Job{}, now)
		assert.Equal(t, "i-a", d.Result.Holder)
		assert.Equal(t, cur.Expires, d.Result.Expires)
	})
	t.Run("the limit's last counted slot says so, buffered and won", func(t *testing.T) {
		d := Claim(pending(10), claimOf(limit(3)), Job{Count: 2}, now)
		assert.True(t, d.Result.LimitReached)
		assert.True(t, d.Run.Last)
		d = Claim(pending(10), claimOf(limit(3), policy(backend.OverlapBufferOne)), Job{Count: 2, Others: []Run{live(9, "a", 1)}}, now)
		assert.Equal(t, backend.OutcomeBuffered, d.Result.Outcome)
		assert.True(t, d.Result.LimitReached)
		d = Claim(d.Run, claimOf(policy(backend.OverlapBufferOne)), Job{Count: 3}, now)
		assert.Equal(t, backend.OutcomeWon, d.Result.Outcome)
		assert.True(t, d.Result.LimitReached)
	})
	t.Run("a late decision carries the claimer's reason", func(t *testing.T) {
		in := claimOf(pastDeadline)
		in.LateWhy = "missed while no instance was up"
		d := Claim(pending(10), in, Job{}, now)
		require.Len(t, d.Records, 1)
		assert.Equal(t, in.LateWhy, d.Records[0].Error)
		assert.True(t, d.Records[0].StartedAt.IsZero(), "a slot decided without running never started")
	})
	t.Run("a decided record carries who asked", func(t *testing.T) {
		d := Claim(pending(10), claimOf(pastDeadline, backfill, incarnation(9)), Job{}, now)
		require.Len(t, d.Records, 1)
		assert.True(t, d.Records[0].Backfill)
		assert.Equal(t, uint64(9), d.Run.Incarnation)
	})
	t.Run("a reopened slot carries no cancel request of the run before", func(t *testing.T) {
		cur := finished(10, "a", 1, backend.StatusOK)
		cur.Cancel = &backend.CancelRequest{Slot: at(11), Instance: "i-x", Token: "x"}
		d := Claim(cur, claimOf(rerun(1), policy(backend.OverlapCancelOther)), Job{}, now)
		require.Equal(t, backend.OutcomeWon, d.Result.Outcome)
		assert.Nil(t, d.Run.Cancel)
		assert.NoError(t, Heartbeat(d.Run, backend.RunKey{Job: "job", Slot: at(10), Token: "c"}, lease, now).Err)
	})
	t.Run("a counted slot stays counted", func(t *testing.T) {
		d := Claim(pending(10), claimOf(limit(3)), Job{}, now)
		assert.True(t, d.Run.Counted, "won")
		d = Claim(pending(10), claimOf(limit(3), policy(backend.OverlapBufferOne)), Job{Others: []Run{live(9, "a", 1)}}, now)
		assert.True(t, d.Run.Counted, "buffered")
		d = Claim(pending(10), claimOf(limit(3), paused), Job{}, now)
		assert.False(t, d.Run.Counted, "decided paused")
		d = Claim(pending(10), claimOf(), Job{}, now)
		assert.False(t, d.Run.Counted, "no limit asked")
	})
	t.Run("a manual claim refused is answered, not stored", func(t *testing.T) {
		for _, in := range []backend.RunClaim{claimOf(manual, pastDeadline), claimOf(manual, policy(backend.OverlapSkip))} {
			d := Claim(pending(10), in, Job{Others: []Run{live(9, "a", 1)}}, now)
			assert.Contains(t, []backend.ClaimOutcome{backend.OutcomeLate, backend.OutcomeOverlap}, d.Result.Outcome)
			assert.False(t, d.Write)
			assert.Empty(t, d.Records)
		}
	})
	t.Run("a manual claim stores a manual run", func(t *testing.T) {
		d := Claim(pending(10), claimOf(manual), Job{}, now)
		assert.True(t, d.Run.Manual)
	})
}

func TestHeartbeat(t *testing.T) {
	key := backend.RunKey{Job: "job", Slot: at(10), Token: "c"}
	t.Run("extends a live lease", func(t *testing.T) {
		d := Heartbeat(live(10, "c", 1), key, 2*lease, now)
		require.NoError(t, d.Err)
		assert.True(t, d.Write)
		assert.Equal(t, now.Add(2*lease), d.Run.Expires)
		assert.Equal(t, 2*lease, d.Run.Lease)
	})
	t.Run("extends a run asked to end and says so", func(t *testing.T) {
		cur := live(10, "c", 1)
		cur.Cancel = &backend.CancelRequest{Slot: at(11), Instance: "i-x", Token: "x"}
		d := Heartbeat(cur, key, lease, now)
		var ce *backend.CancelError
		require.ErrorAs(t, d.Err, &ce)
		assert.Equal(t, at(11), ce.Request.Slot)
		assert.True(t, d.Write)
	})
	for name, cur := range map[string]Run{
		"expired":  ended(10, "c", 1, time.Millisecond),
		"another":  live(10, "a", 1),
		"buffered": buffered(10, "c"),
		"retrying": retrying(10, "c", 1, 0, time.Second),
		"finished": finished(10, "c", 1, backend.StatusOK),
		"nothing":  pending(10),
	} {
		t.Run("lost: "+name, func(t *testing.T) {
			d := Heartbeat(cur, key, lease, now)
			assert.ErrorIs(t, d.Err, backend.ErrLeaseLost)
			assert.False(t, d.Write)
		})
	}
	t.Run("refuses a lease that is not positive", func(t *testing.T) {
		assert.ErrorIs(t, Heartbeat(live(10, "c", 1), key, 0, now).Err, backend.ErrInvalidClaim)
	})
}

func TestSettle(t *testing.T) {
	key := backend.RunKey{Job: "job", Slot: at(10), Token: "c"}
	settle := func(st backend.Status, opts ...func(*backend.Settlement)) backend.Settlement {
		s := backend.Settlement{Key: key, Status: st, StartedAt: now.Add(-time.Second), FinishedAt: now, Error: "boom"}
		for _, o := range opts {
			o(&s)
		}
		return s
	}
	retry := func(s *backend.Settlement) {
		s.Retry = &backend.RetryWindow{Delay: time.Second, Within: 2 * time.Second}
	}
	handOver := func(s *backend.Settlement) { s.HandOver = true }
	gone := func(s *backend.Settlement) { s.EntryGone = true }
	withCancel := func(r Run) Run {
		r.Cancel = &backend.CancelRequest{Slot: at(11), Instance: "i-x", Token: "x"}
		return r
	}
	man := func(r Run) Run { r.Manual = true; return r }
	handedOver := func(r Run) Run { r.Recorded = true; r.Expires = now.Add(-time.Second); return r }
	retried := func(r Run) Run { r.Retried, r.PreviousToken = true, "c"; return r }
	takenOver := func(r Run) Run { r.Previous, r.PreviousToken = "i-c", "c"; return r }
	handedOverTaken := func(r Run) Run { r.HandedOver = true; return takenOver(r) }

	rows := []struct {
		name    string
		cur     Run
		s       backend.Settlement
		err     error
		phase   Phase
		status  backend.Status
		record  bool
		expires time.Time
	}{
		{name: "finished", cur: live(10, "c", 1), s: settle(backend.StatusOK), phase: Finished, status: backend.StatusOK, record: true},
		{name: "finished after its lease ended, nobody took it over", cur: ended(10, "c", 1, time.Second), s: settle(backend.StatusError),
			phase: Finished, status: backend.StatusError, record: true},
		{name: "retry stored", cur: live(10, "c", 1), s: settle(backend.StatusError, retry), phase: Retrying, record: true, expires: now},
		{name: "a manual run is not retried", cur: man(live(10, "c", 1)), s: settle(backend.StatusError, retry),
			phase: Finished, status: backend.StatusError, record: true},
		{name: "a run asked to end is not retried", cur: withCancel(live(10, "c", 1)), s: settle(backend.StatusError, retry),
			phase: Finished, status: backend.StatusError, record: true},
		{name: "a removed entry's run is not retried", cur: live(10, "c", 1), s: settle(backend.StatusError, retry, gone),
			phase: Finished, status: backend.StatusError, record: true},
		{name: "handed over", cur: live(10, "c", 1), s: settle(backend.StatusCancelled, handOver), phase: Running, record: true, expires: now},
		{name: "a manual run is not handed over", cur: man(live(10, "c", 1)), s: settle(backend.StatusCancelled, handOver),
			phase: Finished, status: backend.StatusCancelled, record: true},
		{name: "a run asked to end is finished, not handed over", cur: withCancel(live(10, "c", 1)), s: settle(backend.StatusCancelled, handOver),
			phase: Finished, status: backend.StatusCancelled, record: true},
		{name: "a removed entry's run is finished, not handed over", cur: live(10, "c", 1), s: settle(backend.StatusCancelled, handOver, gone),
			phase: Finished, status: backend.StatusCancelled, record: true},
		{name: "a buffered slot withdrawn by its token", cur: buffered(10, "c"), s: settle(backend.StatusCancelled, retry),
			phase: Finished, status: backend.StatusCancelled, record: true},
		{name: "repeat: handed over", cur: handedOver(live(10, "c", 1)), s: settle(backend.StatusCancelled, handOver), phase: Running},
		{name: "repeat: finished", cur: finished(10, "c", 1, backend.StatusOK), s: settle(backend.StatusOK), phase: Finished, status: backend.StatusOK},
		{name: "repeat: retry pending", cur: retrying(10, "c", 1, time.Second, 2*time.Second), s: settle(backend.StatusError, retry), phase: Retrying},
		{name: "repeat: retry taken", cur: retried(live(10, "d", 2)), s: settle(backend.StatusError, retry), phase: Running},
		{name: "repeat: hand-over taken over", cur: handedOverTaken(live(10, "d", 2)), s: settle(backend.StatusCancelled, handOver), phase: Running},
		{name: "repeat: hand-over taken over and finished", cur: handedOverTaken(finished(10, "d", 2, backend.StatusOK)),
			s: settle(backend.StatusCancelled, handOver), phase: Finished, status: backend.StatusOK},
		{name: "stale: taken over", cur: live(10, "d", 2), s: settle(backend.StatusOK), err: backend.ErrStaleToken, phase: Running},
		{name: "stale: a hand-over of an attempt taken over lost", cur: takenOver(live(10, "d", 2)), s: settle(backend.StatusCancelled, handOver),
			err: backend.ErrStaleToken, phase: Running},
		{name: "stale: a finish of an attempt that handed over", cur: handedOverTaken(live(10, "d", 2)), s: settle(backend.StatusOK),
			err: backend.ErrStaleToken, phase: Running},
		{name: "stale: a finish once the retry is stored", cur: retrying(10, "c", 1, time.Second, 2*time.Second), s: settle(backend.StatusOK),
			err: backend.ErrStaleToken, phase: Retrying},
		{name: "stale: another's buffered slot", cur: buffered(10, "b"), s: settle(backend.StatusCancelled), err: backend.ErrStaleToken, phase: Buffered},
		{name: "stale: nothing stored", cur: pending(10), s: settle(backend.StatusOK), err: backend.ErrStaleToken, phase: Pending},
		{name: "invalid: not a final status", cur: live(10, "c", 1), s: settle(backend.StatusRunning), err: backend.ErrInvalidClaim, phase: Running},
		{name: "invalid: a retry window of zero", cur: live(10, "c", 1),
			s:   settle(backend.StatusError, func(s *backend.Settlement) { s.Retry = &backend.RetryWindow{Delay: time.Second} }),
			err: backend.ErrInvalidClaim, phase: Running},
	}
	for _, row := range rows {
		t.Run(row.name, func(t *testing.T) {
			d := Settle(row.cur, row.s, now)
			if row.err != nil {
				assert.ErrorIs(t, d.Err, row.err)
			} else {
				assert.NoError(t, d.Err)
			}
			assert.Equal(t, row.phase, d.Run.Phase, "phase")
			assert.Equal(t, row.status, d.Run.Status, "status")
			assert.Equal(t, row.record, d.Write, "write")
			if !row.record {
				assert.Empty(t, d.Records)
				return
			}
			require.Len(t, d.Records, 1)
			r := d.Records[0]
			assert.Equal(t, row.s.Status, r.Status)
			assert.Equal(t, row.s.StartedAt, r.StartedAt)
			assert.Equal(t, row.s.FinishedAt, r.FinishedAt)
			assert.Equal(t, "boom", r.Error)
			assert.Equal(t, row.cur.Fence, r.Fence)
			assert.Equal(t, max(row.cur.Attempt, 1), r.Attempt)
			assert.True(t, d.Run.Recorded)
			if !row.expires.IsZero() {
				assert.Equal(t, row.expires, d.Run.Expires)
			}
			if row.phase == Retrying {
				assert.Equal(t, now.Add(time.Second), d.Run.RetryAt)
				assert.Equal(t, now.Add(3*time.Second), d.Run.RetryBy)
			}
		})
	}
}

// A holder's Retry or hand-over, applied and repeated after a backup's claim
// ended the slot paused, is a repeat; a late Settle of an attempt taken over
// lost is stale.
func TestSettleRepeatAfterPausedTakeover(t *testing.T) {
	key := backend.RunKey{Job: "job", Slot: at(10), Token: "a"}
	retry := backend.Settlement{Key: key, Status: backend.StatusError, Retry: &backend.RetryWindow{Delay: time.Second, Within: time.Minute}}
	handOver := backend.Settlement{Key: key, Status: backend.StatusCancelled, HandOver: true}
	retried := Claim(retrying(10, "a", 1, -time.Second, time.Second), claimOf(paused), Job{}, now)
	require.Equal(t, backend.OutcomePaused, retried.Result.Outcome)
	assert.NoError(t, Settle(retried.Run, retry, now).Err, "the retry's repeat")
	handed := ended(10, "a", 1, time.Second)
	handed.Recorded = true
	handedPaused := Claim(handed, claimOf(paused), Job{}, now)
	require.Equal(t, backend.OutcomePaused, handedPaused.Result.Outcome)
	assert.NoError(t, Settle(handedPaused.Run, handOver, now).Err, "the hand-over's repeat")
	lost := Claim(ended(10, "a", 1, time.Second), claimOf(paused), Job{}, now)
	assert.ErrorIs(t, Settle(lost.Run, handOver, now).Err, backend.ErrStaleToken, "an attempt recorded lost")
	reopened := Claim(finished(10, "a", 1, backend.StatusSkipped), claimOf(backfill, paused), Job{}, now)
	assert.Empty(t, reopened.Run.PreviousToken, "a reopened slot took over from nobody")
}

func TestRetry(t *testing.T) {
	key := backend.RunKey{Job: "job", Slot: at(10), Token: "c"}
	d := Retry(live(10, "c", 1), key, time.Second, time.Minute, now)
	require.NoError(t, d.Err)
	assert.Equal(t, Retrying, d.Run.Phase)
	t.Run("a buffered slot has no attempt to retry", func(t *testing.T) {
		d := Retry(buffered(10, "c"), key, time.Second, time.Minute, now)
		assert.ErrorIs(t, d.Err, backend.ErrStaleToken)
		assert.False(t, d.Write)
		assert.Empty(t, d.Records)
	})
}

func TestRelease(t *testing.T) {
	key := backend.RunKey{Job: "job", Slot: at(10), Token: "c"}
	d := Release(live(10, "c", 1), key, now)
	assert.True(t, d.Write)
	assert.Equal(t, now, d.Run.Expires)
	assert.Empty(t, d.Records, "the backup records the attempt")
	for name, cur := range map[string]Run{
		"another's": live(10, "a", 1), "expired": ended(10, "c", 1, time.Second), "finished": finished(10, "c", 1, backend.StatusOK),
	} {
		d := Release(cur, key, now)
		assert.False(t, d.Write, name)
		assert.NoError(t, d.Err, name)
	}
}

// TestLife walks one slot through a life of many arrows, as a store applies them,
// and checks that every attempt ended with exactly one record.
func TestLife(t *testing.T) {
	var records []backend.StoredResult
	apply := func(d Decision) Run {
		records = append(records, d.Records...)
		return d.Run
	}
	clock := now
	in := func(token string) backend.RunClaim {
		c := claimOf()
		c.Token, c.Instance = token, "i-"+token
		return c
	}
	r := apply(Claim(Run{}, in("a"), Job{Fence: 1}, clock))
	require.Equal(t, Running, r.Phase)
	clock = clock.Add(2 * lease) // a dies
	r = apply(Claim(r, in("b"), Job{Fence: 2}, clock))
	require.Equal(t, 2, r.Attempt)
	d := Settle(r, backend.Settlement{Key: backend.RunKey{Job: "job", Slot: at(10), Token: "b"}, Status: backend.StatusError,
		Retry: &backend.RetryWindow{Delay: time.Second, Within: time.Minute}}, clock)
	r = apply(d)
	clock = clock.Add(2 * time.Second)
	r = apply(Claim(r, in("c"), Job{Fence: 3}, clock))
	require.True(t, r.Retried)
	r = apply(Settle(r, backend.Settlement{Key: backend.RunKey{Job: "job", Slot: at(10), Token: "c"}, Status: backend.StatusCancelled, HandOver: true}, clock))
	clock = clock.Add(time.Second)
	r = apply(Claim(r, in("d"), Job{Fence: 4}, clock))
	require.Equal(t, 4, r.Attempt)
	r = apply(Settle(r, backend.Settlement{Key: backend.RunKey{Job: "job", Slot: at(10), Token: "d"}, Status: backend.StatusOK}, clock))
	require.Equal(t, Finished, r.Phase)
	assert.True(t, errors.Is(Settle(r, backend.Settlement{Key: backend.RunKey{Job: "job", Slot: at(10), Token: "c"}, Status: backend.StatusOK}, clock).Err, backend.ErrStaleToken))

	var got []string
	for i, rec := range records {
		assert.Equal(t, i+1, rec.Attempt, "one record per attempt, in order")
		got = append(got, string(rec.Status))
	}
	assert.Equal(t, []string{"lost", "error", "cancelled", "ok"}, got)
}

// The arrows only the answer or the record tells apart: each subtest catches
// a mutant of the machine (internal/modelcheck's TestMachineMutants) that the
// stores' callers cannot see.
func TestArrowsOnlyTheAnswerShows(t *testing.T) {
	t.Run("a claim without Keep keeps the run DefaultRunKeep, one with Keep its own", func(t *testing.T) {
		in := claimOf()
		in.Keep = 0
		d := Claim(pending(10), in, Job{}, now)
		assert.Equal(t, backend.DefaultRunKeep, d.Run.Keep)
		in.Keep = 3 * time.Minute
		d = Claim(pending(10), in, Job{}, now)
		assert.Equal(t, 3*time.Minute, d.Run.Keep)
	})
	t.Run("a takeover gives a run stored without an incarnation the claim's, and keeps one stored", func(t *testing.T) {
		d := Claim(ended(10, "a", 1, time.Second), claimOf(incarnation(5)), Job{}, now)
		require.Equal(t, backend.OutcomeWon, d.Result.Outcome)
		assert.Equal(t, uint64(5), d.Run.Incarnation)
		cur := ended(10, "a", 1, time.Second)
		cur.Incarnation = 5
		d = Claim(cur, claimOf(), Job{}, now)
		require.Equal(t, backend.OutcomeWon, d.Result.Outcome)
		assert.Equal(t, uint64(5), d.Run.Incarnation, "a claim that names no incarnation keeps the run's")
	})
	t.Run("a late decision without the claimer's reason records the machine's", func(t *testing.T) {
		d := Claim(pending(10), claimOf(pastDeadline), Job{}, now)
		require.Len(t, d.Records, 1)
		assert.Equal(t, WhyLate, d.Records[0].Error)
	})
	t.Run("a buffered slot waits with the expiry of the run it waits for, none behind a buffered slot", func(t *testing.T) {
		run := live(9, "a", 1)
		d := Claim(buffered(10, "c"), claimOf(policy(backend.OverlapBufferAll)), Job{Others: []Run{run}}, now)
		require.Equal(t, backend.OutcomeBuffered, d.Result.Outcome)
		assert.Equal(t, at(9), d.Result.WaitsFor)
		assert.Equal(t, run.Expires, d.Result.Expires)
		d = Claim(buffered(10, "c"), claimOf(policy(backend.OverlapBufferAll)), Job{Others: []Run{buffered(9, "b")}}, now)
		require.Equal(t, backend.OutcomeBuffered, d.Result.Outcome)
		assert.Equal(t, at(9), d.Result.WaitsFor)
		assert.True(t, d.Result.Expires.IsZero())
	})
	t.Run("a settled record ends when its holder says, else at the store's now", func(t *testing.T) {
		key := backend.RunKey{Job: "job", Slot: at(10), Token: "c"}
		d := Settle(live(10, "c", 1), backend.Settlement{Key: key, Status: backend.StatusOK, FinishedAt: now.Add(-2 * time.Second)}, now)
		require.Len(t, d.Records, 1)
		assert.Equal(t, now.Add(-2*time.Second), d.Records[0].FinishedAt)
		d = Settle(live(10, "c", 1), backend.Settlement{Key: key, Status: backend.StatusOK}, now)
		require.Len(t, d.Records, 1)
		assert.Equal(t, now, d.Records[0].FinishedAt)
	})
}

// A holder's Settle of its failed attempt whose retry was stored, sent again
// without its retry once the window has passed (its answers were lost), is
// this token's own: not stale. Answered stale, the scheduler takes the attempt
// superseded and stands by for nothing; the slot stays retrying, unfinished
// (the model check, seed 4578: ANARCHON_MODEL_SEED=4578 go test -race -run
// 'TestModelCheck$' ./scheduler/).
func TestSettleRetryRepeatedWithoutItsWindow(t *testing.T) {
	key := backend.RunKey{Job: "job", Slot: at(10), Token: "c"}
	cur := retrying(10, "c", 2, -2*time.Second, -time.Second) // its window has passed
	d := Settle(cur, backend.Settlement{Key: key, Status: backend.StatusError, Error: "boom"}, now)
	assert.NoError(t, d.Err, "the holder's own retry, repeated without it")
	assert.Empty(t, d.Records, "its record is stored already")
	assert.True(t, d.Write)
	assert.Equal(t, Finished, d.Run.Phase, "the run ends: nobody will take the retry")
	assert.Equal(t, backend.StatusError, d.Run.Status)
	d = Settle(d.Run, backend.Settlement{Key: key, Status: backend.StatusError, Error: "boom"}, now)
	assert.NoError(t, d.Err)
	assert.False(t, d.Write, "a further repeat changes nothing")
}

// The reasons the machine records with the decisions it makes without one
// from the claim.
func TestDecisionReasons(t *testing.T) {
	for _, c := range []struct {
		in   backend.RunClaim
		want string
	}{
		{claimOf(missed), WhyMissed},
		{claimOf(missed, func(in *backend.RunClaim) { in.LateWhy = "the fleet was down" }), "the fleet was down"},
		{claimOf(pastDeadline), WhyLate},
		{claimOf(excluded), `excluded by calendar "holidays" (2026-12-25)`},
	} {
		d := Claim(pending(10), c.in, Job{}, now)
		require.Len(t, d.Records, 1)
		assert.Equal(t, c.want, d.Records[0].Error)
	}
}
