package kvlease

import (
	"errors"

	"github.com/anarchon/anarchon/internal/option"
)

// Errors of this package. Errors from JetStream are wrapped with %w, so its own
// sentinels (jetstream.ErrKeyRevisionMismatch, nats.ErrTimeout, ...) stay reachable.
var (
	// ErrInvalidOption: an option New cannot accept; the message names it. It
	// matches backend.ErrInvalidOption too, so one errors.Is covers the invalid
	// options of every anarchon package.
	ErrInvalidOption = option.Sentinel("kvlease")
	// ErrNoJetStream: the server answered, but without JetStream (not enabled on the
	// server or for the account).
	ErrNoJetStream = errors.New("kvlease: JetStream is not available")
	// ErrUnsupportedServer: the server cannot keep per-key TTLs (nats-server before
	// 2.11 ignores them, which would make leases permanent).
	ErrUnsupportedServer = errors.New("kvlease: server does not support per-message TTLs (needs nats-server 2.11 or later)")
	// ErrContention: a change kept losing compare-and-set races to other writers of
	// the same run. Retrying later is safe.
	ErrContention = errors.New("kvlease: too many concurrent changes to one run")
	// ErrOlderLayout: Init found a bucket an earlier release set up, whose
	// records this release cannot read. The error names the bucket and the way on.
	ErrOlderLayout = errors.New("kvlease: the bucket was set up by an earlier release")
	// ErrClosed: WatchRun after Close.
	ErrClosed = errors.New("kvlease: store closed")
)
