package kvlease_test

import (
	"context"
	"net/url"
	"testing"
	"time"

	"github.com/nats-io/nats-server/v2/server"
	"github.com/nats-io/nats.go"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/anarchon/anarchon/backend"
	"github.com/anarchon/anarchon/embedded"
	"github.com/anarchon/anarchon/internal/natstest"
	"github.com/anarchon/anarchon/kvlease"
)

// On a server whose max payload is 64 KiB, a calendar of 10,000 dates (about
// 130 KB as JSON) is refused as invalid, saying so, and a small one is stored.
func TestCalendarPastMaxPayload(t *testing.T) {
	t.Parallel()
	ns, err := server.NewServer(&server.Options{ServerName: "small", DontListen: true, NoLog: true, NoSigs: true,
		JetStream: true, StoreDir: t.TempDir(), MaxPayload: 64 << 10})
	require.NoError(t, err)
	go ns.Start()
	require.True(t, ns.ReadyForConnections(10*time.Second), "the nats-server must start")
	t.Cleanup(func() { ns.Shutdown(); ns.WaitForShutdown() })
	nc := natstest.Dial(t, func(o ...nats.Option) (*nats.Conn, error) {
		return nats.Connect("", append(o, nats.InProcessServer(ns))...)
	})
	s := newStore(t, natstest.JetStream(t, nc))
	ctx := t.Context()

	big := backend.Calendar{Name: "big", Dates: make([]string, 10_000)}
	day := time.Date(2000, 1, 1, 0, 0, 0, 0, time.UTC)
	for i := range big.Dates {
		big.Dates[i] = day.AddDate(0, 0, i).Format(time.DateOnly)
	}
	require.NoError(t, big.Check())
	_, err = s.PutCalendar(ctx, big, 0)
	require.ErrorIs(t, err, backend.ErrInvalidCalendar)
	assert.ErrorContains(t, err, "max payload of 65536 bytes")
	_, err = s.GetCalendar(ctx, "big")
	require.ErrorIs(t, err, backend.ErrCalendarNotFound)

	big.Dates = big.Dates[:1000]
	_, err = s.PutCalendar(ctx, big, 0)
	require.NoError(t, err, "a calendar that fits")
}

// After a server restart the calendar watch watches again and delivers the
// calendars as they are now, a deletion missed while it was down included.
func TestWatchCalendarsAfterRestart(t *testing.T) {
	t.Parallel()
	start := func(dir, listen string) *embedded.Server {
		ctx, cancel := context.WithTimeout(t.Context(), 30*time.Second)
		defer cancel()
		srv, err := embedded.Start(ctx, embedded.Options{StoreDir: dir, Listen: listen})
		require.NoError(t, err)
		return srv
	}
	dir := t.TempDir()
	srv := start(dir, "127.0.0.1:0")
	u, err := url.Parse(srv.ClientURL())
	require.NoError(t, err)
	dial := func() *kvlease.Store {
		nc := natstest.Dial(t, func(o ...nats.Option) (*nats.Conn, error) {
			return nats.Connect(srv.ClientURL(), append(o, nats.MaxReconnects(-1), nats.ReconnectWait(20*time.Millisecond))...)
		})
		return newStore(t, natstest.JetStream(t, nc))
	}
	watcher, writer := dial(), dial()
	cal := func(name string) backend.Calendar {
		return backend.Calendar{Name: name, Weekdays: []time.Weekday{time.Sunday}}
	}
	_, err = writer.PutCalendar(t.Context(), cal("a"), 0)
	require.NoError(t, err)

	sets := make(chan []backend.Calendar, 64)
	ctx, cancel := context.WithCancel(t.Context())
	done := make(chan error, 1)
	go func() { done <- watcher.WatchCalendars(ctx, func(all []backend.Calendar) { sets <- all }) }()
	t.Cleanup(func() { cancel(); <-done })
	names := func(all []backend.Calendar) []string {
		out := []string{}
		for _, c := range all {
			out = append(out, c.Name)
		}
		return out
	}
	await := func(want []string, within time.Duration) {
		t.Helper()
		deadline := time.NewTimer(within)
		defer deadline.Stop()
		var last []string
		for {
			select {
			case all := <-sets:
				if last = names(all); assert.ObjectsAreEqual(want, last) {
					return
				}
			case err := <-done:
				require.FailNow(t, "the watch ended", "%v", err)
			case <-deadline.C:
				require.FailNow(t, "the watch never showed the calendars", "want %v, last %v", want, last)
			}
		}
	}
	await([]string{"a"}, 5*time.Second)

	srv.Shutdown()
	srv = start(dir, u.Host)
	t.Cleanup(srv.Shutdown)
	require.Eventually(t, func() bool {
		return writer.DeleteCalendar(t.Context(), "a", 0) == nil
	}, 10*time.Second, 20*time.Millisecond)
	_, err = writer.PutCalendar(t.Context(), cal("b"), 0)
	require.NoError(t, err)
	await([]string{"b"}, 5*time.Second)
}
