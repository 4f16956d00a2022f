package jetstream

import (
	"context"
	"errors"
	"strconv"
	"sync"
	"testing"
	"time"

	"github.com/nats-io/nats.go"
	natsjs "github.com/nats-io/nats.go/jetstream"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/anarchon/anarchon/backend"
	"github.com/anarchon/anarchon/backend/memory"
	"github.com/anarchon/anarchon/embedded"
	"github.com/anarchon/anarchon/internal/natstest"
	"github.com/anarchon/anarchon/kvlease"
	"github.com/anarchon/anarchon/scheduler"
)

// modeBackend returns a backend of kind k with a memory run store, made with
// opts too, on its own connection to s.
func modeBackend(t *testing.T, s *embedded.Server, k fleetKind, opts ...Option) *Backend {
	t.Helper()
	js := natstest.JetStream(t, natstest.Conn(t, s))
	if k == plainKind {
		return newBackend(t, js, opts...)
	}
	if k == mixedKind {
		opts = append(opts, WithMixedFleet())
	}
	lb, err := NewLeased(js, memory.NewRunStore(backend.SystemClock{}), opts...)
	require.NoError(t, err)
	return lb.Backend
}

// streamMode returns the claim mode in job's stream ("" without one or a stream).
func streamMode(t *testing.T, js natsjs.JetStream, b *Backend, job string) string {
	t.Helper()
	st, err := js.Stream(ctxFor(t), b.cfg.namesFor(job).stream)
	if errors.Is(err, natsjs.ErrStreamNotFound) {
		return ""
	}
	require.NoError(t, err)
	return st.CachedInfo().Config.Metadata[metaClaims]
}

// setStreamMode sets the claim mode in job's stream, or removes it for "".
func setStreamMode(t *testing.T, js natsjs.JetStream, b *Backend, job, mode string) {
	t.Helper()
	setMetadata(t, js, b.cfg.namesFor(job).stream, func(cfg *natsjs.StreamConfig) {
		delete(cfg.Metadata, metaClaims)
		if mode != "" {
			cfg.Metadata[metaClaims] = mode
		}
	})
}

// TestClaimModes: each kind of instance prepares a job in turn. An instance with
// leases alone refuses a stream in mode "plain". A plain one refuses "leases".
// The error names the job, both modes and the remedy. An accepted instance
// leaves its own mode.
func TestClaimModes(t *testing.T) {
	s := natstest.Server(t, embedded.Options{})
	js := natstest.JetStream(t, natstest.Conn(t, s))
	type step struct {
		kind    fleetKind
		opts    []Option
		refused bool
	}
	plainMixed := step{kind: plainKind, opts: []Option{WithMixedFleet()}}
	for _, c := range []struct {
		name  string
		setup string // a mode set by hand first ("-": none, as an older release left it)
		steps []step
		mode  string
	}{
		{"leases beside plain", "", []step{{kind: plainKind}, {kind: leasedKind, refused: true}}, modePlain},
		{"plain beside leases", "", []step{{kind: leasedKind}, {kind: plainKind, refused: true}}, modeLeases},
		{"the option changes nothing on New", "", []step{{kind: leasedKind}, {kind: plainMixed.kind, opts: plainMixed.opts, refused: true}}, modeLeases},
		{"plain to leases", "", []step{{kind: plainKind}, {kind: mixedKind}, {kind: leasedKind}, {kind: plainKind, refused: true}}, modeLeases},
		{"leases to plain", "", []step{{kind: leasedKind}, {kind: mixedKind}, {kind: plainKind}, {kind: leasedKind, refused: true}}, modePlain},
		{"mixed accepts and is accepted", "", []step{{kind: plainKind}, {kind: mixedKind}, {kind: plainKind}, {kind: mixedKind},
			{kind: leasedKind}, {kind: mixedKind}}, modeMixed},
		{"an older release's stream, then leases", "-", []step{{kind: leasedKind}, {kind: plainKind, refused: true}}, modeLeases},
		{"an older release's stream, then plain", "-", []step{{kind: plainKind}, {kind: leasedKind, refused: true}}, modePlain},
		{"an unknown mode", "quorum", []step{{kind: plainKind, refused: true}, {kind: leasedKind, refused: true},
			{kind: mixedKind, refused: true}}, "quorum"},
	} {
		t.Run(c.name, func(t *testing.T) {
			ctx := ctxFor(t)
			job := jobName("modes")
			if c.setup != "" {
				b := modeBackend(t, s, plainKind)
				require.NoError(t, b.PrepareJob(ctx, limits(job)))
				mode := c.setup
				if mode == "-" {
					mode = ""
				}
				setStreamMode(t, js, b, job, mode)
				require.Equal(t, mode, streamMode(t, js, b, job))
			}
			for i, st := range c.steps {
				b := modeBackend(t, s, st.kind, st.opts...)
				before := streamMode(t, js, b, job)
				err := b.PrepareJob(ctx, limits(job))
				if !st.refused {
					require.NoError(t, err, "step %d: %s", i, st.kind)
					mode := streamMode(t, js, b, job)
					assert.Equal(t, b.claimMode(), mode, "step %d: %s leaves its mode", i, st.kind)
					continue
				}
				require.ErrorIs(t, err, ErrMixedFleet, "step %d: %s", i, st.kind)
				for _, want := range []string{strconv.Quote(job), strconv.Quote(before), strconv.Quote(b.claimMode())} {
					assert.Contains(t, err.Error(), want, "step %d", i)
				}
				if c.setup != "quorum" {
					assert.Contains(t, err.Error(), "WithMixedFleet()")
					assert.Contains(t, err.Error(), "docs/backends.md")
				}
				t.Logf("%s: %v", st.kind, err)
				mode := streamMode(t, js, b, job)
				assert.Equal(t, before, mode, "step %d: a refused instance leaves the mode", i)
			}
			mode := streamMode(t, js, modeBackend(t, s, plainKind), job)
			assert.Equal(t, c.mode, mode)
		})
	}
}

