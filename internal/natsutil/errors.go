package natsutil

import (
	"context"
	"errors"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"
)

// The JetStream API error codes the backends and the lease store act on, named
// once here (nats-server's server/errors.json holds them all). A code nats.go names
// is given by its name there.

// Codes that are not answers to a request: asking again later gets one.
const (
	// ErrCodeClusterNotAvailable (10008): the meta group or the stream has no
	// leader at the moment (a cluster starting, an election under way). A
	// replicated stream that found a Nats-Expected-Last-Msg-Id mismatch when it
	// applied a message answers it to every request afterwards.
	ErrCodeClusterNotAvailable jetstream.ErrorCode = 10008
	// ErrCodeDuplicateInProcess (10158): on a replicated stream, a message with the
	// same Nats-Msg-Id is proposed but not yet committed. Neither stored nor a
	// duplicate yet.
	ErrCodeDuplicateInProcess jetstream.ErrorCode = 10158
	// ErrCodeStreamNameInUse (10058): a create met a stream of that name with
	// another configuration, often one that a concurrent create made a moment
	// before.
	ErrCodeStreamNameInUse jetstream.ErrorCode = jetstream.JSErrCodeStreamNameInUse
	// ErrCodeStreamOffline (10118): every peer of the stream is offline (nodes
	// restarting).
	ErrCodeStreamOffline jetstream.ErrorCode = 10118
	// ErrCodeMoveInProgress (10124) and ErrCodeReconfigureInProgress (10226): an
	// update met another one (a move, a change of replicas) still under way.
	ErrCodeMoveInProgress        jetstream.ErrorCode = 10124
	ErrCodeReconfigureInProgress jetstream.ErrorCode = 10226
	// ErrCodeNoPlacement (10005): not enough peers online for the stream's replicas
	// ("no suitable peers for placement, peer offline"). A cluster that is still
	// forming its routes answers this for an R3 create; on a cluster that really has
	// fewer servers the setup keeps asking until its deadline and returns this error.
	ErrCodeNoPlacement jetstream.ErrorCode = 10005
)

// Codes that answer a request: a lost compare-and-set, a refused batch, a missing
// message.
const (
	// ErrCodeWrongLastSequence (10071, "wrong last sequence: N"): a publish with
	// Nats-Expected-Last-Subject-Sequence met another last sequence on its subject,
	// which the description names. nats.go matches it to jetstream.ErrKeyExists.
	ErrCodeWrongLastSequence jetstream.ErrorCode = jetstream.JSErrCodeStreamWrongLastSequence
	// ErrCodeWrongLastSequenceInFlight (10164, "wrong last sequence"): the same
	// lost compare-and-set on a replicated stream while another write to the
	// subject is in flight; it names no sequence and matches no nats.go sentinel.
	ErrCodeWrongLastSequenceInFlight jetstream.ErrorCode = jetstream.JSErrCodeStreamWrongLastSequenceConstant
	// ErrCodeWrongLastMsgID (10070, "wrong last msg ID"): a publish with
	// Nats-Expected-Last-Msg-Id found another message last in the stream.
	ErrCodeWrongLastMsgID jetstream.ErrorCode = 10070
	// ErrCodeAtomicDisabled (10174): an atomic batch sent to a stream without
	// AllowAtomicPublish (turned off, or a server that lost the setting).
	ErrCodeAtomicDisabled jetstream.ErrorCode = 10174
	// ErrCodeBatchIncomplete (10176): an atomic batch cut short (a message of it
	// missing when the commit came).
	ErrCodeBatchIncomplete jetstream.ErrorCode = 10176
	// ErrCodeBatchTooMany (10210): too many atomic batches in flight on the stream
	// or on the server.
	ErrCodeBatchTooMany jetstream.ErrorCode = 10210
	// ErrCodeMessageNotFound (10037): a message get found no message.
	ErrCodeMessageNotFound jetstream.ErrorCode = jetstream.JSErrCodeMessageNotFound
)

// Unanswered reports whether err means the server gave no answer to a request: a
// timeout, no responders, no stream response, 10008 (no leader to answer yet), or a
// request that could not even be buffered while the client reconnects. The request
// may or may not have been applied.
func Unanswered(err error) bool {
	if errors.Is(err, context.DeadlineExceeded) || errors.Is(err, nats.ErrTimeout) ||
		errors.Is(err, nats.ErrNoResponders) || errors.Is(err, jetstream.ErrNoStreamResponse) ||
		errors.Is(err, nats.ErrReconnectBufExceeded) {
		return true
	}
	return HasCode(err, ErrCodeClusterNotAvailable)
}

// setupRace reports whether err answers a create or update of a stream with the
// state of a concurrent change rather than with a verdict on the request: the name
// taken by a concurrent create, the stream deleted meanwhile, an update refused
// while another is in flight, every peer offline for a moment, too few peers online
// yet to place the replicas (a cluster still forming). Reading the stream
// again and deciding again is the way to an answer.
func setupRace(err error) bool {
	return errors.Is(err, jetstream.ErrStreamNameAlreadyInUse) || errors.Is(err, jetstream.ErrStreamNotFound) ||
		HasCode(err, ErrCodeStreamNameInUse) || HasCode(err, ErrCodeStreamOffline) ||
		HasCode(err, ErrCodeMoveInProgress) || HasCode(err, ErrCodeReconfigureInProgress) ||
		HasCode(err, ErrCodeNoPlacement)
}

// HasCode reports whether err is, or wraps, a JetStream API error with code.
func HasCode(err error, code jetstream.ErrorCode) bool {
	var apiErr *jetstream.APIError
	return errors.As(err, &apiErr) && apiErr.ErrorCode == code
}
