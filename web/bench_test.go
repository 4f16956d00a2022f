package web_test

import (
	"context"
	"fmt"
	"io"
	"net/http"
	"net/http/httptest"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/anarchon/anarchon/embedded"
	"github.com/anarchon/anarchon/fleet"
	"github.com/anarchon/anarchon/internal/natstest"
	"github.com/anarchon/anarchon/jetstream"
	"github.com/anarchon/anarchon/kvlease"
	"github.com/anarchon/anarchon/scheduler"
	"github.com/anarchon/anarchon/web"
)

// fixedSource is a Source that holds a fleet in memory, as a cache in front of a
// client would: the pages' own cost, without the reads.
type fixedSource struct {
	fleet   *fleet.Fleet
	history map[string][]fleet.Run
}

func (s *fixedSource) Jobs(context.Context) (*fleet.Fleet, error) { return s.fleet, nil }

func (s *fixedSource) History(_ context.Context, job string, limit int) (fleet.HistoryReply, error) {
	runs, ok := s.history[job]
	if !ok {
		return fleet.HistoryReply{}, fleet.ErrUnknownJob
	}
	return fleet.HistoryReply{Job: job, Instance: "replica-a", Limit: limit, Runs: runs[:min(limit, len(runs))]}, nil
}

func (s *fixedSource) Active(_ context.Context, job string) (fleet.ActiveReply, error) {
	return fleet.ActiveReply{Job: job, Instance: "replica-a", Runs: []fleet.ActiveRun{}}, nil
}

func (s *fixedSource) Trigger(context.Context, string, fleet.TriggerRequest) (fleet.TriggerReply, error) {
	return fleet.TriggerReply{}, fleet.ErrNotSupported
}

func (s *fixedSource) Pause(context.Context, string, fleet.PauseRequest) (fleet.PauseReply, error) {
	return fleet.PauseReply{}, fleet.ErrNotSupported
}

func (s *fixedSource) Resume(context.Context, string, fleet.ResumeRequest) (fleet.ResumeReply, error) {
	return fleet.ResumeReply{}, fleet.ErrNotSupported
}

// Entries, Entry and UpdateEntry: the fleet's backend stores no schedule entries.
func (s *fixedSource) Entries(context.Context, string, fleet.EntriesRequest) (fleet.EntriesReply, error) {
	return fleet.EntriesReply{}, fleet.ErrNotSupported
}

func (s *fixedSource) Entry(context.Context, string, fleet.EntryRequest) (fleet.EntryReply, error) {
	return fleet.EntryReply{}, fleet.ErrNotSupported
}

func (s *fixedSource) UpdateEntry(context.Context, string, fleet.UpdateEntryRequest) (fleet.EntryChangeReply, error) {
	return fleet.EntryChangeReply{}, fleet.ErrNotSupported
}

func (s *fixedSource) AddEntry(context.Context, string, fleet.AddEntryRequest) (fleet.EntryChangeReply, error) {
	return fleet.EntryChangeReply{}, fleet.ErrNotSupported
}

func (s *fixedSource) RemoveEntry(context.Context, string, fleet.RemoveEntryRequest) (fleet.RemoveEntryReply, error) {
	return fleet.RemoveEntryReply{}, fleet.ErrNotSupported
}

