package backend

import "errors"

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
