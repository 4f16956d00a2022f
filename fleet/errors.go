package fleet

import (
	"errors"
	"fmt"
	"strings"

	"github.com/anarchon/anarchon/backend"
	"github.com/anarchon/anarchon/scheduler"
)

// Errors returned by this package. Match them with errors.Is. A replica's error
// reply is a *ServiceError, which matches the sentinel of its code.
var (
	// ErrInvalidOption: an option or argument of Serve or NewClient is invalid.
	ErrInvalidOption = errors.New("fleet: invalid option")
	// ErrNoReplica: nothing answers on the subject (NATS no-responders): no replica
	// that declares the job is up, or no replica at all for fleet-wide requests. A
	// request about one job returns a *NoReplicaError, which says which.
	ErrNoReplica = errors.New("fleet: no replica answers")
	// ErrBadRequest: the replica refused the request (code 400) and changed nothing:
	// malformed JSON, an unknown field, a missing reason, an until in the past...
	ErrBadRequest = errors.New("fleet: bad request")
	// ErrUnknownJob: the replica does not declare the job (code 404), or no
	// replica that is up declares it (a *NoReplicaError with replicas up). A
	// replica asked about a job it has just removed answers 503 (ErrUnavailable),
	// as another replica may declare it.
	ErrUnknownJob = errors.New("fleet: unknown job")
	// ErrNotSupported: the replica's backend cannot do it (code 501), e.g. pause
	// on a backend that does not store pauses.
	ErrNotSupported = errors.New("fleet: not supported by the backend")
	// ErrUnavailable: the replica cannot serve now (code 503): its scheduler is not
	// started, or stopping.
	ErrUnavailable = errors.New("fleet: replica unavailable")
	// ErrJobBusy: a trigger of a job that forbids overlap (OverlapSkip) while a run
	// of it is in progress (code 409); nothing ran. It also matches
	// scheduler.ErrJobBusy.
	ErrJobBusy = errors.New("fleet: a run of the job is in progress and the job forbids overlap")
	// ErrTooManyManualRuns: a trigger while as many manual runs of the job as the
	// replica allows (scheduler.WithMaxManualRuns) are in progress on it (code
	// 429); nothing ran. It also matches scheduler.ErrTooManyManualRuns.
	ErrTooManyManualRuns = errors.New("fleet: too many manual runs of the job in progress")
	// ErrReplicaFailed: the replica tried and failed (code 500), for example a
	// backend call that failed.
	ErrReplicaFailed = errors.New("fleet: the replica failed")
	// ErrEntryNotFound: no schedule entry of the job has that ID (code 410).
	// It also matches scheduler.ErrEntryNotFound.
	ErrEntryNotFound = errors.New("fleet: schedule entry not found")
	// ErrEntryConflict: the entry's stored revision is not the one the update or
	// removal was based on: another writer changed it first, and nothing was
	// stored (code 412). It also matches scheduler.ErrEntryConflict.
	ErrEntryConflict = errors.New("fleet: schedule entry changed by another writer")
	// ErrEntryExists: an add of an ID the job's entries already have (code 422).
	// It also matches scheduler.ErrEntryExists.
	ErrEntryExists = errors.New("fleet: schedule entry exists")
	// ErrCalendarNotFound: no calendar of that name is stored (code 410 on a
	// calendar endpoint). It also matches scheduler.ErrCalendarNotFound.
	ErrCalendarNotFound = errors.New("fleet: calendar not found")
	// ErrCalendarConflict: the calendar's stored revision is not the one the
	// change was based on (code 412 on a calendar endpoint). It also matches
	// scheduler.ErrCalendarConflict.
	ErrCalendarConflict = errors.New("fleet: calendar changed by another writer")
	// ErrCalendarExists: a create of a calendar already stored (code 422 on a
	// calendar endpoint). It also matches scheduler.ErrCalendarExists.
	ErrCalendarExists = errors.New("fleet: calendar exists")
	// ErrBadReply: a reply that is not what the protocol says.
	ErrBadReply = errors.New("fleet: malformed reply")
)