// bigFleet is jobs jobs with runs runs each on three replicas, every tenth job
// failing and every seventh paused, as a replica's answers summarise them.
func bigFleet(jobs, runs int) *fixedSource {
	now := time.Date(2026, 11, 30, 12, 0, 0, 0, time.UTC)
	src := &fixedSource{fleet: &fleet.Fleet{}, history: map[string][]fleet.Run{}}
	replicas := []string{"replica-a", "replica-b", "replica-c"}
	for _, r := range replicas {
		src.fleet.Replicas = append(src.fleet.Replicas, fleet.Replica{Instance: r, Version: fleet.Version, Backend: "jetstream", PauseSupported: true})
	}
	for i := range jobs {
		name := fmt.Sprintf("job-%03d <%d>", i, i)
		var hist []fleet.Run
		for k := range runs {
			slot := now.Add(-time.Duration(k) * time.Minute)
			r := fleet.Run{Job: name, Slot: slot, Instance: replicas[k%3], Token: fmt.Sprintf("%032x", i*runs+k), Attempt: 1,
				Fence: uint64(slot.UnixNano()), Status: scheduler.StatusOK, StartedAt: slot.Add(40 * time.Millisecond),
				FinishedAt: slot.Add(90 * time.Millisecond), DurationMS: 50, LagMS: 40}
			if i%10 == 0 && k%2 == 0 {
				r.Status, r.Error = scheduler.StatusError, "dial tcp 10.0.0.7:5432: connect: connection refused"
			}
			hist = append(hist, r)
		}
		src.history[name] = hist
		j := fleet.JobSummary{Name: name, Schedule: "every 1m0s", Replicas: replicas, State: fleet.JobActive,
			Next: now.Add(time.Minute), LastRun: &hist[0], LastSuccess: &hist[1], LastFailure: &hist[0], ViewFrom: "replica-a"}
		if i%7 == 0 {
			j.State, j.Pause = fleet.JobPaused, &fleet.PauseInfo{Job: name, Reason: "maintenance", By: "ana", At: now, Until: now.Add(time.Hour)}
			j.PausedOn = replicas
		}
		src.fleet.Jobs = append(src.fleet.Jobs, j)
	}
	for i := range src.fleet.Replicas {
		for _, j := range src.fleet.Jobs {
			src.fleet.Replicas[i].Jobs = append(src.fleet.Replicas[i].Jobs, fleet.JobState{Name: j.Name, Schedule: j.Schedule, State: j.State})
		}
	}
	return src
}

func benchPage(b *testing.B, h http.Handler, path string, accept string) {
	b.Helper()
	req := httptest.NewRequest(http.MethodGet, path, nil)
	if accept != "" {
		req.Header.Set("Accept", accept)
	}
	var size int
	for b.Loop() {
		rec := httptest.NewRecorder()
		h.ServeHTTP(rec, req)
		if rec.Code != http.StatusOK {
			b.Fatalf("%s: %d %s", path, rec.Code, rec.Body.String())
		}
		size = rec.Body.Len()
	}
	b.ReportMetric(float64(size), "bytes/page")
}

// BenchmarkJobsPage: the server-side render of the jobs page for 100 jobs (100
// runs each behind them), from a source that holds them: what the page costs
// beyond the reads. go test -run '^$' -bench 'JobsPage$|JobPage$' -benchmem ./web/
func BenchmarkJobsPage(b *testing.B) {
	h, err := web.New(web.Config{Source: bigFleet(100, 100), Authorize: func(*http.Request) bool { return true }})
	require.NoError(b, err)
	b.Run("html", func(b *testing.B) { benchPage(b, h, "/", "") })
	b.Run("json", func(b *testing.B) { benchPage(b, h, "/", "application/json") })
}

// BenchmarkJobPage: one job's page with its 100 runs.
func BenchmarkJobPage(b *testing.B) {
	h, err := web.New(web.Config{Source: bigFleet(100, 100), HistoryLimit: 100})
	require.NoError(b, err)
	b.Run("html", func(b *testing.B) { benchPage(b, h, "/job/job-042%20%3C42%3E", "") })
}

