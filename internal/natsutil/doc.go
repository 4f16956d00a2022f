// Package natsutil is the JetStream plumbing that kvlease and jetstream share, kept
// once rather than as near-copies: which errors are no answer at all, the backoff
// between retries, the layout version in a stream's metadata, and setting up a
// stream that every replica of a service sets up at the same instant.
//
// EnsureStream is the heart of it. A fleet's first start has N instances create the
// same streams at once, often against a cluster that has just elected its leaders;
// a timeout, a 10008 (no leader yet), a "name already in use" from a concurrent
// create or an update that lost to a concurrent one is not an answer, so it asks
// again, with backoff, until its context ends, and it finishes only on a stream
// information request that shows the configuration it needs. It never sends an
// update that would change nothing: N identical updates at once are what times out.
package natsutil
