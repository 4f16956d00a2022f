package fleet

import (
	"context"
	"encoding/json"
	"fmt"
	"time"

	"github.com/nats-io/nats.go"

	"github.com/anarchon/anarchon/scheduler"
)

// AllJobsToken is the last token of the events subject of an event that concerns
// no single job (the all-jobs pause changing): "-", which no JobToken can be.
const AllJobsToken = "-"

// Event is a scheduler event as Events publishes it on
// <prefix>.EVENTS.<JobToken(job)> (AllJobsToken when Job is ""): the fields of
// scheduler.Event, durations in milliseconds and the error as text.
type Event struct {
	Kind scheduler.EventKind `json:"kind"`
	Job  string              `json:"job"`
	// Entry is the schedule entry of the job the event is of: an entry's run
	// and the job's own run of the same slot are two runs.
	Entry    string `json:"entry,omitempty"`
	Instance string `json:"instance"`
	// At is when it happened, by the instance's clock.
	At      time.Time `json:"at"`
	Slot    time.Time `json:"slot,omitzero"`
	Token   string    `json:"token,omitempty"`
	Attempt int       `json:"attempt,omitempty"`
	Manual  bool      `json:"manual,omitempty"`
	// Backfill: the event is of a slot asked for by a backfill.
	Backfill bool                   `json:"backfill,omitempty"`
	Outcome  scheduler.ClaimOutcome `json:"outcome,omitempty"`
	// Status and DurationMS are set on finished.
	Status     scheduler.Status `json:"status,omitempty"`
	DurationMS float64          `json:"duration_ms,omitempty"`
	// LagMS is start − slot, on started.
	LagMS float64 `json:"lag_ms,omitempty"`
	// Next is the next slot, on scheduled.
	Next time.Time `json:"next,omitzero"`
	// Op names the failed call on backend_error.
	Op string `json:"op,omitempty"`
	// Error is the event's error, at most MaxViewError bytes.
	Error string `json:"error,omitempty"`
	// Pause is the pause in force, on pause_changed; absent there: the job runs.
	Pause *PauseInfo `json:"pause,omitempty"`
}

func eventOf(e scheduler.Event) Event {
	out := Event{
		Kind: e.Kind, Job: e.Job, Entry: e.Entry, Instance: e.Instance, At: e.At, Slot: e.Slot, Token: e.Token,
		Attempt: e.Attempt, Manual: e.Manual, Backfill: e.Backfill, Outcome: e.Outcome, Status: e.Status,
		DurationMS: ms(e.Duration), LagMS: ms(e.Lag), Next: e.Next, Op: e.Op,
	}
	if e.Err != nil {
		out.Error = shortText(e.Err.Error())
	}
	if e.Pause != nil {
		out.Pause = pauseInfo(*e.Pause)
	}
	return out
}

func (p subjects) events(job string) string {
	if job == "" {
		return string(p) + "." + verbEvents + "." + AllJobsToken
	}
	return p.job(verbEvents, job)
}

// Events returns a scheduler event hook that publishes every event on nc as JSON
// (Event) on <prefix>.EVENTS.<JobToken(job)>, for `anarchon watch` and
// Client.Watch. The hook is Config.OnEvent, which is set before scheduler.New, so
// Serve cannot install it: a replica chains it with its other hooks.
//
//	events, err := fleet.Events(nc) // fleet.WithPrefix, as given to Serve
//	s, err := scheduler.New(scheduler.Config{Backend: b,
//		OnEvent: scheduler.Chain(events, m.OnEvent)})
//
// Publishing is core NATS, fire and forget: the hook never blocks on a reader, an
// event nobody subscribes to costs one message to the server, and one that cannot
// be sent (the connection is closed or reconnecting with a full buffer) is
// dropped. The caller keeps ownership of nc. Only WithPrefix applies.
func Events(nc *nats.Conn, opts ...Option) (func(scheduler.Event), error) {
	if nc == nil {
		return nil, fmt.Errorf("%w: nil connection", ErrInvalidOption)
	}
	c, err := newConfig(roleEvents, opts)
	if err != nil {
		return nil, err
	}
	subj := subjects(c.prefix)
	return func(e scheduler.Event) {
		data, err := json.Marshal(eventOf(e))
		if err != nil {
			return
		}
		_ = nc.Publish(subj.events(e.Job), data)
	}, nil
}

// Watch calls fn with each event the replicas publish (Events) about job, or about
// every job and the all-jobs pause when job is "", until ctx ends; then it returns
// nil. fn runs on one goroutine, in the order the events arrive; events of
// different replicas arrive in no particular order. Messages that are not events
// are skipped. Watch returns an error only when it cannot subscribe.
func (c *Client) Watch(ctx context.Context, job string, fn func(Event)) error {
	subject := c.subj.fleet(verbEvents) + ".*"
	if job != "" {
		subject = c.subj.events(job)
	}
	ch := make(chan *nats.Msg, 1024)
	sub, err := c.nc.ChanSubscribe(subject, ch)
	if err != nil {
		return fmt.Errorf("fleet: watch %s: %w", subject, err)
	}
	defer func() { _ = sub.Unsubscribe() }()
	fctx, cancel := context.WithTimeout(ctx, c.timeout)
	err = c.nc.FlushWithContext(fctx)
	cancel()
	if err != nil && ctx.Err() == nil {
		return fmt.Errorf("fleet: watch %s: %w", subject, err)
	}
	for {
		select {
		case <-ctx.Done():
			return nil
		case m := <-ch:
			var e Event
			if json.Unmarshal(m.Data, &e) != nil || e.Kind == "" {
				continue
			}
			fn(e)
		}
	}
}

// Active returns job's unfinished runs (every instance's), as one replica that
// declares the job reads them from the run store, from every part of the reply
// (see History).
func (c *Client) Active(ctx context.Context, job string) (ActiveReply, error) {
	out, err := gatherParts(ctx, c, endpoint{c.subj.job(verbActive, job), job}, ActiveRequest{V: RequestVersion},
		func(r *ActiveReply) (int, int, *[]ActiveRun) { return r.Part, r.Parts, &r.Runs })
	out.Part = 0
	return out, err
}
