package integration

import (
	"fmt"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/anarchon/anarchon/scheduler"
)

// The due slots of a fault test and what became of each: ran, reported late or
// skipped, or silently dropped; and waiting for them to settle.

// faultSlots lists the slots of an every-interval job in [from, to].
func faultSlots(job string, interval time.Duration, from, to time.Time) []faultKey {
	sched, err := scheduler.NewIntervalSchedule(interval)
	if err != nil {
		panic(err)
	}
	var out []faultKey
	for s := sched.Next(from.Add(-time.Millisecond)); !s.After(to); s = sched.Next(s) {
		out = append(out, faultKey{job, s.UnixMilli()})
	}
	return out
}

// faultAccount is what became of a set of due slots.
type faultAccount struct {
	due, ran, lateOnly, skippedOnly int
	// recordedLate counts slots that did not run whose late/skipped record is in
	// history (the rest were reported by events only).
	recordedLate int
	// dropped lists slots that neither ran nor were reported late or skipped by
	// any instance, in events or in history: silently dropped.
	dropped []faultKey
	// missed lists slots that did not run (late, skipped or dropped).
	missed []faultKey
}

func (a faultAccount) String() string {
	return fmt.Sprintf("%d due: %d ran, %d late (%d of them recorded in history), %d skipped, %d silently dropped",
		a.due, a.ran, a.lateOnly, a.recordedLate, a.skippedOnly, len(a.dropped))
}

// account decides, for every due slot, whether it ran, was reported late or skipped
// (events of any instance, or a late/skipped record in history), or was dropped.
func (r *faultRecorder) account(due []faultKey, history map[faultKey]scheduler.Status) faultAccount {
	r.mu.Lock()
	defer r.mu.Unlock()
	var a faultAccount
	for _, k := range due {
		a.due++
		hs, inHist := history[k]
		switch {
		case len(r.execs[k]) > 0:
			a.ran++
			continue
		case r.late[k] > 0 || (inHist && hs == scheduler.StatusLate):
			a.lateOnly++
		case r.skipped[k] > 0 || (inHist && hs == scheduler.StatusSkipped):
			a.skippedOnly++
		default:
			a.dropped = append(a.dropped, k)
		}
		if inHist && (hs == scheduler.StatusLate || hs == scheduler.StatusSkipped) {
			a.recordedLate++
		}
		a.missed = append(a.missed, k)
	}
	return a
}

// describe says what the recorder knows about k, for a failure message.
func (r *faultRecorder) describe(k faultKey) string {
	r.mu.Lock()
	defer r.mu.Unlock()
	return fmt.Sprintf("%s: %d runs, %d late events, %d skipped events, %d claim errors, %d 'none' answers to backups; events:\n\t%s",
		k, len(r.execs[k]), r.late[k], r.skipped[k], r.claimErrs[k], r.lostNone[k], strings.Join(r.trace[k], "\n\t"))
}

// faultHistory reads the history of jobs from s (all instances' records) and keeps,
// per slot, the status of a late or skipped record when there is one, else of any
// record.
func faultHistory(t *testing.T, s *scheduler.Scheduler, jobs []string) map[faultKey]scheduler.Status {
	t.Helper()
	out := map[faultKey]scheduler.Status{}
	for _, job := range jobs {
		var hist []scheduler.RunRecord
		var err error
		for deadline := time.Now().Add(20 * time.Second); ; {
			hist, err = s.History(ctxT(t, 5*time.Second), job, 500)
			if err == nil || time.Now().After(deadline) {
				break
			}
			sleepCtx(t, 200*time.Millisecond)
		}
		require.NoError(t, err, "history of %q reads back", job)
		for _, rec := range hist {
			k := faultKey{job, rec.Slot.UnixMilli()}
			if cur, ok := out[k]; ok && (cur == scheduler.StatusLate || cur == scheduler.StatusSkipped) {
				continue
			}
			out[k] = rec.Status
		}
	}
	return out
}

// faultDue lists the slots of every job due in [from, to].
func faultDue(jobs []string, interval time.Duration, from, to time.Time) []faultKey {
	var due []faultKey
	for _, j := range jobs {
		due = append(due, faultSlots(j, interval, from, to)...)
	}
	return due
}

// faultOffsets formats slot keys as offsets from t0.
func faultOffsets(keys []faultKey, t0 time.Time) string {
	var parts []string
	for _, k := range keys {
		parts = append(parts, fmt.Sprintf("%s(%+.1fs)", k.job, time.UnixMilli(k.slot).Sub(t0).Seconds()))
	}
	return strings.Join(parts, " ")
}

// faultWaitResolved polls until every slot in due is resolved (ran, or reported late
// or skipped), or the deadline passes; it returns how many were still open.
func faultWaitResolved(t *testing.T, rec *faultRecorder, due []faultKey, within time.Duration) int {
	t.Helper()
	deadline := time.Now().Add(within)
	for {
		open := 0
		for _, k := range due {
			if !rec.resolved(k) {
				open++
			}
		}
		if open == 0 || time.Now().After(deadline) {
			return open
		}
		select {
		case <-time.After(100 * time.Millisecond):
		case <-t.Context().Done():
			return open
		}
	}
}

// faultSettle waits for every due slot to come to an end (a claim is retried until
// deadline + lease), stops the instances and reads the jobs' history. It returns
// the slots still open when it gave up waiting, how long Stop took, and the history.
func faultSettle(t *testing.T, rec *faultRecorder, ins []*faultInstance, jobs []string, due []faultKey) (int, time.Duration, map[faultKey]scheduler.Status) {
	open := faultWaitResolved(t, rec, due, 10*time.Second)
	stopTook := faultStopAll(t, ins)
	return open, stopTook, faultHistory(t, ins[0].sched, jobs)
}

// faultSleepToSlot waits at least minWait, then until offset past the next multiple
// of interval: a fault injected there hits the claims of that slot in flight.
func faultSleepToSlot(t *testing.T, interval, minWait, offset time.Duration) {
	at := time.Now().Add(minWait).Truncate(interval).Add(interval + offset)
	sleepCtx(t, time.Until(at))
}
