package scheduler

import "errors"

// Errors returned by the scheduler and by backends. Match them with errors.Is; the
// store's own error stays reachable through errors.As when a backend wraps it.
var (
	ErrInvalidJobName  = errors.New("scheduler: invalid job name")
	ErrInvalidSchedule = errors.New("scheduler: invalid schedule")
	ErrInvalidOption   = errors.New("scheduler: invalid option")
	ErrInvalidConfig   = errors.New("scheduler: invalid config")
	ErrNilHandler      = errors.New("scheduler: nil handler")
	ErrJobExists       = errors.New("scheduler: job already registered")
	ErrJobNotFound     = errors.New("scheduler: job not found")
	ErrWindowTooShort  = errors.New("scheduler: dedupe window too short for the job")
	ErrNotStarted      = errors.New("scheduler: not started")
	ErrStarted         = errors.New("scheduler: already started")
	ErrStopped         = errors.New("scheduler: stopped")
	// ErrLeaseLost: the token no longer holds the run's lease (expired, taken over,
	// released or finished).
	ErrLeaseLost = errors.New("scheduler: lease lost")
	// ErrStaleToken: a Finish from a token that no longer holds the run.
	ErrStaleToken = errors.New("scheduler: stale token")
	// ErrHandlerPanic wraps a panic recovered from a handler.
	ErrHandlerPanic = errors.New("scheduler: handler panicked")
	// ErrHandlerTimeout is the cause (context.Cause) of a handler's context
	// cancelled by the job's timeout (WithTimeout); the run ends StatusTimeout.
	ErrHandlerTimeout = errors.New("scheduler: handler timed out")
	// ErrInvalidClaim: a claim (or a run store call) a backend cannot accept: no
	// token, a lease or keep out of range, an invalid job name. Every backend's
	// claim validation errors match it.
	ErrInvalidClaim = errors.New("scheduler: invalid claim")
	// ErrClaimedElsewhere: ClaimRecorder.RecordClaim found the slot already claimed
	// by an instance that decides without leases (a mixed fleet during a rolling
	// upgrade). The leased winner then does not run the slot.
	ErrClaimedElsewhere = errors.New("scheduler: slot claimed by an instance without leases")
	// ErrPauseNotSupported: Pause or Resume on a backend without the Pauser
	// capability.
	ErrPauseNotSupported = errors.New("scheduler: the backend cannot store pauses")
	// ErrJobBusy: RunNow of a job that forbids overlap (OverlapSkip) while a run of
	// it is in progress. Nothing was run.
	ErrJobBusy = errors.New("scheduler: a run of the job is in progress and the job forbids overlap")
	// ErrNotStored: Stop returned with records that complete a slot (results, the
	// records of slots that did not run) still unwritten, as the backend did not
	// answer before Stop's context ended. History ends such runs when it reads
	// them, from the run store where there is one.
	ErrNotStored = errors.New("scheduler: records not stored")
	// ErrTooManyManualRuns: RunNow while as many manual runs of the job as
	// WithMaxManualRuns allows are in progress on this instance. Nothing was run.
	ErrTooManyManualRuns = errors.New("scheduler: too many manual runs of the job in progress")
)
