// Package machine is the state machine of a slot's run, written once: a pure
// decision, free of I/O, that every run store applies. A store reads the slot's
// stored state (and, for policies that run one slot at a time, the job's other
// unfinished slots), asks the machine, and writes what it returns conditionally
// (under a mutex, in a transaction, by revision compare-and-set), retrying from
// a fresh read when the write loses. It keeps no rule of its own.
//
//	cur := load(job, slot)                      // machine.Run; Phase Pending when none
//	d := machine.Claim(cur, in, machine.Job{Others: others, Count: n, Fence: f}, now)
//	if d.Write { save(d.Run, d.Others, d.Records) } // one atomic step, or start again
//	return d.Result, nil
//
// Claim decides claims; Heartbeat, Settle and Release the holder's calls. Each
// returns a Decision: the slot's next state, the job's other runs it changed,
// the job's run count, the terminal records of the attempts it ended, and the
// answer. A store that is a backend.Settler stores the records with the state,
// so every attempt ends with exactly one record in history.
//
// Times are the store's clock, given as now: lease expiry, deadlines and retry
// windows are never judged by an instance's clock.
//
// The transitions are listed on Claim and Settle; docs/concepts.md explains them.
package machine
