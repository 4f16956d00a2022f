package connect

import "errors"

// Errors returned by this package. Match them with errors.Is; nats.go's own
// errors stay reachable too (nats.ErrNoServers, nats.ErrAuthorization, ...).
var (
	// ErrContextNotFound: no NATS context has the name asked for (or the one
	// selected). The message says where contexts were looked for and which exist.
	ErrContextNotFound = errors.New("connect: NATS context not found")
	// ErrNoContextSelected: the name was empty and no context is selected
	// (`nats context select NAME`). This package never falls back to
	// nats://localhost:4222 on its own.
	ErrNoContextSelected = errors.New("connect: no NATS context selected")
	// ErrInvalidContext: the name is not a valid context name, the context file
	// cannot be read, its settings contradict each other, or it asks for what
	// this package does not do (an nsc lookup, a SOCKS proxy, op:// secrets).
	ErrInvalidContext = errors.New("connect: invalid NATS context")
)
