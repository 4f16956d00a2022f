package jetstream

import (
	"testing"
	"time"

	natsjs "github.com/nats-io/nats.go/jetstream"
	"github.com/stretchr/testify/require"

	"github.com/anarchon/anarchon/backend"
	"github.com/anarchon/anarchon/backend/backendtest"
	"github.com/anarchon/anarchon/backend/memory"
	"github.com/anarchon/anarchon/embedded"
	"github.com/anarchon/anarchon/internal/natstest"
	"github.com/anarchon/anarchon/kvlease"
)

// TestConformance runs the claim conformance suite against one embedded server.
func TestConformance(t *testing.T) {
	s := natstest.Server(t, embedded.Options{})
	js := natstest.JetStream(t, natstest.Conn(t, s))
	backendtest.Run(t, func(t *testing.T) backend.Backend {
		b, err := New(js)
		if err != nil {
			t.Fatal(err)
		}
		return b
	})
}

// TestConformanceR3 runs the suite against R3 streams in a 3-node cluster (claims from
// several connections at once are in TestClaimRaceAcrossNodes).
func TestConformanceR3(t *testing.T) {
	c := natstest.Cluster(t, embedded.ClusterOptions{Nodes: 3})
	js := natstest.JetStream(t, natstest.Dial(t, c.Connect))
	backendtest.Run(t, func(t *testing.T) backend.Backend {
		b, err := New(js, WithReplicas(3))
		if err != nil {
			t.Fatal(err)
		}
		return b
	})
}

// TestConformanceLeased runs the suite against a LeasedBackend: leases change how
// the scheduler claims, not what the backend's own methods promise.
func TestConformanceLeased(t *testing.T) {
	s := natstest.Server(t, embedded.Options{})
	js := natstest.JetStream(t, natstest.Conn(t, s))
	backendtest.Run(t, func(t *testing.T) backend.Backend {
		b, err := NewLeased(js, memory.NewRunStore(backend.SystemClock{}))
		if err != nil {
			t.Fatal(err)
		}
		return b
	})
}

// TestConformanceEntries runs the entry section of the suite against
// LeasedBackends whose run store is a kvlease store (each value its own backend
// and store on its own connection, all on one bucket): entries in the bucket,
// their runs' records on their own subjects of their job's stream.
func TestConformanceEntries(t *testing.T) {
	s := natstest.Server(t, embedded.Options{})
	runEntriesConformance(t, func(t *testing.T) natsjs.JetStream { return natstest.JetStream(t, natstest.Conn(t, s)) })
}

// TestConformanceEntriesR3 is TestConformanceEntries on R3 streams and an R3
// bucket in a 3-node cluster.
func TestConformanceEntriesR3(t *testing.T) {
	c := natstest.Cluster(t, embedded.ClusterOptions{Nodes: 3})
	runEntriesConformance(t, func(t *testing.T) natsjs.JetStream { return natstest.JetStream(t, natstest.Dial(t, c.Connect)) },
		WithReplicas(3))
}

func runEntriesConformance(t *testing.T, js func(t *testing.T) natsjs.JetStream, opts ...Option) {
	replicas := []kvlease.Option{kvlease.WithBucket("entries")}
	if len(opts) > 0 {
		replicas = append(replicas, kvlease.WithReplicas(3))
	}
	backendtest.RunEntries(t, func(t *testing.T) backend.Backend {
		conn := js(t)
		runs, err := kvlease.New(conn, replicas...)
		require.NoError(t, err)
		t.Cleanup(runs.Close)
		b, err := NewLeased(conn, runs, opts...)
		require.NoError(t, err)
		return b
	})
}

// TestConformanceCalendars runs the calendar section of the suite against
// LeasedBackends whose run store is a kvlease store (each value its own backend
// and store on its own connection, all on one bucket).
func TestConformanceCalendars(t *testing.T) {
	s := natstest.Server(t, embedded.Options{})
	runCalendarsConformance(t, func(t *testing.T) natsjs.JetStream { return natstest.JetStream(t, natstest.Conn(t, s)) })
}

