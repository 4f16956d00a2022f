package scheduler

import (
	"time"

	"github.com/anarchon/anarchon/backend"
)

// A RunNow under a buffer policy stores its manual slot buffered while another
// run of the job runs, and only that RunNow claims it: no other instance stands
// by for a manual slot. When its process dies while it waits, the slot stays
// buffered with no one to claim it. It stays first in line, ahead of every later
// slot of the job. Under OverlapBufferOne those are all skipped, under
// OverlapBufferAll they all wait, until an instance starts and adopts it.
//
// So an instance whose claim of a slot is skipped under a buffer policy, or
// buffered behind a manual slot, looks at the job's unfinished runs. A manual
// slot first in line with nothing else of the job unfinished cannot be kept
// waiting. Its RunNow watches the run before it, so it claims such a slot at
// once. If the slot is still so a lease later, that RunNow is gone, and the slot
// is adopted: ended like a manual run whose instance stopped (finished lost,
// never run).

// checkOrphan looks, beside the caller and once at a time per job, for a
// buffered manual slot of j that no RunNow claims, and adopts it.
func (s *Scheduler) checkOrphan(j *job) {
	if !j.orphanCheck.CompareAndSwap(false, true) {
		return
	}
	if !s.besideIfRunning(func() {
		defer j.orphanCheck.Store(false)
		first, ok := s.orphanHead(j)
		if !ok || !s.sleepUntil(s.loopCtx, s.clock.Now().Add(j.cfg.lease)) {
			return
		}
		again, ok := s.orphanHead(j)
		if !ok || !again.Slot.Equal(first.Slot) || again.Token != first.Token {
			return
		}
		s.log.Warn("ends a buffered manual run that its RunNow no longer claims", j.logAttr(), "slot", first.Slot, "instance", first.Instance)
		s.onceBeside(j, first.Slot, func() { s.handleSlot(j, first.Slot, claimAdopt) })
	}) {
		j.orphanCheck.Store(false)
	}
}

// orphanHead returns j's oldest buffered slot when it is a manual one and every
// unfinished run of the job is buffered; ok is false otherwise.
func (s *Scheduler) orphanHead(j *job) (head backend.ActiveRun, ok bool) {
	ctx, cancel := s.callCtx(s.loopCtx)
	defer cancel()
	active, err := s.runs.Active(ctx, j.name)
	if err != nil {
		if s.loopCtx.Err() == nil {
			s.backendError(j, time.Time{}, "active", err)
		}
		return head, false
	}
	for _, r := range active {
		if !r.Buffered {
			return head, false // a run that may keep the buffered slots waiting
		}
		if !ok || r.Slot.Before(head.Slot) {
			head, ok = r, true
		}
	}
	return head, ok && (head.Manual || j.manualAt(head.Slot))
}

// behindManual reports whether res, a claim's answer, is buffered behind a
// manual slot that is itself buffered (no expiry: it holds no lease). For an
// entry, behind any buffered slot: orphanHead reads whether it is manual.
func (j *job) behindManual(res backend.ClaimResult) bool {
	return res.Outcome == backend.OutcomeBuffered && !res.WaitsFor.IsZero() && res.Expires.IsZero() &&
		(j.entry != nil || j.manualAt(res.WaitsFor))
}

// onceBeside runs f, which takes over j's run of slot, beside the caller while
// the scheduler runs, unless such an f runs already on this instance.
func (s *Scheduler) onceBeside(j *job, slot time.Time, f func()) {
	k := adoptKey{j.name, slot.UnixMilli()}
	s.mu.Lock()
	if s.adopting == nil {
		s.adopting = map[adoptKey]bool{}
	}
	busy := s.adopting[k]
	s.adopting[k] = true
	s.mu.Unlock()
	if busy {
		return
	}
	done := func() {
		s.mu.Lock()
		delete(s.adopting, k)
		s.mu.Unlock()
	}
	if !s.besideIfRunning(func() {
		defer done()
		f()
	}) {
		done()
	}
}

type adoptKey struct {
	job  string
	slot int64
}