// BenchmarkJobsPageNATS: the real path. 100 jobs with 100 runs each, stored by
// the JetStream backend with kvlease leases on an embedded nats-server; three
// replicas serve the fleet service; the page reads them through a fleet.Client
// (one scatter-gather, which waits its gather window) and renders. Each
// iteration is one GET of the jobs page over HTTP, and the time of the reads is
// reported apart (reads-ms/op). replica-answer is the time of the first reply to
// <prefix>.JOBS: what one replica's view of 100 jobs costs to compute.
// go test -run '^$' -bench JobsPageNATS -benchtime 5x -v ./web/
func BenchmarkJobsPageNATS(b *testing.B) {
	const jobs, runs = 100, 100
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Minute)
	defer cancel()
	ns := natstest.Server(b, embedded.Options{})
	var scheds []*scheduler.Scheduler
	for _, id := range []string{"replica-a", "replica-b", "replica-c"} {
		nc := natstest.Conn(b, ns)
		js := natstest.JetStream(b, nc)
		store, err := kvlease.New(js)
		require.NoError(b, err)
		defer store.Close()
		be, err := jetstream.NewLeased(js, store)
		require.NoError(b, err)
		s, err := scheduler.New(scheduler.Config{Backend: be, Instance: id})
		require.NoError(b, err)
		for i := range jobs {
			// Every 365 days: no scheduled slot during the benchmark; the runs are manual.
			require.NoError(b, s.Every(fmt.Sprintf("job-%03d", i), 365*24*time.Hour, func(context.Context, scheduler.Run) error { return nil }))
		}
		require.NoError(b, s.Start(ctx))
		defer func() { _ = s.Stop(context.Background()) }()
		svc, err := fleet.Serve(ctx, nc, s)
		require.NoError(b, err)
		defer func() { _ = svc.Stop(context.Background()) }()
		scheds = append(scheds, s)
	}
	// 100 manual runs per job, recorded in its stream.
	began := time.Now()
	var wg sync.WaitGroup
	errs := make(chan error, jobs)
	for i := range jobs {
		wg.Go(func() {
			for k := range runs {
				if _, err := scheds[k%3].RunNow(ctx, fmt.Sprintf("job-%03d", i)); err != nil {
					errs <- err
					return
				}
			}
		})
	}
	wg.Wait()
	close(errs)
	require.NoError(b, <-errs)
	b.Logf("stored %d runs in %v", jobs*runs, time.Since(began).Round(time.Millisecond))
	// What one replica's answer costs: the first reply to <prefix>.JOBS, each
	// replica computing its view of the 100 jobs (one batched read of the last
	// runs, one read of the unfinished runs per job).
	b.Run("replica-answer", func(b *testing.B) {
		nc := natstest.Conn(b, ns)
		for b.Loop() {
			m, err := nc.Request("anarchon.JOBS", []byte(`{"v":1}`), 10*time.Second)
			require.NoError(b, err)
			require.Greater(b, len(m.Data), jobs*100)
		}
	})
	for _, window := range []time.Duration{fleet.DefaultGatherWindow} {
		b.Run("gather="+window.String(), func(b *testing.B) {
			client, err := fleet.NewClient(natstest.Conn(b, ns), fleet.WithGatherWindow(window))
			require.NoError(b, err)
			src := &timedSource{Source: client}
			h, err := web.New(web.Config{Source: src})
			require.NoError(b, err)
			srv := httptest.NewServer(h)
			defer srv.Close()
			var body string
			for b.Loop() {
				resp, err := http.Get(srv.URL + "/")
				require.NoError(b, err)
				raw, err := io.ReadAll(resp.Body)
				resp.Body.Close()
				require.NoError(b, err)
				require.Equal(b, http.StatusOK, resp.StatusCode)
				body = string(raw)
			}
			require.Contains(b, body, "100 of 100 jobs on 3 replicas")
			b.ReportMetric(float64(src.total.Milliseconds())/float64(src.n), "reads-ms/op")
			// A job whose runs no replica could read within its budget has a warning
			// (in the last page).
			b.ReportMetric(float64(strings.Count(body, `<span class="warn-mark"`)), "jobs-warned")
			if f := src.last; f != nil && len(f.Jobs) > 0 && len(f.Jobs[0].Warnings) > 0 {
				b.Logf("%s: %v", f.Jobs[0].Name, f.Jobs[0].Warnings)
			}
		})
	}
}

// timedSource times the reads of the jobs page.
type timedSource struct {
	web.Source
	mu    sync.Mutex
	total time.Duration
	n     int
	last  *fleet.Fleet
}

func (s *timedSource) Jobs(ctx context.Context) (*fleet.Fleet, error) {
	start := time.Now()
	f, err := s.Source.Jobs(ctx)
	s.mu.Lock()
	s.total += time.Since(start)
	s.n++
	s.last = f
	s.mu.Unlock()
	return f, err
}