// Error codes of the Nats-Service-Error-Code header.
const (
	CodeBadRequest = 400
	CodeUnknownJob = 404
	// CodeJobBusy: a trigger refused because a run of the job is in progress and
	// the job forbids overlap (ErrJobBusy).
	CodeJobBusy = 409
	// CodeTooManyManualRuns: a trigger refused because the replica runs as many
	// manual runs of the job as it allows (ErrTooManyManualRuns).
	CodeTooManyManualRuns = 429
	// CodeEntryNotFound: no schedule entry of the job has the ID
	// (ErrEntryNotFound), or no calendar the name (ErrCalendarNotFound).
	CodeEntryNotFound = 410
	// CodeEntryConflict: an entry's or calendar's change based on a revision
	// that is no longer stored (ErrEntryConflict, ErrCalendarConflict).
	CodeEntryConflict = 412
	// CodeEntryExists: an add of an entry ID, or a create of a calendar name,
	// already stored (ErrEntryExists, ErrCalendarExists).
	CodeEntryExists  = 422
	CodeInternal     = 500
	CodeNotSupported = 501
	CodeUnavailable  = 503
)

// ServiceError is a replica's error reply: the micro error headers
// (Nats-Service-Error-Code and Nats-Service-Error) and the instance that answered.
type ServiceError struct {
	// Subject is the endpoint asked.
	Subject string
	// Code is the Nats-Service-Error-Code (400, 404, 409, 410, 412, 422, 429,
	// 500, 501, 503).
	Code int
	// Description is the Nats-Service-Error text.
	Description string
	// Instance is the replica that answered, when its reply says.
	Instance string
	// calendar: the reply is a calendar endpoint's, whose 410, 412, 422 and
	// 501 are the calendar's.
	calendar bool
}

func (e *ServiceError) Error() string {
	at := e.Subject
	if e.Instance != "" {
		at += " on " + e.Instance
	}
	return fmt.Sprintf("fleet: %s: %s (%d)", at, e.Description, e.Code)
}

// Is matches the sentinel of the error's code, and the scheduler's own sentinels
// where one fits: 404 is also scheduler.ErrJobNotFound, 409 scheduler.ErrJobBusy,
// 410 scheduler.ErrEntryNotFound, 412 scheduler.ErrEntryConflict, 422
// scheduler.ErrEntryExists, 429 scheduler.ErrTooManyManualRuns, 501
// scheduler.ErrPauseNotSupported. From a calendar endpoint, 410, 412 and 422
// are ErrCalendarNotFound, ErrCalendarConflict and ErrCalendarExists (and the
// scheduler's), and 501 is also scheduler.ErrCalendarsNotSupported.
func (e *ServiceError) Is(target error) bool {
	if e.calendar {
		switch e.Code {
		case CodeEntryNotFound:
			return target == ErrCalendarNotFound || target == scheduler.ErrCalendarNotFound
		case CodeEntryConflict:
			return target == ErrCalendarConflict || target == scheduler.ErrCalendarConflict
		case CodeEntryExists:
			return target == ErrCalendarExists || target == scheduler.ErrCalendarExists
		case CodeNotSupported:
			return target == ErrNotSupported || target == scheduler.ErrCalendarsNotSupported
		}
	}
	switch e.Code {
	case CodeBadRequest:
		return target == ErrBadRequest
	case CodeUnknownJob:
		return target == ErrUnknownJob || target == scheduler.ErrJobNotFound
	case CodeJobBusy:
		return target == ErrJobBusy || target == scheduler.ErrJobBusy
	case CodeTooManyManualRuns:
		return target == ErrTooManyManualRuns || target == scheduler.ErrTooManyManualRuns
	case CodeEntryNotFound:
		return target == ErrEntryNotFound || target == scheduler.ErrEntryNotFound
	case CodeEntryConflict:
		return target == ErrEntryConflict || target == scheduler.ErrEntryConflict
	case CodeEntryExists:
		return target == ErrEntryExists || target == scheduler.ErrEntryExists
	case CodeNotSupported:
		return target == ErrNotSupported || target == scheduler.ErrPauseNotSupported
	case CodeUnavailable:
		return target == ErrUnavailable
	case CodeInternal:
		return target == ErrReplicaFailed
	}
	return false
}

// NoReplicaError is a request about one job that nothing answered (NATS
// no-responders): no replica that declares the job is up. The client then asks
// the fleet who is up (a jobs request, within the request's context), so that a
// misspelt job is told apart from a fleet that is down. It matches ErrNoReplica,
// and ErrUnknownJob too when replicas are up.
type NoReplicaError struct {
	// Subject is the endpoint asked; Job the job it is about.
	Subject string
	Job     string
	// Up are the replicas that answered the jobs request, sorted: none of them
	// declares Job. Empty when no replica is up, or when Checked is false.
	Up []string
	// Checked says the jobs request was answered (or refused by no-responders): Up
	// is known. When it is false (the request's context ended first, or the jobs
	// request failed otherwise) the error says only that no declarer answered.
	Checked bool
}

