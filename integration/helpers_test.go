package integration

import (
	"context"
	"fmt"
	"os"
	"sort"
	"sync"
	"testing"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/stretchr/testify/require"
	"go.uber.org/goleak"

	"github.com/anarchon/anarchon/backend"
	"github.com/anarchon/anarchon/internal/natstest"
	"github.com/anarchon/anarchon/jetstream"
	"github.com/anarchon/anarchon/scheduler"
)

func TestMain(m *testing.M) {
	goleak.VerifyTestMain(m)
}

// ledger records every handler start, by slot, across instances.
type ledger struct {
	mu   sync.Mutex
	runs map[string]map[int64][]scheduler.Run // job → slot ms → starts
}

func newLedger() *ledger { return &ledger{runs: map[string]map[int64][]scheduler.Run{}} }

func (l *ledger) record(r scheduler.Run) {
	l.mu.Lock()
	defer l.mu.Unlock()
	if l.runs[r.Job] == nil {
		l.runs[r.Job] = map[int64][]scheduler.Run{}
	}
	l.runs[r.Job][r.Slot.UnixMilli()] = append(l.runs[r.Job][r.Slot.UnixMilli()], r)
}

func (l *ledger) handler(_ context.Context, r scheduler.Run) error {
	l.record(r)
	return nil
}

// counts reports, for one job's slots in [from, to], how many ran, ran more than
// once (with attempt 1 twice: a duplicate), and did not run.
type counts struct{ slots, ran, dups, missed int }

func (c counts) String() string {
	return fmt.Sprintf("%d slots, %d ran, %d duplicates, %d missed", c.slots, c.ran, c.dups, c.missed)
}

func (l *ledger) count(job string, interval time.Duration, from, to time.Time) counts {
	l.mu.Lock()
	defer l.mu.Unlock()
	sched, _ := scheduler.NewIntervalSchedule(interval)
	var c counts
	for s := sched.Next(from.Add(-time.Millisecond)); !s.After(to); s = sched.Next(s) {
		c.slots++
		n := 0
		for _, r := range l.runs[job][s.UnixMilli()] {
			if r.Attempt == 1 {
				n++
			}
		}
		switch {
		case len(l.runs[job][s.UnixMilli()]) == 0:
			c.missed++
		case n > 1:
			c.dups += n - 1
			c.ran++
		default:
			c.ran++
		}
	}
	return c
}

// duplicates lists the slots of job whose first attempt started more than once, and
// any slot that started more than once with the same attempt number.
func (l *ledger) duplicates(job string) []string {
	l.mu.Lock()
	defer l.mu.Unlock()
	var out []string
	for slot, runs := range l.runs[job] {
		seen := map[int]int{}
		for _, r := range runs {
			seen[r.Attempt]++
		}
		for a, n := range seen {
			if n > 1 {
				out = append(out, fmt.Sprintf("%s attempt %d ran %d times", time.UnixMilli(slot).UTC().Format(time.TimeOnly), a, n))
			}
		}
	}
	sort.Strings(out)
	return out
}

// soak returns how long a fault test keeps injecting faults: d, or the duration in
// ANARCHON_SOAK (e.g. ANARCHON_SOAK=30m go test -race -run LeaderLoss -timeout 2h ./integration/).
func soak(t *testing.T, d time.Duration) time.Duration {
	v := os.Getenv("ANARCHON_SOAK")
	if v == "" {
		return d
	}
	s, err := time.ParseDuration(v)
	if err != nil || s <= 0 {
		t.Fatalf("ANARCHON_SOAK=%q: want a positive duration such as 30m", v)
	}
	t.Logf("soak: injecting faults for %v", s)
	return s
}

func ctxT(t *testing.T, d time.Duration) context.Context {
	ctx, cancel := context.WithTimeout(t.Context(), d)
	t.Cleanup(cancel)
	return ctx
}

// dial connects to url over TCP, reconnecting forever, quickly.
func dial(t *testing.T, url string) *nats.Conn {
	t.Helper()
	return natstest.URL(t, url, nats.MaxReconnects(-1), nats.ReconnectWait(50*time.Millisecond), nats.RetryOnFailedConnect(false))
}

func plainBackend(t *testing.T, nc *nats.Conn, opts ...jetstream.Option) *jetstream.Backend {
	t.Helper()
	b, err := jetstream.New(natstest.JetStream(t, nc), opts...)
	require.NoError(t, err)
	return b
}

func newSched(t *testing.T, b backend.Backend, instance string, clock scheduler.Clock) *scheduler.Scheduler {
	t.Helper()
	s, err := scheduler.New(scheduler.Config{Backend: b, Instance: instance, Clock: clock})
	require.NoError(t, err)
	t.Cleanup(func() { _ = s.Stop(context.Background()) })
	return s
}

func stopAll(t *testing.T, scheds []*scheduler.Scheduler) {
	t.Helper()
	for _, s := range scheds {
		require.NoError(t, s.Stop(ctxT(t, 10*time.Second)))
	}
}

// sleepCtx waits d, or until the test ends.
func sleepCtx(t *testing.T, d time.Duration) {
	select {
	case <-time.After(d):
	case <-t.Context().Done():
	}
}
