package scheduler

import "github.com/anarchon/anarchon/backend"

// slotAttempt is one attempt of a slot on this instance, the value that carries it
// from its won claim to its stored result: what History records of it (in: job,
// slot, token, instance, attempt number, manual), the fence its claim gave, and the
// lease it holds (nil without leases). A leased slot passes the files in this
// order: claim.go (claim it, follow the stored decision, stand by), run.go (run the
// handler under the lease), lease.go (heartbeats), settle.go (Finish or Release,
// else the outbox) and record.go (its records); without leases loop.go claims and
// run.go runs.
type slotAttempt struct {
	j     *job
	in    backend.ClaimInput
	fence uint64
	l     *lease
}

// key is the attempt's hold on the run, for the run store.
func (a *slotAttempt) key() backend.RunKey {
	return backend.RunKey{Job: a.j.name, Slot: a.in.Slot, Token: a.in.Token}
}
