// Package integration holds anarchon's multi-instance and fault tests. They break
// things for real: embedded nats-servers and clusters, real connections, real
// restarts. Each test checks an invariant and logs the figure it measured; run them
// with `go test -race -v ./integration/` to see the figures.
package integration
