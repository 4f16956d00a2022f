package fleet_test

import (
	"context"
	"fmt"
	"log"
	"time"

	"github.com/anarchon/anarchon/backend/memory"
	"github.com/anarchon/anarchon/embedded"
	"github.com/anarchon/anarchon/fleet"
	"github.com/anarchon/anarchon/scheduler"
	"github.com/anarchon/anarchon/stepclock"
)

// A replica serves its jobs; a client on the same NATS account lists them, triggers
// one, pauses it and reads its history.
func Example() {
	ctx := context.Background()
	srv, err := embedded.Start(ctx, embedded.Options{})
	if err != nil {
		log.Fatal(err)
	}
	defer srv.Shutdown()

	// The replica: its scheduler, its jobs, and the fleet service on its connection.
	nc, err := srv.Connect()
	if err != nil {
		log.Fatal(err)
	}
	defer nc.Close()
	// The example's clock stands still at half past twelve, so no slot of the hourly
	// job falls while it runs and its output is fixed; a real program leaves
	// Config.Clock unset (and uses memory.New, or a real backend).
	clock := stepclock.New(time.Date(2030, 1, 1, 12, 30, 0, 0, time.UTC))
	s, err := scheduler.New(scheduler.Config{Backend: memory.NewWithClock(clock), Instance: "replica-1", Clock: clock})
	if err != nil {
		log.Fatal(err)
	}
	err = s.Every("report", time.Hour, func(ctx context.Context, run scheduler.Run) error {
		fmt.Println("report runs, manual:", run.Manual)
		return nil
	})
	if err != nil {
		log.Fatal(err)
	}
	if err := s.Start(ctx); err != nil {
		log.Fatal(err)
	}
	defer s.Stop(ctx)
	svc, err := fleet.Serve(ctx, nc, s)
	if err != nil {
		log.Fatal(err)
	}
	defer svc.Stop(ctx)

	// Anyone else on the account: here a second connection.
	cc, err := srv.Connect()
	if err != nil {
		log.Fatal(err)
	}
	defer cc.Close()
	c, err := fleet.NewClient(cc, fleet.WithGatherWindow(100*time.Millisecond))
	if err != nil {
		log.Fatal(err)
	}
	f, err := c.Jobs(ctx)
	if err != nil {
		log.Fatal(err)
	}
	for _, j := range f.Jobs {
		fmt.Println(j.Name, j.Schedule, j.Replicas)
	}
	r, err := c.Trigger(ctx, "report", fleet.TriggerRequest{By: "ana", Wait: true})
	if err != nil {
		log.Fatal(err)
	}
	fmt.Println("ran on", r.Instance, r.Run.Status)
	p, err := c.Pause(ctx, "report", fleet.PauseRequest{Reason: "quarter close", By: "ana", For: "2h"})
	if err != nil {
		log.Fatal(err)
	}
	fmt.Println("paused:", p.Pause.Reason, "by", p.Pause.By)
	h, err := c.History(ctx, "report", 10)
	if err != nil {
		log.Fatal(err)
	}
	fmt.Println("history:", len(h.Runs), "run, requested by", h.Runs[0].RequestedBy)
	// Output:
	// report every 1h0m0s [replica-1]
	// report runs, manual: true
	// ran on replica-1 ok
	// paused: quarter close by ana
	// history: 1 run, requested by ana
}
