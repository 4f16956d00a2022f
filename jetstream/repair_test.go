package jetstream

import (
	"context"
	"fmt"
	"strings"
	"sync"
	"testing"
	"time"

	natsjs "github.com/nats-io/nats.go/jetstream"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/anarchon/anarchon/backend"
	"github.com/anarchon/anarchon/backend/memory"
	"github.com/anarchon/anarchon/embedded"
	"github.com/anarchon/anarchon/internal/natstest"
	"github.com/anarchon/anarchon/scheduler"
)

// In a mixed fleet (a rolling upgrade) a slot run by an instance without leases
// is decided by the slot's claim, and the leased instance's own lease of it is
// finished skipped (claimed elsewhere). History's repair on the leased instance
// does not take that for the plain run's ending: a run still going stays running.
func TestMixedFleetHistoryKeepsAPlainRunRunning(t *testing.T) {
	s := natstest.Server(t, embedded.Options{})
	ctx := ctxFor(t)
	job := jobName("mixed-repair")

	release := make(chan struct{})
	var once sync.Once
	started := make(chan time.Time, 1)
	plain, err := scheduler.New(scheduler.Config{Backend: newBackend(t, natstest.JetStream(t, natstest.Conn(t, s))), Instance: "plain"})
	require.NoError(t, err)
	require.NoError(t, plain.Every(job, 4*time.Second, func(ctx context.Context, r scheduler.Run) error {
		first := false
		once.Do(func() { first = true })
		if first {
			started <- r.Slot
			<-release // a long run, alive
		}
		return nil
	}, scheduler.WithMaxLate(500*time.Millisecond)))
	require.NoError(t, plain.Start(ctx))
	defer func() {
		once.Do(func() {})
		require.NoError(t, plain.Stop(context.Background()))
	}()
	defer close(release)
	var slot time.Time
	select {
	case slot = <-started:
	case <-time.After(10 * time.Second):
		t.Fatal("the plain instance did not run a slot")
	}

	lb, err := NewLeased(natstest.JetStream(t, natstest.Conn(t, s)), memory.NewRunStore(backend.SystemClock{}), WithMixedFleet())
	require.NoError(t, err)
	leased, err := scheduler.New(scheduler.Config{Backend: lb, Instance: "leased", CallTimeout: time.Second})
	require.NoError(t, err)
	require.NoError(t, leased.Every(job, 4*time.Second, func(context.Context, scheduler.Run) error { return nil },
		scheduler.WithMaxLate(500*time.Millisecond)))
	require.NoError(t, leased.Start(ctx))
	defer func() { require.NoError(t, leased.Stop(context.Background())) }()

	// Past the leased instance's grace (3 x its CallTimeout) after the claim.
	time.Sleep(time.Until(slot.Add(3500 * time.Millisecond)))
	status := func(sc *scheduler.Scheduler) backend.RunRecord {
		recs, err := sc.History(ctx, job, 0)
		require.NoError(t, err)
		for _, r := range recs {
			if r.Slot.Equal(slot) {
				return r
			}
		}
		t.Fatalf("no record of slot %v: %+v", slot, recs)
		return backend.RunRecord{}
	}
	r := status(leased)
	assert.Equal(t, backend.StatusRunning, r.Status, "read on the leased instance: %s %q", r.Status, r.Error)
	r = status(plain)
	assert.Equal(t, backend.StatusRunning, r.Status, "read again on the plain instance: %s %q", r.Status, r.Error)
}

// One retried write changes how no run reads. A result written twice (its first
// write stored, its answer lost) evicts, from a results subject that keeps the
// newest history-size messages, the result of the oldest run while that run's
// record is still stored. History leaves such a record out (it is past the history
// the job keeps) instead of showing it running, and its repair never ends it lost:
// each such ending would evict the next result, one more run per read.
func TestDuplicateResultDoesNotTurnAnOlderRunLost(t *testing.T) {
	s := natstest.Server(t, embedded.Options{})
	ctx := ctxFor(t)
	job := jobName("dup-result")
	b := newBackend(t, natstest.JetStream(t, natstest.Conn(t, s)))
	sc, err := scheduler.New(scheduler.Config{Backend: b, Instance: "a", CallTimeout: 500 * time.Millisecond})
	require.NoError(t, err)
	// No scheduled slot: the runs are the test's five (an hourly slot due at Start,
	// in the first minute of an hour, would be a sixth).
	require.NoError(t, sc.Every(job, time.Hour, func(context.Context, scheduler.Run) error { return nil },
		scheduler.WithHistory(5, 0), scheduler.WithTimeout(500*time.Millisecond), scheduler.WithStartAt(time.Now().Add(time.Hour))))
	require.NoError(t, sc.Start(ctx))
	defer func() { require.NoError(t, sc.Stop(context.Background())) }()

	var last backend.RunRecord
	for range 5 {
		last, err = sc.RunNow(ctx, job)
		require.NoError(t, err)
		require.Equal(t, backend.StatusOK, last.Status)
	}
	// The outbox writes the newest result again: its first write was stored, its
	// answer lost.
	require.NoError(t, b.SaveResult(ctx, job, backend.StoredResult{
		Slot: last.Slot, Token: last.Token, Instance: last.Instance, Attempt: 1, Manual: true, Status: last.Status,
		StartedAt: last.StartedAt, FinishedAt: last.FinishedAt,
	}, backend.Retention{Size: 5}))

	// Past the job's timeout and the grace (3 x CallTimeout) of the oldest claim.
	time.Sleep(time.Until(last.ClaimedAt.Add(2500 * time.Millisecond)))
	var lost []string
	for read := range 4 {
		recs, err := sc.History(ctx, job, 0)
		require.NoError(t, err)
		var line []string
		for _, r := range recs {
			line = append(line, string(r.Status))
			if r.Status != backend.StatusOK {
				lost = append(lost, fmt.Sprintf("read %d: run at %s: %s %q", read, r.Slot.Format("15:04:05.000"), r.Status, r.Error))
			}
		}
		t.Logf("read %d, newest first: %v", read, line)
	}
	assert.Empty(t, lost, "every run ran ok")
}

