// Package machine is the state machine of a slot's run, written once. It is a
// pure decision, free of I/O. Every run store applies it: the memory, SQL and
// kvlease stores, and any store written outside the project.
//
// # The run
//
// A store keeps one Run per run name (a job, or an entry of a job) and slot. A
// run is in one Phase:
//
//	Pending   nothing is stored for the slot (the zero Run)
//	Buffered  decided to run once nothing else holds the job
//	Running   an attempt holds a lease until Expires
//	Retrying  the last attempt failed and stored its retry
//	Finished  decided for good; Status says how
//
// Each attempt has a token, an attempt number and a fence. The fence grows with
// every new holder.
//
// # The calls
//
// Claim decides a claim of a slot. Heartbeat, Settle and Release decide the
// holder's calls. Finish and Retry are Settle for the seed's RunStore methods.
// Each returns a Decision:
//
//   - Run, and Write when it changed: the slot's next state.
//   - Others: other runs of the job it changed (cancel requests).
//   - Count, and Counted when it changed: the job's run count.
//   - Records: the terminal records of the attempts it ended.
//   - Result (Claim) or Err (the others): the answer.
//
// Claim and Settle list their transitions in their documentation.
//
// # What a store does
//
// A store reads, asks and writes:
//
//  1. Load the slot's Run. With nothing stored it is the zero Run.
//  2. When the claim's policy runs one slot at a time (Overlap.Exclusive), or
//     the slot is buffered, load the job's other unfinished runs too.
//  3. Ask the machine with the store's own clock as now.
//  4. Write Run, Others, Count and Records in one atomic step. Make the write
//     conditional on what was read: a mutex, a transaction, a revision CAS.
//  5. When the write loses a race, read again and ask again.
//
// A store keeps no rule of its own. It maps its stored format to Run and back.
// It may forget a run once Run.Forgotten says so.
//
// A store's Claim in memory, as in this package's example:
//
//	func (s *store) Claim(in backend.RunClaim, now time.Time) backend.ClaimResult {
//		s.mu.Lock()
//		defer s.mu.Unlock()
//		cur := s.runs[in.Slot.UnixMilli()] // the zero Run is Pending
//		job := machine.Job{Count: s.count, Fence: s.fence + 1}
//		if in.Overlap.Exclusive() || cur.Phase == machine.Buffered {
//			job.Others = s.others(in.Slot)
//		}
//		d := machine.Claim(cur, in, job, now)
//		s.apply(d) // history, run, others, count and fence, under the same lock
//		return d.Result
//	}
//
// # Records
//
// Every attempt ends with exactly one terminal record. A store that is a
// backend.Settler stores Decision.Records with the state, in the same step. A
// claim returns records too: for a slot it decides without running it, for an
// attempt it takes over, and for an attempt it ends.
//
// # Facts
//
// A decision uses only what it is given: the stored Run, the claim, the job's
// other runs, its run count, a fence, and now. Pauses and entry incarnations
// come in the claim (RunClaim.PausedWhy, RunClaim.Incarnation). Times are the
// store's clock, never an instance's.
//
// docs/concepts.md ("A slot's life") explains the transitions and their
// reasons. backend/memory/runs.go is a complete store.
package machine
