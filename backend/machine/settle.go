package machine

import (
	"fmt"
	"time"

	"github.com/anarchon/anarchon/backend"
)

// Heartbeat decides key's heartbeat at now: the lease is extended to now + lease
// while key.Token holds it live; otherwise Err matches backend.ErrLeaseLost. A
// run with a cancel request is extended too, and Err is a *backend.CancelError.
func Heartbeat(cur Run, key backend.RunKey, lease time.Duration, now time.Time) Decision {
	d := Decision{Run: cur}
	switch {
	case lease <= 0:
		d.Err = fmt.Errorf("%w: heartbeat lease must be positive, got %v", backend.ErrInvalidClaim, lease)
		return d
	case cur.Phase != Running || cur.Token != key.Token || !cur.Live(now):
		d.Err = fmt.Errorf("%w: %s", backend.ErrLeaseLost, describe(key))
		return d
	}
	cur.Lease, cur.Expires, cur.Changed = lease, now.Add(lease), now
	d.Run, d.Write = cur, true
	if cur.Cancel != nil {
		d.Err = &backend.CancelError{Job: key.Job, Slot: key.Slot, Request: *cur.Cancel}
	}
	return d
}

// Settle decides how s.Key's attempt ends at now, and its record:
//
//	buffered ──its buffering token──▶ finished (withdrawn)
//	running  ──its token, Retry──▶ retrying (lease ended)
//	running  ──its token, HandOver──▶ running (lease ended, for a backup)
//	running  ──its token──▶ finished
//
// A manual run, a run a later slot asked to end and a run of a removed entry are
// finished, neither retried nor handed over. A repeat by the same token changes
// nothing and is answered nil, but a stored retry repeated without its window
// once that window has passed finishes the run; any other token gets
// backend.ErrStaleToken.
func Settle(cur Run, s backend.Settlement, now time.Time) Decision {
	d := Decision{Run: cur}
	tok := s.Key.Token
	switch {
	case !s.Status.Finished():
		d.Err = fmt.Errorf("%w: settle needs a final status, got %q", backend.ErrInvalidClaim, s.Status)
		return d
	case s.Retry != nil && (s.Retry.Delay < 0 || s.Retry.Within <= 0):
		d.Err = fmt.Errorf("%w: retry needs a delay of zero or more and a positive window, got %v and %v",
			backend.ErrInvalidClaim, s.Retry.Delay, s.Retry.Within)
		return d
	case cur.Token == tok && cur.Phase == Buffered:
		s.Retry, s.HandOver = nil, false
	case cur.Token == tok && cur.Phase == Running && cur.Recorded:
		return d // handed over already: a repeat
	case cur.Token == tok && cur.Phase == Running:
	case cur.Token == tok && cur.Phase == Retrying && s.Retry == nil && !now.Before(cur.RetryBy):
		// The holder gave its retry up, its window past, after the answer
		// storing it was lost: the run ends as its record, stored then, says.
		cur.Phase, cur.Status, cur.Changed = Finished, s.Status, now
		d.Run, d.Write = cur, true
		return d
	case cur.Token == tok && (cur.Phase == Finished || cur.Phase == Retrying && s.Retry != nil),
		cur.Retried && cur.PreviousToken == tok && s.Retry != nil,
		cur.HandedOver && cur.PreviousToken == tok && s.HandOver:
		return d // a repeat, also once the retry or the hand-over was taken
	default:
		d.Err = fmt.Errorf("%w: %s", backend.ErrStaleToken, describe(s.Key))
		return d
	}
	rec := cur.record(s.Status, s.Error, now)
	rec.StartedAt = s.StartedAt
	if !s.FinishedAt.IsZero() {
		rec.FinishedAt = s.FinishedAt
	}
	d.Records = []backend.StoredResult{rec}
	gone := s.EntryGone || s.Incarnation != 0 && cur.Incarnation != 0 && s.Incarnation != cur.Incarnation
	mayLeave := cur.Phase == Running && !cur.Manual && cur.Cancel == nil && !gone
	switch {
	case mayLeave && s.Retry != nil:
		cur.Phase = Retrying
		cur.RetryAt = now.Add(s.Retry.Delay)
		cur.RetryBy = cur.RetryAt.Add(s.Retry.Within)
		cur.Expires = now
	case mayLeave && s.HandOver:
		if cur.Expires.After(now) {
			cur.Expires = now
		}
	default:
		cur.Phase, cur.Status = Finished, s.Status
	}
	cur.Recorded, cur.Changed = true, now
	d.Run, d.Write = cur, true
	return d
}

// Release decides key's release at now: a live lease of key.Token ends at once,
// the run left unfinished for a backup; anything else changes nothing. Nothing
// is recorded: the backup that takes the run over records the attempt lost.
func Release(cur Run, key backend.RunKey, now time.Time) Decision {
	d := Decision{Run: cur}
	if cur.Phase == Running && cur.Token == key.Token && cur.Live(now) {
		cur.Expires, cur.Changed = now, now
		d.Run, d.Write = cur, true
	}
	return d
}

// Finish is Settle of the seed's Finish: key's attempt ends with status, no times.
func Finish(cur Run, key backend.RunKey, status backend.Status, now time.Time) Decision {
	return Settle(cur, backend.Settlement{Key: key, Status: status}, now)
}

// Retry is Settle of Retrier.Retry: key's failed attempt stores its retry. A
// buffered slot has no attempt: its token gets backend.ErrStaleToken.
func Retry(cur Run, key backend.RunKey, delay, within time.Duration, now time.Time) Decision {
	if cur.Phase == Buffered {
		return Decision{Run: cur, Err: fmt.Errorf("%w: %s", backend.ErrStaleToken, describe(key))}
	}
	return Settle(cur, backend.Settlement{Key: key, Status: backend.StatusError,
		Retry: &backend.RetryWindow{Delay: delay, Within: within}}, now)
}

func describe(key backend.RunKey) string {
	return fmt.Sprintf("job %q slot %s", key.Job, key.Slot.UTC().Format(time.RFC3339Nano))
}