// A record fits every stream PrepareJob accepts: on a stream whose max_msg_size is
// the least it accepts (minMsgSize), a result with an error at MaxErrorText, or
// one that JSON's escapes make six times longer, is stored with its error cut to
// fit, never refused by the server for ever.
func TestResultAtTheErrorCapFitsEveryAcceptedStream(t *testing.T) {
	s := natstest.Server(t, embedded.Options{})
	ctx := ctxFor(t)
	job := jobName("msgsize")
	js := natstest.JetStream(t, natstest.Conn(t, s))
	b := newBackend(t, js)
	lim := limits(job)
	require.NoError(t, b.PrepareJob(ctx, lim))
	setMetadata(t, js, b.cfg.namesFor(job).stream, func(cfg *natsjs.StreamConfig) { cfg.MaxMsgSize = minMsgSize(job) })

	b2 := newBackend(t, natstest.JetStream(t, natstest.Conn(t, s)))
	if err := b2.PrepareJob(ctx, lim); err != nil {
		t.Logf("PrepareJob refuses the stream: %v", err)
		return
	}
	long := backend.TruncateText(strings.Repeat("x", 3*backend.MaxErrorText), backend.MaxErrorText)
	err := b2.SaveResult(ctx, job, backend.StoredResult{
		Slot: slot(1), Token: token(), Instance: "a", Attempt: 1, Status: backend.StatusError,
		StartedAt: time.Now(), FinishedAt: time.Now(), Error: long,
	}, backend.Retention{Size: 10})
	assert.NoError(t, err, "a result with an error of %d bytes on a stream PrepareJob accepted (max_msg_size %d)", len(long), minMsgSize(job))
	// A text that JSON escapes (each '<' is six bytes) is cut to fit too.
	escaped := backend.TruncateText(strings.Repeat("<", 3*backend.MaxErrorText), backend.MaxErrorText)
	tok := token()
	require.NoError(t, b2.SaveResult(ctx, job, backend.StoredResult{
		Slot: slot(2), Token: tok, Instance: "a", Attempt: 1, Status: backend.StatusError,
		StartedAt: time.Now(), FinishedAt: time.Now(), Error: escaped,
	}, backend.Retention{Size: 10}))
	hist, err := b2.History(ctx, job, 0)
	require.NoError(t, err)
	var got string
	for _, r := range hist {
		if r.Token == tok {
			got = r.Error
		}
	}
	assert.Contains(t, got, "cut from", "stored cut, with the mark")
	assert.Less(t, len(got), len(escaped))
}

// A record left running by a dead instance without leases is shown lost by
// History once past its timeout, to every reader at once (status pages, a
// fleet's history requests); reading stores nothing.
func TestHistoryShowsADeadPlainRunLost(t *testing.T) {
	s := natstest.Server(t, embedded.Options{})
	ctx := ctxFor(t)
	job := jobName("repair-once")
	b := newBackend(t, natstest.JetStream(t, natstest.Conn(t, s)))
	sc, err := scheduler.New(scheduler.Config{Backend: b, Instance: "reader", CallTimeout: 200 * time.Millisecond})
	require.NoError(t, err)
	// No scheduled slot: the one record is the dead instance's (an hourly slot due
	// at Start, in the first minute of an hour, would be a second).
	require.NoError(t, sc.Every(job, time.Hour, func(context.Context, scheduler.Run) error { return nil },
		scheduler.WithHistory(10, 0), scheduler.WithTimeout(100*time.Millisecond), scheduler.WithStartAt(time.Now().Add(time.Hour))))
	require.NoError(t, sc.Start(ctx))
	defer func() { require.NoError(t, sc.Stop(context.Background())) }()

	// A dead instance's claim, a minute old: past its timeout and the grace (3 x
	// CallTimeout), counted from the claim's time.
	won, err := b.Claim(ctx, backend.ClaimInput{Job: job, Slot: slot(0), Token: token(), Instance: "dead", Attempt: 1,
		At: time.Now().Add(-time.Minute), HistorySize: 10})
	require.NoError(t, err)
	require.True(t, won)

	const readers = 8
	var wg sync.WaitGroup
	gate := make(chan struct{})
	for range readers {
		wg.Go(func() {
			<-gate
			recs, err := sc.History(ctx, job, 0)
			assert.NoError(t, err)
			if assert.Len(t, recs, 1) {
				assert.Equal(t, scheduler.StatusLost, recs[0].Status)
			}
		})
	}
	close(gate)
	wg.Wait()
	st := b.cached(job)
	require.NotNil(t, st)
	results := subjectCounts(t, b, job)[st.results]
	assert.Zero(t, results, "a reader stores nothing")
}
