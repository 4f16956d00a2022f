package fleet_test

import (
	"context"
	"slices"
	"sync"
	"testing"

	"github.com/nats-io/nats.go"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/anarchon/anarchon/backend/memory"
	"github.com/anarchon/anarchon/embedded"
	"github.com/anarchon/anarchon/fleet"
	"github.com/anarchon/anarchon/internal/natstest"
	"github.com/anarchon/anarchon/scheduler"
)

type callKey struct{}

const callHeader = "X-Call"

// seenCalls records the X-Call header of every request a replica served.
type seenCalls struct {
	mu    sync.Mutex
	calls []string
}

func (s *seenCalls) add(c string) {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.calls = append(s.calls, c)
}

func (s *seenCalls) get() []string {
	s.mu.Lock()
	defer s.mu.Unlock()
	return slices.Clone(s.calls)
}

// WithRequestHeaders adds headers, made from the call's context, to every request
// a client sends; WithRequestContext turns them into the context the replica
// serves the request with, whose values a triggered run's handler carries.
func TestRequestHeadersReachTheReplica(t *testing.T) {
	served := &seenCalls{}
	handled := make(chan any, 1)
	f := startFleet(t, fleetSetup{
		instances: []string{"A"},
		serve: []fleet.Option{fleet.WithRequestContext(func(ctx context.Context, h nats.Header) context.Context {
			served.add(h.Get(callHeader))
			return context.WithValue(ctx, callKey{}, h.Get(callHeader))
		})},
		client: []fleet.Option{fleet.WithRequestHeaders(func(ctx context.Context, h nats.Header) {
			if v, ok := ctx.Value(callKey{}).(string); ok {
				h.Set(callHeader, v)
			}
		})},
		handler: func(ctx context.Context, run scheduler.Run) error {
			if run.Manual {
				handled <- ctx.Value(callKey{})
			}
			return nil
		},
	})
	call := func(name string) context.Context { return context.WithValue(requestCtx(t), callKey{}, name) }

	r, err := f.client.Trigger(call("trigger"), jobReport, fleet.TriggerRequest{Wait: true})
	require.NoError(t, err)
	assert.Equal(t, scheduler.StatusOK, r.Run.Status)
	assert.Equal(t, "trigger", <-handled, "the run's handler carries what the trigger's headers said")
	_, err = f.client.History(call("history"), jobReport, 5)
	require.NoError(t, err)
	_, err = f.client.Active(call("active"), jobReport)
	require.NoError(t, err)
	_, err = f.client.Pause(call("pause"), jobReport, fleet.PauseRequest{Reason: "headers"})
	require.NoError(t, err)
	_, err = f.client.Resume(call("resume"), jobReport, fleet.ResumeRequest{})
	require.NoError(t, err)
	_, err = f.client.Jobs(call("jobs"))
	require.NoError(t, err)
	assert.ElementsMatch(t, []string{"trigger", "history", "active", "pause", "resume", "jobs"}, served.get(),
		"every kind of request carried its headers")

	// A client without the option sends none; a call whose context adds none
	// sends none either.
	plain, err := fleet.NewClient(natstest.Dial(t, f.dial))
	require.NoError(t, err)
	_, err = plain.History(call("plain"), jobReport, 1)
	require.NoError(t, err)
	_, err = f.client.History(requestCtx(t), jobReport, 1)
	require.NoError(t, err)
	assert.Equal(t, []string{"", ""}, served.get()[6:])
}

// A WithRequestContext that panics or returns nil leaves the request served with
// the service's own context: the replica answers, and stays up.
func TestRequestContextThatFailsIsLeftOut(t *testing.T) {
	for name, fn := range map[string]func(context.Context, nats.Header) context.Context{
		"panics":      func(context.Context, nats.Header) context.Context { panic("hostile header") },
		"returns nil": func(context.Context, nats.Header) context.Context { return nil },
	} {
		t.Run(name, func(t *testing.T) {
			f := startFleet(t, fleetSetup{instances: []string{"A"}, serve: []fleet.Option{fleet.WithRequestContext(fn)}, quiet: true})
			r, err := f.client.Trigger(requestCtx(t), jobReport, fleet.TriggerRequest{Wait: true})
			require.NoError(t, err)
			assert.Equal(t, scheduler.StatusOK, r.Run.Status)
			h, err := f.client.History(requestCtx(t), jobReport, 5)
			require.NoError(t, err)
			assert.Len(t, h.Runs, 1)
		})
	}
}

// The header options belong to the client and the service: given elsewhere, or
// nil, they are refused.
func TestHeaderOptionsAreChecked(t *testing.T) {
	ns := natstest.Server(t, embedded.Options{})
	nc := natstest.Conn(t, ns)
	s, err := scheduler.New(scheduler.Config{Backend: memory.New()})
	require.NoError(t, err)
	headers := fleet.WithRequestHeaders(func(context.Context, nats.Header) {})
	reqCtx := fleet.WithRequestContext(func(ctx context.Context, _ nats.Header) context.Context { return ctx })

	_, err = fleet.NewClient(nc, reqCtx)
	assert.ErrorIs(t, err, fleet.ErrInvalidOption, "WithRequestContext is Serve's")
	_, err = fleet.NewClient(nc, fleet.WithRequestHeaders(nil))
	assert.ErrorIs(t, err, fleet.ErrInvalidOption)
	_, err = fleet.Serve(t.Context(), nc, s, headers)
	assert.ErrorIs(t, err, fleet.ErrInvalidOption, "WithRequestHeaders is NewClient's")
	_, err = fleet.Serve(t.Context(), nc, s, fleet.WithRequestContext(nil))
	assert.ErrorIs(t, err, fleet.ErrInvalidOption)
	_, err = fleet.Events(nc, headers)
	assert.ErrorIs(t, err, fleet.ErrInvalidOption)
}
