// Package anarchontest runs a fleet of replicas of a service's scheduler in
// one test: the service's own jobs, several replicas on one shared memory
// store, one clock that moves when the test says, and faults on demand. It
// tests scheduled jobs the way the project tests itself.
//
// A fleet runs inside testing/synctest: time stands still until every
// goroutine of the test waits, then jumps to the next timer, so hours of
// schedule run in milliseconds and every run sees the same times. Advance
// moves the time on and waits until the fleet is idle again.
//
//	// The service's code: it registers its jobs on a replica's scheduler.
//	func setupReport(s *scheduler.Scheduler) error {
//		return s.Every("report", time.Minute, func(ctx context.Context, run scheduler.Run) error {
//			select {
//			case <-time.After(45 * time.Second): // the work
//				return nil
//			case <-ctx.Done():
//				return context.Cause(ctx)
//			}
//		}, scheduler.WithLease(15*time.Second))
//	}
//
//	func TestTakeover(t *testing.T) {
//		synctest.Test(t, func(t *testing.T) {
//			slot := time.Now() // a bubble starts at 2000-01-01 00:00 UTC: a slot of the job
//			f := anarchontest.Start(t, anarchontest.Config{Replicas: 3, Setup: setupReport})
//
//			anarchontest.Advance(20 * time.Second)
//			holder := f.Holder("report", slot)
//			holder.Kill() // mid-run
//
//			anarchontest.Advance(2 * time.Minute)
//			runs, err := f.RunsOf(t.Context(), "report", slot)
//			require.NoError(t, err)
//			// runs[0]: attempt 1, lost, on the holder; runs[1]: attempt 2, ok,
//			// on the backup that took the run over once its lease expired.
//			f.AssertRanOnce(t, "report", slot)
//		})
//	}
//
// Start starts the fleet and stops it when the test ends. Each replica is a
// scheduler.Scheduler made from Config.Scheduler (Middleware, OnEvent, ...),
// named "replica-1", "replica-2" and so on, with the jobs Config.Setup
// registers. Which replica wins a slot is not determined: they claim at the
// same instant. A test asks the fleet (Holder, the events) instead.
//
// # Faults
//
// Each replica sees the store through faults of its own, put in front of
// every call. The view keeps every capability of the memory store (leases,
// retries, overlap policies, run limits, pauses, entries, calendars,
// membership), so the scheduler loses no feature.
//
//   - Kill crashes the process: its store calls hang and fail, its handlers'
//     contexts are cancelled, it reports no event. It never stops gracefully.
//   - Freeze stops the process for a while, as a SIGSTOP does: its clock
//     stands still, its timers and store calls wait, and then it goes on.
//   - Partition cuts the replica off from the store until Heal.
//   - Skew offsets the replica's clock.
//   - LoseAnswers has the store apply the next calls but lose their answers.
//   - Stop stops the process gracefully; Restart starts a fresh one in its
//     place.
//
// # Reading what happened
//
// History, EntryHistory and RunsOf read the shared store past every fault.
// Holder tells which replica holds a slot's lease. Events returns what every
// replica reported (Config.Scheduler.OnEvent still gets it too), and
// AssertRanOnce checks that slots ran to completion once.
//
// # Without synctest
//
// A fleet on a clock of its own (Config.Clock, a stepclock.Clock) runs where
// a synctest bubble cannot, such as a runnable example: the test moves the
// clock and waits for events (WaitEvents). Store calls and handlers then run
// in real time, and a fault whose effect waits on the clock (a retry's
// delay, a lease's expiry) waits until the test moves the clock far enough.
package anarchontest
