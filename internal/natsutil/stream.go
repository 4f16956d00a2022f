package natsutil

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"strings"
	"time"

	"github.com/nats-io/nats.go/jetstream"
)

// maxUpdates bounds the updates one EnsureStream sends. Instances that agree on the
// configuration need one between them; more means that something keeps changing
// the stream to another configuration (instances configured differently, an
// operator), and fighting it until the deadline would help no one.
const maxUpdates = 3

// Streams is what EnsureStream asks of a jetstream.JetStream.
type Streams interface {
	Stream(ctx context.Context, name string) (jetstream.Stream, error)
	CreateStream(ctx context.Context, cfg jetstream.StreamConfig) (jetstream.Stream, error)
	UpdateStream(ctx context.Context, cfg jetstream.StreamConfig) (jetstream.Stream, error)
}

// StreamSetup describes a stream that many instances may set up at once.
type StreamSetup struct {
	// Config is the stream to create when there is none. Its Name names the stream.
	Config jetstream.StreamConfig
	// Reconcile looks at an existing stream's configuration and returns what to
	// update it to, with the names of the settings that change; no names when the
	// stream can be used as it is (nothing is sent then). An error ends the setup:
	// a stream that cannot be used.
	Reconcile func(have jetstream.StreamConfig) (jetstream.StreamConfig, []string, error)
	// Check, when set, judges the configuration a create or an update was answered
	// with; an error ends the setup (a server that dropped a setting it does not
	// know, which no retry would change).
	Check func(got jetstream.StreamConfig) error
	// Attempt bounds each request; the setup as a whole is bounded by its context.
	Attempt time.Duration
	// OnRetry, when set, is told of every request that got no answer, before the
	// wait that follows it.
	OnRetry func(op string, retry int, err error)
}

// StreamResult is what EnsureStream did.
type StreamResult struct {
	// Stream is the stream as the confirming information request showed it:
	// CachedInfo holds its configuration.
	Stream jetstream.Stream
	// Created reports whether a create of this call was accepted (a concurrent
	// identical create is accepted too).
	Created bool
	// Changes names the settings this call's updates changed.
	Changes []string
	// Retries counts the requests that got no answer, or only news of a concurrent
	// change, and were followed by another.
	Retries int
}

// EnsureStream creates the stream, or updates it with what Reconcile asks for, and
// returns once a stream information request shows a configuration that Reconcile
// accepts as it is. Requests that got no answer (Unanswered) and answers that only
// tell of a concurrent change (the name taken by a concurrent create, an update
// refused while another is in flight) are followed by a fresh read and a fresh
// decision, after a backoff, until ctx ends; then the last of them is returned,
// wrapped together with ctx's error. Any other error is returned at once.
func EnsureStream(ctx context.Context, js Streams, s StreamSetup) (StreamResult, error) {
	var (
		res     StreamResult
		last    error  // the last request that got no definite answer
		lastOp  string // and what it was
		updates int
	)
	name := s.Config.Name
	for {
		if last != nil {
			res.Retries++
			if s.OnRetry != nil {
				s.OnRetry(lastOp, res.Retries, last)
			}
			if err := SetupBackoff.Wait(ctx, res.Retries); err != nil {
				return res, fmt.Errorf("no definite answer before the deadline (last, to %s: %w): %w", lastOp, last, err)
			}
			last = nil
		}
		if err := ctx.Err(); err != nil {
			return res, err
		}

		st, err := Attempt(ctx, s.Attempt, func(ctx context.Context) (jetstream.Stream, error) {
			return js.Stream(ctx, name)
		})
		if errors.Is(err, jetstream.ErrStreamNotFound) {
			got, err := Attempt(ctx, s.Attempt, func(ctx context.Context) (jetstream.Stream, error) {
				return js.CreateStream(ctx, s.Config)
			})
			switch {
			case err == nil:
				res.Created = true
				if err := check(s, got); err != nil {
					return res, err
				}
			case Unanswered(err) || setupRace(err):
				last, lastOp = err, "create"
			default:
				return res, fmt.Errorf("create: %w", err)
			}
			continue // to confirm what is there now
		}
		if err != nil {
			if Unanswered(err) {
				last, lastOp = err, "read"
				continue
			}
			return res, fmt.Errorf("read: %w", err)
		}

		upd, changes, err := s.Reconcile(st.CachedInfo().Config)
		if err != nil {
			return res, err
		}
		if len(changes) == 0 {
			res.Stream = st
			return res, nil
		}
		if updates == maxUpdates {
			return res, fmt.Errorf("update (%s): sent %d updates, and each time something changed the stream back: are other instances configured differently?",
				strings.Join(changes, ", "), updates)
		}
		got, err := Attempt(ctx, s.Attempt, func(ctx context.Context) (jetstream.Stream, error) {
			return js.UpdateStream(ctx, upd)
		})
		switch {
		case err == nil:
			updates++
			for _, c := range changes {
				if !slices.Contains(res.Changes, c) {
					res.Changes = append(res.Changes, c)
				}
			}
			if err := check(s, got); err != nil {
				return res, err
			}
		case Unanswered(err) || setupRace(err):
			last, lastOp = err, "update ("+strings.Join(changes, ", ")+")"
		default:
			return res, fmt.Errorf("update (%s): %w", strings.Join(changes, ", "), err)
		}
	}
}

func check(s StreamSetup, got jetstream.Stream) error {
	if s.Check == nil || got == nil || got.CachedInfo() == nil {
		return nil
	}
	return s.Check(got.CachedInfo().Config)
}
