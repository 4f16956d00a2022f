package backend

// RunCounter is implemented by run stores that count a job's runs for
// RunClaim.MaxRuns (a job's fleet-wide run limit). A store without it refuses
// nothing: the scheduler refuses the limit at registration.
//
// The store keeps, per job, a count of its slots' first wins. A claim with
// MaxRuns > 0 that would create the slot's run (no decision stored for it yet)
// decides, in this order:
//   - past Deadline: finished late, not counted;
//   - the count is MaxRuns or more: the slot is stored finished StatusLimit and
//     the claim answered OutcomeLimit;
//   - the overlap policy: skipped (not counted), buffered (counted: a buffered
//     slot is a stored decision to run it), cancel-other's wait (not counted
//     until it is won);
//   - won: counted.
//
// A claim that brings the count to MaxRuns is answered with LimitReached set (so
// are its repeats, and the wins of the buffered slot it stored). Nothing else
// counts: takeovers, retries, Backfill claims (which the limit never refuses
// either), claims with MaxRuns 0, and repeats of a claim whose decision is
// stored (a limit decision is answered as DecidedOutcome says: OutcomeLimit to
// its decider, OutcomeDone with StatusLimit to others). A slot decided paused
// (RunClaim.PausedWhy) is not counted; reopened by catch-up it counts then, and
// the limit may refuse it. A slot counted when won and ended paused is reopened
// without counting again. The count outlives the job's runs (it is never forgotten with
// them), and a claim with a bigger MaxRuns than the count lets slots run again.
//
// A store may count a slot that never ran (a claimer that died between the
// count's write and the run's), never one less than ran.
type RunCounter interface {
	// CountsRuns reports whether the store counts runs for RunClaim.MaxRuns.
	CountsRuns() bool
}

// BufferedRunCounter is implemented by run stores that count a buffered slot in
// the same decision that stores it buffered, or skipped when the buffer is
// full, so that a skipped slot is never counted. The scheduler refuses
// WithMaxRuns with a buffer overlap policy on a store without it.
type BufferedRunCounter interface {
	// CountsBufferedRuns reports whether the store counts buffered slots so.
	CountsBufferedRuns() bool
}

// Counts reports whether in asks the store to count its first win and to
// refuse it once MaxRuns are counted: MaxRuns is set and in is not a Backfill
// claim.
func (in RunClaim) Counts() bool { return in.MaxRuns > 0 && !in.Backfill }
