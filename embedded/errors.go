package embedded

import "errors"

var (
	// ErrInvalidOptions is wrapped by every error Start and StartCluster return
	// for an invalid Options or ClusterOptions value. The message names the field.
	ErrInvalidOptions = errors.New("embedded: invalid options")

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
