package integration

import (
	"context"
	"fmt"
	"log/slog"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/anarchon/anarchon/backend"
	"github.com/anarchon/anarchon/embedded"
	"github.com/anarchon/anarchon/internal/natstest"
	"github.com/anarchon/anarchon/scheduler"
)

// cancelProbe is a handler whose every run lasts until its context ends, and
// what it saw: each run's start and end, and the cause that ended it.
type cancelProbe struct {
	mu      sync.Mutex
	running int
	most    int // most handlers running at once
	runs    []cancelRun
}

type cancelRun struct {
	run        scheduler.Run
	start, end time.Time
	cause      error
}

func (p *cancelProbe) handler(ctx context.Context, r scheduler.Run) error {
	p.mu.Lock()
	p.running++
	p.most = max(p.most, p.running)
	i := len(p.runs)
	p.runs = append(p.runs, cancelRun{run: r, start: time.Now()})
	p.mu.Unlock()
	<-ctx.Done()
	p.mu.Lock()
	p.running--
	p.runs[i].end, p.runs[i].cause = time.Now(), context.Cause(ctx)
	p.mu.Unlock()
	return ctx.Err()
}

func (p *cancelProbe) get() ([]cancelRun, int) {
	p.mu.Lock()
	defer p.mu.Unlock()
	return append([]cancelRun(nil), p.runs...), p.most
}

// Each slot of a cancel-other job replaces the run of the slot before it, across
// instances on a real server: the old run's context ends with the cause naming the
// slot that asked, the job never has two handlers at once, and history records
// each replaced run cancelled, saying by whom.
func TestCancelOtherReplacesARunNATS(t *testing.T) {
	t.Parallel()
	for _, replicas := range []int{1, 3} {
		t.Run(fmt.Sprintf("R%d", replicas), func(t *testing.T) {
			var urls string
			if replicas == 1 {
				urls = natstest.Server(t, embedded.Options{Listen: "127.0.0.1:0"}).ClientURL()
			} else {
				urls = strings.Join(faultCluster(t).ClientURLs(), ",")
			}
			const interval = 3 * time.Second
			p := &cancelProbe{}
			log := slog.New(slog.NewTextHandler(t.Output(), &slog.HandlerOptions{Level: slog.LevelInfo}))
			var scheds []*scheduler.Scheduler
			for i := range 3 {
				name := fmt.Sprintf("inst-%c", 'a'+i)
				b := leased(t, dial(t, urls), replicas)
				s, err := scheduler.New(scheduler.Config{Backend: b, Instance: name, Logger: log.With("instance", name)})
				require.NoError(t, err)
				t.Cleanup(func() { _ = s.Stop(context.Background()) })
				require.NoError(t, s.Every("replaced", interval, p.handler, scheduler.WithOverlap(scheduler.OverlapCancelOther),
					scheduler.WithLease(2*time.Second), scheduler.WithMaxLate(2*time.Second)))
				scheds = append(scheds, s)
			}
			for _, s := range scheds {
				require.NoError(t, s.Start(ctxT(t, 30*time.Second)))
			}
			// Four slot times or more: at least three runs replaced by the next.
			deadline := time.Now().Add(8 * interval)
			for {
				runs, _ := p.get()
				if done := 0; len(runs) >= 4 {
					for _, r := range runs {
						if !r.end.IsZero() {
							done++
						}
					}
					if done >= 3 {
						break
					}
				}
				require.True(t, time.Now().Before(deadline), "three replaced runs within %v: %+v", 8*interval, runs)
				time.Sleep(100 * time.Millisecond)
			}
			stopAt := time.Now()
			for _, s := range scheds {
				// The last run lasts until Stop cancels it, after a second, and
				// is handed over to the instances not stopped yet.
				if err := s.Stop(ctxT(t, time.Second)); err != nil {
					t.Logf("stop %s: %v", s.Instance(), err)
				}
			}
			runs, most := p.get()
			assert.Equal(t, 1, most, "never two handlers of the job at once")
			seen := map[int64]bool{}
			replaced := 0
			for i, r := range runs {
				if r.end.IsZero() || r.end.After(stopAt) {
					break // ended by Stop, and handed over
				}
				replaced++
				assert.False(t, seen[r.run.Slot.UnixMilli()], "slot %v ran twice", r.run.Slot)
				seen[r.run.Slot.UnixMilli()] = true
				assert.Equal(t, 1, r.run.Attempt)
				assert.ErrorIs(t, r.cause, scheduler.ErrOverlapCancelled, "run %d (slot %v on %s)", i, r.run.Slot, r.run.Instance)
				require.Greater(t, len(runs), i+1)
				assert.True(t, runs[i+1].run.Slot.After(r.run.Slot), "replaced by a later slot")
				assert.False(t, runs[i+1].start.Before(r.end), "the next run starts after this one ended")
			}
			assert.GreaterOrEqual(t, replaced, 3)
			hist, err := scheds[0].History(ctxT(t, 10*time.Second), "replaced", 50)
			require.NoError(t, err)
			cancelled := 0
			for _, rec := range hist {
				if rec.Status == scheduler.StatusCancelled && strings.Contains(rec.Error, "cancel-other") {
					assert.Contains(t, rec.Error, "asked from instance inst-")
					cancelled++
				}
			}
			assert.GreaterOrEqual(t, cancelled, 3, "the replaced runs are recorded cancelled: %+v", hist)
			var lines []string
			for _, r := range runs {
				lines = append(lines, fmt.Sprintf("%s@%s %v→%v", r.run.Instance, r.run.Slot.Format("05.000"), r.start.Sub(r.run.Slot).Round(time.Millisecond), r.end.Sub(r.run.Slot).Round(time.Millisecond)))
			}
			t.Logf("runs: %s", strings.Join(lines, ", "))
		})
	}
}

// A store that has no cancel requests is refused at registration.
func TestCancelOtherNeedsLeasesNATS(t *testing.T) {
	srv := natstest.Server(t, embedded.Options{Listen: "127.0.0.1:0"})
	s, err := scheduler.New(scheduler.Config{Backend: plainBackend(t, dial(t, srv.ClientURL())), Instance: "a"})
	require.NoError(t, err)
	err = s.Every("replaced", time.Minute, func(context.Context, scheduler.Run) error { return nil },
		scheduler.WithOverlap(backend.OverlapCancelOther))
	require.ErrorIs(t, err, scheduler.ErrInvalidOption)
}