// TestClaimModesOfConcurrentStarts: on a new job, instances of both kinds that
// start at once are not both accepted: the stream's create decides. Instances that
// agree prepare it together without a fight over the mode.
func TestClaimModesOfConcurrentStarts(t *testing.T) {
	s := natstest.Server(t, embedded.Options{})
	prepare := func(kinds ...fleetKind) []error {
		job := jobName("concurrent")
		var bs []*Backend
		for _, k := range kinds {
			bs = append(bs, modeBackend(t, s, k))
		}
		errs := make([]error, len(bs))
		var wg sync.WaitGroup
		for i, b := range bs {
			wg.Go(func() { errs[i] = b.PrepareJob(ctxFor(t), limits(job)) })
		}
		wg.Wait()
		return errs
	}
	for range 5 {
		kinds := []fleetKind{plainKind, leasedKind, plainKind, leasedKind}
		accepted := map[fleetKind]int{}
		for i, err := range prepare(kinds...) {
			if err == nil {
				accepted[kinds[i]]++
			} else {
				require.ErrorIs(t, err, ErrMixedFleet)
			}
		}
		assert.Len(t, accepted, 1, "one kind is accepted: %v", accepted)
		for _, err := range prepare(mixedKind, leasedKind, mixedKind, leasedKind) {
			require.NoError(t, err, "instances with leases agree")
		}
		for _, err := range prepare(mixedKind, plainKind, mixedKind, plainKind) {
			require.NoError(t, err, "a plain instance and one WithMixedFleet agree")
		}
	}
}

// requestCounter counts the requests the server receives from conns: messages
// with a reply subject to the JetStream API, the KV buckets and the job streams.
type requestCounter struct {
	mu    sync.Mutex
	conns []*nats.Conn
	spy   *nats.Conn
	subs  []*nats.Subscription
}

func newRequestCounter(t *testing.T, s *embedded.Server, conns ...*nats.Conn) *requestCounter {
	t.Helper()
	c := &requestCounter{conns: conns, spy: natstest.Conn(t, s)}
	for _, subj := range []string{"$JS.API.>", "$KV.>", DefaultSubjectPrefix + ".>"} {
		sub, err := c.spy.SubscribeSync(subj)
		require.NoError(t, err)
		c.subs = append(c.subs, sub)
	}
	require.NoError(t, c.spy.Flush())
	return c
}