// maxUpListed is how many replicas a NoReplicaError's text names.
const maxUpListed = 10

func (e *NoReplicaError) Error() string {
	switch {
	case !e.Checked:
		return fmt.Sprintf("fleet: no replica answers: none that declares job %q is up (no responders on %s)", e.Job, e.Subject)
	case len(e.Up) == 0:
		return fmt.Sprintf("fleet: no replica is up (no responders on %s, nor on the fleet's jobs subject)", e.Subject)
	}
	up := strings.Join(e.Up[:min(len(e.Up), maxUpListed)], ", ")
	if n := len(e.Up) - maxUpListed; n > 0 {
		up += fmt.Sprintf(" and %d more", n)
	}
	return fmt.Sprintf("fleet: no replica declares job %q (replicas up: %s)", e.Job, up)
}

// Is matches ErrNoReplica, and ErrUnknownJob when replicas are up.
func (e *NoReplicaError) Is(target error) bool {
	return target == ErrNoReplica || (target == ErrUnknownJob && len(e.Up) > 0)
}

// ErrorBody is the JSON payload of an error reply, beside the headers.
type ErrorBody struct {
	Code     int    `json:"code"`
	Error    string `json:"error"`
	Instance string `json:"instance,omitempty"`
}

// replyError is an error a handler answers with.
type replyError struct {
	code int
	msg  string
}

func (e *replyError) Error() string { return e.msg }

func badRequest(format string, args ...any) error {
	return &replyError{code: CodeBadRequest, msg: "bad request: " + fmt.Sprintf(format, args...)}
}

// replyFor maps an error to its code and a one-line description.
func replyFor(err error) (int, string) {
	var re *replyError
	code := CodeInternal
	switch {
	case errors.As(err, &re):
		code = re.code
	case errors.Is(err, scheduler.ErrJobNotFound):
		// A replica subscribes a job's endpoints only while its scheduler
		// declares the job: the job was removed here a moment ago, and another
		// replica may declare it. Ask again (a 404 would say nobody does).
		return CodeUnavailable, shortText(err.Error() + ": removed from this replica, ask again")
	case errors.Is(err, scheduler.ErrEntryNotFound):
		code = CodeEntryNotFound
	case errors.Is(err, scheduler.ErrEntryConflict):
		code = CodeEntryConflict
	case errors.Is(err, scheduler.ErrEntryExists):
		code = CodeEntryExists
	case errors.Is(err, scheduler.ErrInvalidEntry):
		code = CodeBadRequest
	case errors.Is(err, scheduler.ErrCalendarNotFound):
		code = CodeEntryNotFound
	case errors.Is(err, scheduler.ErrCalendarConflict):
		code = CodeEntryConflict
	case errors.Is(err, scheduler.ErrCalendarExists):
		code = CodeEntryExists
	case errors.Is(err, scheduler.ErrInvalidCalendar):
		code = CodeBadRequest
	case errors.Is(err, scheduler.ErrCalendarsNotSupported):
		code = CodeNotSupported
	case errors.Is(err, scheduler.ErrPauseNotSupported), errors.Is(err, scheduler.ErrBackfillNotSupported),
		errors.Is(err, scheduler.ErrEntriesNotSupported):
		code = CodeNotSupported
	case errors.Is(err, scheduler.ErrJobBusy):
		code = CodeJobBusy
	case errors.Is(err, scheduler.ErrTooManyManualRuns):
		code = CodeTooManyManualRuns
	case errors.Is(err, scheduler.ErrInvalidOption), errors.Is(err, scheduler.ErrInvalidJobName):
		code = CodeBadRequest
	case errors.Is(err, scheduler.ErrNotStarted), errors.Is(err, scheduler.ErrStopped):
		code = CodeUnavailable
	}
	return code, shortText(err.Error())
}

// shortText is s on one line, at most MaxViewError bytes.
func shortText(s string) string { return backend.TruncateText(oneLine(s), MaxViewError) }

// oneLine makes s fit in a header value.
func oneLine(s string) string {
	return strings.Join(strings.Fields(strings.ReplaceAll(s, "\x00", " ")), " ")
}