// TestConformanceCalendarsR3 is TestConformanceCalendars on an R3 bucket in a
// 3-node cluster.
func TestConformanceCalendarsR3(t *testing.T) {
	c := natstest.Cluster(t, embedded.ClusterOptions{Nodes: 3})
	runCalendarsConformance(t, func(t *testing.T) natsjs.JetStream { return natstest.JetStream(t, natstest.Dial(t, c.Connect)) },
		WithReplicas(3))
}

func runCalendarsConformance(t *testing.T, js func(t *testing.T) natsjs.JetStream, opts ...Option) {
	replicas := []kvlease.Option{kvlease.WithBucket("calendars")}
	if len(opts) > 0 {
		replicas = append(replicas, kvlease.WithReplicas(3))
	}
	backendtest.RunCalendars(t, func(t *testing.T) backend.Backend {
		conn := js(t)
		runs, err := kvlease.New(conn, replicas...)
		require.NoError(t, err)
		t.Cleanup(runs.Close)
		b, err := NewLeased(conn, runs, opts...)
		require.NoError(t, err)
		return b
	})
}

// TestConformanceMembers runs the membership section of the suite against
// LeasedBackends whose run store is a kvlease store.
func TestConformanceMembers(t *testing.T) {
	s := natstest.Server(t, embedded.Options{})
	js := func(t *testing.T) natsjs.JetStream { return natstest.JetStream(t, natstest.Conn(t, s)) }
	backendtest.RunMembers(t, func(t *testing.T) backend.Backend {
		conn := js(t)
		runs, err := kvlease.New(conn, kvlease.WithBucket("members"))
		require.NoError(t, err)
		t.Cleanup(runs.Close)
		b, err := NewLeased(conn, runs)
		require.NoError(t, err)
		return b
	})
}

// A LeasedBackend whose run store keeps no members says so.
func TestLeasedMembersNotSupported(t *testing.T) {
	s := natstest.Server(t, embedded.Options{})
	js := natstest.JetStream(t, natstest.Conn(t, s))
	b, err := NewLeased(js, memory.NewRunStore(backend.SystemClock{}))
	require.NoError(t, err)
	err = b.Beat(t.Context(), backend.Member{Instance: "a"}, time.Minute)
	require.ErrorIs(t, err, backend.ErrMembershipNotSupported)
	require.ErrorIs(t, b.Leave(t.Context(), "a"), backend.ErrMembershipNotSupported)
	require.ErrorIs(t, b.WatchMembers(t.Context(), func([]backend.Member) {}), backend.ErrMembershipNotSupported)
}

// A LeasedBackend whose run store keeps no calendars says so.
func TestLeasedCalendarsNotSupported(t *testing.T) {
	s := natstest.Server(t, embedded.Options{})
	js := natstest.JetStream(t, natstest.Conn(t, s))
	b, err := NewLeased(js, memory.NewRunStore(backend.SystemClock{}))
	require.NoError(t, err)
	_, err = b.Calendars(t.Context())
	require.ErrorIs(t, err, backend.ErrCalendarsNotSupported)
	_, err = b.PutCalendar(t.Context(), backend.Calendar{Name: "x", Weekdays: []time.Weekday{time.Sunday}}, 0)
	require.ErrorIs(t, err, backend.ErrCalendarsNotSupported)
}

// TestDeadlinesPlain: deadlines judged by a fleet without leases, its claims
// de-duplicated publishes.
func TestDeadlinesPlain(t *testing.T) {
	s := natstest.Server(t, embedded.Options{})
	js := natstest.JetStream(t, natstest.Conn(t, s))
	backendtest.RunDeadlines(t, func(t *testing.T) backend.Backend {
		b, err := New(js)
		if err != nil {
			t.Fatal(err)
		}
		return b
	})
}
