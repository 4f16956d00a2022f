package scheduler

import "errors"

// Errors returned by the scheduler. Match them with errors.Is; the
// store's own error stays reachable through errors.As when a backend wraps it.
var (
	ErrInvalidSchedule = errors.New("scheduler: invalid schedule")
	ErrNilHandler      = errors.New("scheduler: nil handler")
	ErrJobExists       = errors.New("scheduler: job already registered")
	ErrJobNotFound     = errors.New("scheduler: job not found")
	ErrWindowTooShort  = errors.New("scheduler: dedupe window too short for the job")
	ErrNotStarted      = errors.New("scheduler: not started")
	ErrStarted         = errors.New("scheduler: already started")
	ErrStopped         = errors.New("scheduler: stopped")
	// ErrHandlerPanic wraps a panic recovered from a handler.
	ErrHandlerPanic = errors.New("scheduler: handler panicked")
	// ErrHandlerTimeout is the cause (context.Cause) of a handler's context
	// cancelled by the job's timeout (WithTimeout); the run ends StatusTimeout.
	ErrHandlerTimeout = errors.New("scheduler: handler timed out")
	// ErrJobBusy: RunNow of a job that forbids overlap (OverlapSkip) while a run of
	// it is in progress. Nothing was run.
	ErrJobBusy = errors.New("scheduler: a run of the job is in progress and the job forbids overlap")
	// ErrOverlapCancelled is the cause (context.Cause) of a handler's context
	// cancelled because a later slot of its job asked the run to end
	// (OverlapCancelOther). The run ends StatusCancelled, its error naming the
	// slot and the instance that asked.
	ErrOverlapCancelled = errors.New("scheduler: cancelled by a later slot of the job (overlap policy cancel-other)")
	// ErrNotStored: Stop returned with records that complete a slot (results, the
	// records of slots that did not run) still unwritten, as the backend did not
	// answer before Stop's context ended. History ends such runs when it reads
	// them, from the run store where there is one.
	ErrNotStored = errors.New("scheduler: records not stored")
	// ErrTooManyManualRuns: RunNow while as many manual runs of the job as
	// WithMaxManualRuns allows are in progress on this instance. Nothing was run.
	ErrTooManyManualRuns = errors.New("scheduler: too many manual runs of the job in progress")
)
