package backend

import (
	"errors"
	"fmt"
	"time"
)

// Errors a backend returns, matched by the scheduler with errors.Is. Package
// scheduler exports the ones its users meet (ErrInvalidJobName, ErrLeaseLost,
// ErrInvalidOption, ErrInvalidConfig, ErrPauseNotSupported) as the same values. A
// backend wraps them with what it knows, keeping the store's own error reachable
// through errors.As.
var (
	// ErrInvalidOption: an option (of a job, or of a backend's constructor) out of
	// range; the message names it and its bounds.
	ErrInvalidOption = errors.New("scheduler: invalid option")
	// ErrInvalidConfig: a configuration (scheduler.Config, a backend's) that
	// cannot work; the message names the field.
	ErrInvalidConfig = errors.New("scheduler: invalid config")
	// ErrPauseNotSupported: Pause or Resume on a backend without the Pauser
	// capability.
	ErrPauseNotSupported = errors.New("scheduler: the backend cannot store pauses")
	// ErrInvalidJobName: a job name ValidateJobName refuses.
	ErrInvalidJobName = errors.New("scheduler: invalid job name")
	// ErrLeaseLost: the token no longer holds the run's lease (expired, taken over,
	// released or finished).
	ErrLeaseLost = errors.New("scheduler: lease lost")
	// ErrStaleToken: a Finish from a token that no longer holds the run.
	ErrStaleToken = errors.New("scheduler: stale token")
	// ErrInvalidClaim: a claim (or a run store call) a backend cannot accept: no
	// token, a lease or keep out of range, an invalid job name. Every backend's
	// claim validation errors match it.
	ErrInvalidClaim = errors.New("scheduler: invalid claim")
	// ErrClaimedElsewhere: ClaimRecorder.RecordClaim found the slot already claimed
	// by an instance that decides without leases (a mixed fleet during a rolling
	// upgrade). The leased winner then does not run the slot.
	ErrClaimedElsewhere = errors.New("scheduler: slot claimed by an instance without leases")
)

// ErrCancelRequested: Heartbeat's answer, as a *CancelError, to the holder of a
// run a later slot's claim asked to end (OverlapCancelOther). The lease was
// extended: the holder still holds the run until it finishes it.
var ErrCancelRequested = errors.New("scheduler: cancel requested by a later slot (overlap policy cancel-other)")

// CancelError is Heartbeat's error for a run with a stored CancelRequest.
type CancelError struct {
	Job     string
	Slot    time.Time
	Request CancelRequest
}

func (e *CancelError) Error() string {
	return fmt.Sprintf("%v: job %q slot %s: asked by slot %s from instance %s", ErrCancelRequested, e.Job,
		e.Slot.UTC().Format(time.RFC3339Nano), e.Request.Slot.UTC().Format(time.RFC3339Nano), e.Request.Instance)
}

// Is makes a CancelError match ErrCancelRequested.
func (e *CancelError) Is(target error) bool { return target == ErrCancelRequested }
