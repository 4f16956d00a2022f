package metrics_test

import (
	"context"
	"fmt"
	"strings"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/testutil"

	"github.com/anarchon/anarchon/backend/memory"
	"github.com/anarchon/anarchon/metrics"
	"github.com/anarchon/anarchon/scheduler"
)

func Example() {
	ctx := context.Background()
	reg := prometheus.NewRegistry() // or prometheus.DefaultRegisterer, served by promhttp.Handler()

	m, err := metrics.Wire(reg)
	if err != nil {
		panic(err)
	}
	s, err := scheduler.New(scheduler.Config{
		Backend: memory.New(),
		OnEvent: m.OnEvent, // or scheduler.Chain(m.OnEvent, scheduler.LogEvents(logger)) to feed logs too
	})
	if err != nil {
		panic(err)
	}
	// A rare schedule (29 February), from an hour on: no scheduled run while the
	// example runs, whatever the date, keeps its output fixed; RunNow runs it.
	err = s.Cron("report", "0 0 29 2 *", func(ctx context.Context, run scheduler.Run) error {
		return nil
	}, scheduler.WithStartAt(time.Now().Add(time.Hour)))
	if err != nil {
		panic(err)
	}
	if err := s.Start(ctx); err != nil {
		panic(err)
	}
	defer s.Stop(ctx)

	if _, err := s.RunNow(ctx, "report"); err != nil {
		panic(err)
	}
	err = testutil.GatherAndCompare(reg, strings.NewReader(`
# HELP anarchon_runs_total Handler runs on this instance that ended, by status and by whether RunNow started them.
# TYPE anarchon_runs_total counter
anarchon_runs_total{job_name="report",manual="false",status="error"} 0
anarchon_runs_total{job_name="report",manual="false",status="ok"} 0
anarchon_runs_total{job_name="report",manual="true",status="ok"} 1
`), "anarchon_runs_total")
	fmt.Println(err)
	// Output: <nil>
}