// take returns the requests since the last take. The server routes a
// connection's messages to the spy before it answers that connection's flush.
func (c *requestCounter) take() (int, error) {
	c.mu.Lock()
	defer c.mu.Unlock()
	for _, nc := range append(c.conns, c.spy) {
		if err := nc.Flush(); err != nil {
			return 0, err
		}
	}
	n := 0
	for _, sub := range c.subs {
		pending, _, err := sub.Pending()
		if err != nil {
			return 0, err
		}
		for range pending {
			m, err := sub.NextMsg(time.Second)
			if err != nil {
				return 0, err
			}
			if m.Reply != "" {
				n++
			}
		}
	}
	return n, nil
}

// claimMarker is a kvlease store that calls mark as the first claim of each
// slot starts, and counts the claims of each slot.
type claimMarker struct {
	*kvlease.Store
	mark func()

	mu     sync.Mutex
	claims map[int64]int
}

func (m *claimMarker) Claim(ctx context.Context, in backend.RunClaim) (backend.ClaimResult, error) {
	m.mu.Lock()
	m.claims[in.Slot.UnixMilli()]++
	first := m.claims[in.Slot.UnixMilli()] == 1
	m.mu.Unlock()
	if first {
		m.mark()
	}
	return m.Store.Claim(ctx, in)
}

// TestLeasedWinRoundTrips counts on the server the requests of a won lease, from
// its claim to its handler. By default: the lease key and the run record.
// WithMixedFleet: the slot's claim record too.
func TestLeasedWinRoundTrips(t *testing.T) {
	s := natstest.Server(t, embedded.Options{})
	for _, c := range []struct {
		kind fleetKind
		want int
	}{{leasedKind, 2}, {mixedKind, 3}} {
		t.Run(c.kind.String(), func(t *testing.T) {
			ctx := ctxFor(t)
			nc := natstest.Conn(t, s)
			js := natstest.JetStream(t, nc)
			store, err := kvlease.New(js)
			require.NoError(t, err)
			require.NoError(t, store.Init(ctx))
			t.Cleanup(store.Close)
			spy := newRequestCounter(t, s, nc)
			var opts []Option
			if c.kind == mixedKind {
				opts = append(opts, WithMixedFleet())
			}
			marker := &claimMarker{Store: store, claims: map[int64]int{}, mark: func() {
				if _, err := spy.take(); err != nil {
					t.Error(err)
				}
			}}
			lb, err := NewLeased(js, marker, opts...)
			require.NoError(t, err)
			sc, err := scheduler.New(scheduler.Config{Backend: lb, Instance: "a"})
			require.NoError(t, err)

			type run struct {
				slot int64
				reqs int
			}
			var mu sync.Mutex
			var runs []run
			require.NoError(t, sc.Every(jobName("trips"), 200*time.Millisecond, func(_ context.Context, r scheduler.Run) error {
				n, err := spy.take()
				if err != nil {
					t.Error(err)
				}
				mu.Lock()
				runs = append(runs, run{r.Slot.UnixMilli(), n})
				mu.Unlock()
				return nil
			}))
			require.NoError(t, sc.Start(ctx))
			require.Eventually(t, func() bool {
				mu.Lock()
				defer mu.Unlock()
				return len(runs) >= 8
			}, 10*time.Second, 10*time.Millisecond)
			require.NoError(t, sc.Stop(ctx))

			mu.Lock()
			defer mu.Unlock()
			marker.mu.Lock()
			defer marker.mu.Unlock()
			// The store and the scheduler set up (the server's clock, watchers)
			// beside the first claims. A claim sent again (its answer lost or late
			// on a loaded machine) is not the win path measured here.
			measured := 0
			for i, r := range runs {
				t.Logf("slot %d: %d claims, %d requests from the first to the handler", i, marker.claims[r.slot], r.reqs)
				if i >= 3 && marker.claims[r.slot] == 1 {
					measured++
					assert.Equal(t, c.want, r.reqs, "slot %d", i)
				}
			}
			assert.GreaterOrEqual(t, measured, 3, "slots claimed once")
		})
	}
}
