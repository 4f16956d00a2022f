package scheduler

import "github.com/anarchon/anarchon/backend"

// The values a user meets that the backends share. They are defined in package
// backend, the contract backends implement; these names are the same types.
type (
	// Status is how a run ended, or that it is still running: [backend.Status]
	// lists the values.
	Status = backend.Status
	// RunRecord is one attempt of a slot as History reports it: its fields are
	// [backend.RunRecord]'s.
	RunRecord = backend.RunRecord
	// ActiveRun is an unfinished run, as Active lists it ([backend.ActiveRun]).
	ActiveRun = backend.ActiveRun
	// LastRuns is a job's newest run, success and failure ([backend.LastRuns]).
	LastRuns = backend.LastRuns
	// Pause is a stored pause of a job, or of every job ([backend.Pause]).
	Pause = backend.Pause
	// ClaimOutcome is how a claim was answered, as events report it (Event.Outcome).
	ClaimOutcome = backend.ClaimOutcome
	// OverlapPolicy says whether a slot may start while another slot of its job runs.
	OverlapPolicy = backend.OverlapPolicy
	// CatchUpPolicy says which slots missed while no instance was up run at Start.
	CatchUpPolicy = backend.CatchUpPolicy
	// DSTPolicy says which slots a cron schedule has where its zone changes its
	// clocks (WithDST, EntrySpec.DST): [backend.DSTPolicy].
	DSTPolicy = backend.DSTPolicy
	// DSTRepeated and DSTMissing are its two choices.
	DSTRepeated = backend.DSTRepeated
	DSTMissing  = backend.DSTMissing
	// Clock is the scheduler's source of time.
	Clock = backend.Clock
	// Timer is a timer made by a Clock.
	Timer = backend.Timer
	// SystemClock is the host's clock.
	SystemClock = backend.SystemClock
	// OffsetClock is the host's clock moved by Offset, for tests of skewed clocks.
	OffsetClock = backend.OffsetClock
)

// Run statuses; see [backend.Status].
const (
	StatusRunning    = backend.StatusRunning
	StatusOK         = backend.StatusOK
	StatusError      = backend.StatusError
	StatusTimeout    = backend.StatusTimeout
	StatusCancelled  = backend.StatusCancelled
	StatusSkipped    = backend.StatusSkipped
	StatusLost       = backend.StatusLost
	StatusSuperseded = backend.StatusSuperseded
	StatusLate       = backend.StatusLate
	StatusMissed     = backend.StatusMissed
	StatusPaused     = backend.StatusPaused
	// StatusLimit: the slot fell after the job's run limit was reached (WithMaxRuns).
	StatusLimit = backend.StatusLimit
	// StatusDeadline: the slot had not ended ok by its deadline (WithDeadline).
	StatusDeadline = backend.StatusDeadline
)

// Claim outcomes; see [backend.ClaimOutcome].
const (
	OutcomeWon     = backend.OutcomeWon
	OutcomeRunning = backend.OutcomeRunning
	OutcomeDone    = backend.OutcomeDone
	OutcomeOverlap = backend.OutcomeOverlap
	OutcomeLate    = backend.OutcomeLate
	OutcomeNone    = backend.OutcomeNone
	OutcomeRetry   = backend.OutcomeRetry
	// OutcomeBuffered: the slot is stored buffered (OverlapBufferOne, OverlapBufferAll).
	OutcomeBuffered = backend.OutcomeBuffered
	// OutcomeLimit: the job's run limit was reached; the slot is stored limit (WithMaxRuns).
	OutcomeLimit = backend.OutcomeLimit
)

// Overlap and catch-up policies; see [backend.OverlapPolicy] and
// [backend.CatchUpPolicy].
const (
	OverlapAllow = backend.OverlapAllow
	OverlapSkip  = backend.OverlapSkip
	// OverlapCancelOther: see WithOverlap.
	OverlapCancelOther = backend.OverlapCancelOther
	// OverlapBufferOne and OverlapBufferAll: see WithOverlap.
	OverlapBufferOne = backend.OverlapBufferOne
	OverlapBufferAll = backend.OverlapBufferAll
	CatchUpNone      = backend.CatchUpNone
	CatchUpLatest    = backend.CatchUpLatest
	CatchUpAll       = backend.CatchUpAll
)

// DST policies; see [backend.DSTPolicy] and WithDST.
const (
	DSTFirst = backend.DSTFirst
	DSTLast  = backend.DSTLast
	DSTBoth  = backend.DSTBoth
	DSTShift = backend.DSTShift
	DSTSkip  = backend.DSTSkip
)

const (
	// MaxErrorText bounds the error text stored with a result, in bytes; longer
	// errors are stored cut, with a mark.
	MaxErrorText = backend.MaxErrorText
	// MaxPauseText bounds a pause's Reason and By, in bytes.
	MaxPauseText = backend.MaxPauseText
	// DefaultBufferCap is how many slots OverlapBufferAll keeps buffered when
	// WithBufferCap is not given; MaxBufferCap the most WithBufferCap accepts.
	DefaultBufferCap = backend.DefaultBufferCap
	MaxBufferCap     = backend.MaxBufferCap
	// MaxJobNameLen is the longest job name accepted, in bytes.
	MaxJobNameLen = backend.MaxJobNameLen
	// MinLease is the shortest lease accepted (WithLease).
	MinLease = backend.MinLease
	// LastRunsDepth is how many of a job's newest records LastRuns reads for it
	// when the backend cannot read many jobs' last runs at once.
	LastRunsDepth = backend.LastRunsDepth
)

var (
	// ErrInvalidJobName: a job name that is empty, not valid UTF-8, longer than
	// MaxJobNameLen, or has control characters or leading or trailing space.
	ErrInvalidJobName = backend.ErrInvalidJobName
	// ErrLeaseLost is the cause of a handler's context cancelled because its
	// instance no longer holds the run's lease.
	ErrLeaseLost = backend.ErrLeaseLost
	// ErrInvalidOption: an option out of range; the message names it.
	ErrInvalidOption = backend.ErrInvalidOption
	// ErrInvalidConfig: a Config that cannot work; the message names the field.
	ErrInvalidConfig = backend.ErrInvalidConfig
	// ErrPauseNotSupported: Pause or Resume on a backend that cannot store pauses.
	ErrPauseNotSupported = backend.ErrPauseNotSupported
)
