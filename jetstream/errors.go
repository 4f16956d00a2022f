package jetstream

import (
	"errors"
	"fmt"

	"github.com/anarchon/anarchon/backend"
	"github.com/anarchon/anarchon/internal/option"
)

// Errors of the JetStream backend. Match them with errors.Is; the nats.go error
// underneath stays reachable with errors.Is and errors.As.
var (
	// ErrUnavailable: JetStream cannot be used (connection closed, server not
	// answering, JetStream not enabled, account limits that refuse the streams).
	ErrUnavailable = errors.New("jetstream: JetStream unavailable")
	// ErrIncompatibleStream: a stream with the job's name exists with settings the
	// backend cannot use and will not change. The error is a *StreamConflictError.
	ErrIncompatibleStream = errors.New("jetstream: incompatible stream")
	// ErrUnsupportedJob: a job this backend cannot run (CheckJob and PrepareJob).
	ErrUnsupportedJob = errors.New("jetstream: job not supported")
	// ErrInvalidOption: an option New cannot accept; the message names it. It
	// matches backend.ErrInvalidOption too, so one errors.Is covers the invalid
	// options of every anarchon package.
	ErrInvalidOption = option.Sentinel("jetstream")
	// ErrInvalidClaim: a claim without a token or a job. It IS backend.ErrInvalidClaim,
	// the one sentinel every backend's invalid claims match, so errors.Is works with
	// either name.
	ErrInvalidClaim = backend.ErrInvalidClaim
	// ErrUndecided: the server answered that a slot was claimed, but the winning
	// claim is no longer stored, so whether it was this token cannot be told.
	ErrUndecided = errors.New("jetstream: claim undecided")
	// ErrMixedFleet: PrepareJob found the job's stream in the claim mode of
	// instances that would run its slots twice beside this one (with leases
	// beside without). The message names the job, both modes and the remedy.
	ErrMixedFleet = errors.New("jetstream: instances with and without leases on one job")
	// ErrClosed: the backend was closed.
	ErrClosed = errors.New("jetstream: backend closed")
)

// StreamConflictError says which setting of an existing stream stops the backend from
// using it. It matches ErrIncompatibleStream.
type StreamConflictError struct {
	Stream  string // the stream's name
	Job     string // the job it would hold
	Setting string // the conflicting setting, as nats-server names it in the config
	Have    string // the stream's value
	Want    string // what the backend needs
	Hint    string // what to do about it
}

func (e *StreamConflictError) Error() string {
	s := fmt.Sprintf("jetstream: stream %q for job %q: %s is %s, the backend needs %s", e.Stream, e.Job, e.Setting, e.Have, e.Want)
	if e.Hint != "" {
		s += " (" + e.Hint + ")"
	}
	return s
}

// Unwrap makes the error match ErrIncompatibleStream.
func (e *StreamConflictError) Unwrap() error { return ErrIncompatibleStream }
