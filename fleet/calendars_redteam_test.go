package fleet_test

import (
	"context"
	"testing"
	"time"

	"github.com/nats-io/nats-server/v2/server"
	"github.com/nats-io/nats.go"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/anarchon/anarchon/fleet"
	"github.com/anarchon/anarchon/scheduler"
)

// TestPutCalendarReplyTooLargeStoresNothing: on a server whose max payload is
// 64 KiB, a calendar whose request fits but whose reply (the calendar as
// stored, with who, when and its revision) would not is refused before it is
// stored: an error never hides a stored change.
func TestPutCalendarReplyTooLargeStoresNothing(t *testing.T) {
	ns, err := server.NewServer(&server.Options{ServerName: "small", DontListen: true, NoLog: true, NoSigs: true,
		JetStream: true, StoreDir: t.TempDir(), MaxPayload: 64 << 10})
	require.NoError(t, err)
	go ns.Start()
	require.True(t, ns.ReadyForConnections(10*time.Second), "the nats-server must start")
	t.Cleanup(func() { ns.Shutdown(); ns.WaitForShutdown() })
	dial := func(opts ...nats.Option) (*nats.Conn, error) {
		return nats.Connect("", append([]nats.Option{nats.InProcessServer(ns)}, opts...)...)
	}
	f := startFleet(t, fleetSetup{instances: []string{"A"}, dial: dial, quiet: true, jobs: declareFeeds})
	ctx := requestCtx(t)

	day := time.Date(2000, 1, 1, 0, 0, 0, 0, time.UTC)
	var dates []string
	for i := range 4800 { // 13 bytes each: a request of 62 KiB, under 64
		dates = append(dates, day.AddDate(0, 0, i).Format(time.DateOnly))
	}
	_, err = f.client.PutCalendar(ctx, fleet.PutCalendarRequest{Calendar: fleet.Calendar{Name: "big", Dates: dates}, By: "ana"})
	require.Error(t, err)
	assert.ErrorIs(t, err, fleet.ErrBadRequest, "refused, not failed after storing")
	_, gerr := f.backend.GetCalendar(context.Background(), "big")
	assert.ErrorIs(t, gerr, scheduler.ErrCalendarNotFound, "nothing stored")

	// One that fits is stored and answered whole.
	put, err := f.client.PutCalendar(ctx, fleet.PutCalendarRequest{Calendar: fleet.Calendar{Name: "big", Dates: dates[:4000]}, By: "ana"})
	require.NoError(t, err)
	assert.Len(t, put.Calendar.Dates, 4000)
}
