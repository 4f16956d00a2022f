package scheduler

import (
	"context"
	"fmt"
	"slices"
	"strings"
	"time"

	"github.com/anarchon/anarchon/backend"
)

// MaxPauseAfterFailures bounds WithPauseAfterFailures.
const MaxPauseAfterFailures = 100

// WithPauseAfterFailures pauses the job, for every instance, once n of its slots in
// a row have failed for good (their last attempt ended error or timeout, after any
// retries). The streak is read from the shared history, so it counts the slots every
// replica ran; slots that did not run (skipped, late, paused) neither break nor
// extend it, and manual runs do not count. The pause's reason names the streak and
// the last error; Resume (or the fleet's resume) ends it. Needs a backend that
// stores pauses; registration refuses it otherwise.
func WithPauseAfterFailures(n int) JobOption {
	return func(c *jobConfig) error {
		if n < 1 || n > MaxPauseAfterFailures {
			return optErr("pause after %d failed slots is not between 1 and %d", n, MaxPauseAfterFailures)
		}
		c.pauseAfter = n
		return nil
	}
}

// pauseIfFailing pauses j when its newest j.cfg.pauseAfter slots that ran all
// failed for good. Called after a final failure of a scheduled slot; a store that
// cannot be read or written leaves the job as it is (logged).
func (s *Scheduler) pauseIfFailing(j *job) {
	n := j.cfg.pauseAfter
	if n == 0 {
		return
	}
	if _, paused := s.pauses.of(j.name, s.clock.Now()); paused {
		return
	}
	attempts := 1
	if j.cfg.retry != nil {
		attempts = j.cfg.retry.Attempts
	}
	ctx, cancel := s.callCtx(context.Background())
	defer cancel()
	recs, err := s.History(ctx, j.name, min(n*(attempts+1)+16, 1000))
	if err != nil {
		s.log.Warn("cannot read history to count failed slots", j.logAttr(), "err", err)
		return
	}
	streak, last := failedStreak(recs)
	if streak < n {
		return
	}
	reason := fmt.Sprintf("paused after %d failed slots in a row (last: %s)", streak, last)
	if j.entry != nil {
		s.pauseFailingEntry(ctx, j, streak, reason)
		return
	}
	if err := s.storePause(ctx, j.name, PauseOptions{Reason: reason, By: s.instance}); err != nil {
		s.log.Warn("cannot pause a failing job", j.logAttr(), "err", err)
		return
	}
	s.log.Warn("job paused after failed slots", j.logAttr(), "failed_slots", streak)
}

// failedStreak counts, from the newest scheduled slot in recs (History's records,
// newest first), the slots in a row whose last attempt failed, and the newest one's
// error. Slots that did not run are passed over; a slot still running ends the count.
func failedStreak(recs []RunRecord) (streak int, lastErr string) {
	type slotEnd struct {
		attempt int
		status  Status
		err     string
	}
	bySlot := map[int64]slotEnd{}
	var order []int64
	for _, r := range recs {
		if r.Manual || r.Status.Judgement() {
			continue
		}
		k := r.Slot.UnixMilli()
		e, seen := bySlot[k]
		if !seen {
			order = append(order, k)
		}
		if !seen || r.Attempt > e.attempt {
			bySlot[k] = slotEnd{attempt: r.Attempt, status: r.Status, err: r.Error}
		}
	}
	slices.Sort(order)
	slices.Reverse(order)
	for _, k := range order {
		e := bySlot[k]
		switch {
		case failedOnItsOwn(e.status):
			if streak == 0 {
				lastErr = fmt.Sprintf("%s at %s: %s", e.status, time.UnixMilli(k).UTC().Format(time.RFC3339), pauseReasonText(e.err))
			}
			streak++
		case e.status.NotRun():
		default:
			return streak, lastErr
		}
	}
	return streak, lastErr
}

// pauseReasonText is an error as a pause's reason quotes it: one line, short enough
// that the reason stays within the stored limit.
func pauseReasonText(err string) string {
	if i := strings.IndexAny(err, "\r\n"); i >= 0 {
		err = err[:i] + " …"
	}
	return backend.TruncateText(err, 512)
}
