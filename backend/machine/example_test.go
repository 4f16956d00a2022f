package machine_test

import (
	"fmt"
	"sync"
	"time"

	"github.com/anarchon/anarchon/backend"
	"github.com/anarchon/anarchon/backend/machine"
)

// store is a run store of one job in memory: the machine decides, the store
// keeps what it decides under one mutex. A real store also keys by job,
// forgets runs (machine.Run.Forgotten) and bounds its history.
type store struct {
	mu      sync.Mutex
	runs    map[int64]machine.Run // by slot, in Unix ms
	count   int                   // runs counted for RunClaim.MaxRuns
	fence   uint64                // the biggest fence handed out
	history []backend.StoredResult
}

// Claim reads the slot, asks the machine and writes its decision.
func (s *store) Claim(in backend.RunClaim, now time.Time) backend.ClaimResult {
	s.mu.Lock()
	defer s.mu.Unlock()
	cur := s.runs[in.Slot.UnixMilli()] // the zero Run is Pending
	job := machine.Job{Count: s.count, Fence: s.fence + 1}
	if in.Overlap.Exclusive() || cur.Phase == machine.Buffered {
		job.Others = s.others(in.Slot)
	}
	d := machine.Claim(cur, in, job, now)
	s.apply(d) // history, run, others, count and fence, under the same lock
	return d.Result
}

// Settle ends an attempt as the machine decides, with its record.
func (s *store) Settle(st backend.Settlement, now time.Time) error {
	s.mu.Lock()
	defer s.mu.Unlock()
	d := machine.Settle(s.runs[st.Key.Slot.UnixMilli()], st, now)
	s.apply(d)
	return d.Err
}

// apply writes a decision in one step: the records with the state.
func (s *store) apply(d machine.Decision) {
	s.history = append(s.history, d.Records...)
	if d.Write {
		s.runs[d.Run.Slot.UnixMilli()] = d.Run
	}
	for _, o := range d.Others {
		s.runs[o.Slot.UnixMilli()] = o
	}
	if d.Counted {
		s.count = d.Count
	}
	s.fence = max(s.fence, d.Run.Fence)
}

// others are the job's unfinished runs but slot's.
func (s *store) others(slot time.Time) []machine.Run {
	var out []machine.Run
	for ms, r := range s.runs {
		if ms != slot.UnixMilli() && r.Unfinished() {
			out = append(out, r)
		}
	}
	return out
}

// A store applies the machine: two replicas claim a slot, the holder dies, and
// the backup takes the run over once the lease has ended. The attempt taken
// over gets its record (lost) in the claim that takes it over.
func Example() {
	s := &store{runs: map[int64]machine.Run{}}
	slot := time.Date(2026, 1, 2, 3, 0, 0, 0, time.UTC)
	claim := func(token string) backend.RunClaim {
		return backend.RunClaim{Job: "report", Slot: slot, Token: token, Instance: "replica-" + token,
			Lease: 30 * time.Second, Deadline: slot.Add(time.Minute)}
	}

	fmt.Println(s.Claim(claim("a"), slot).Outcome)                  // a wins
	fmt.Println(s.Claim(claim("b"), slot.Add(time.Second)).Outcome) // b stands by
	res := s.Claim(claim("b"), slot.Add(40*time.Second))            // a's lease ended
	fmt.Println(res.Outcome, res.Attempt, res.PreviousToken)

	end := backend.Settlement{Key: claim("b").Key(), Status: backend.StatusOK}
	fmt.Println(s.Settle(end, slot.Add(50*time.Second)))
	for _, r := range s.history {
		fmt.Println(r.Token, r.Attempt, r.Status)
	}
	// Output:
	// won
	// running
	// won 2 a
	// <nil>
	// a 1 lost
	// b 2 ok
}
