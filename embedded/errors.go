package embedded

import (
	"errors"

	"github.com/anarchon/anarchon/internal/option"
)

var (
	// ErrInvalidOption is wrapped by every error Start and StartCluster return
	// for an invalid Options or ClusterOptions value. The message names the field.
	// It matches scheduler.ErrInvalidOption too, so one errors.Is covers the
	// invalid options of every anarchon package.
	ErrInvalidOption = option.Sentinel("embedded")

	// ErrInvalidOptions is ErrInvalidOption, under the name it had before every
	// package's sentinel was called ErrInvalidOption.
	//
	// Deprecated: use ErrInvalidOption.
	ErrInvalidOptions = ErrInvalidOption

	// ErrStartFailed is wrapped when nats-server reports a fatal error while
	// starting (a listener that cannot bind, JetStream that cannot enable its
	// store, ...). nats-server's own error, when it gave one, is wrapped too,
	// so errors.Is(err, syscall.EADDRINUSE) and friends work.
	ErrStartFailed = errors.New("embedded: nats-server failed to start")

	// ErrNotReady is wrapped when the server (or cluster) did not become ready
	// before the ReadyTimeout or the context ended. The message carries the
	// last readiness problem seen.
	ErrNotReady = errors.New("embedded: nats-server not ready")

	// ErrNoLeader is returned by Cluster.Leader and Cluster.StreamLeader when
	// no running node currently leads.
	ErrNoLeader = errors.New("embedded: no leader")
)
