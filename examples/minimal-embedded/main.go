// Command minimal-embedded is a single-node service that runs its own JetStream
// server in-process: no NATS server to install, and its history outlives restarts in
// ./anarchon-data. It reports every weekday at 09:00 UTC.
package main

import (
	"context"
	"log"
	"os"
	"os/signal"
	"time"

	natsjs "github.com/nats-io/nats.go/jetstream"

	"github.com/anarchon/anarchon/embedded"
	"github.com/anarchon/anarchon/jetstream"
	"github.com/anarchon/anarchon/kvlease"
	"github.com/anarchon/anarchon/scheduler"
)

func main() {
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt)
	defer stop()

	srv, err := embedded.Start(ctx, embedded.Options{StoreDir: "anarchon-data"})
	if err != nil {
		log.Fatal(err)
	}
	defer srv.Shutdown()
	nc, err := srv.Connect() // in-process: no TCP port unless Options.Listen says so
	if err != nil {
		log.Fatal(err)
	}
	defer nc.Close()
	js, err := natsjs.New(nc)
	if err != nil {
		log.Fatal(err)
	}
	runs, err := kvlease.New(js)
	if err != nil {
		log.Fatal(err)
	}
	defer runs.Close()
	backend, err := jetstream.NewLeased(js, runs)
	if err != nil {
		log.Fatal(err)
	}

	s, err := scheduler.New(scheduler.Config{Backend: backend, Instance: "single"})
	if err != nil {
		log.Fatal(err)
	}
	err = s.Cron("report", "0 9 * * MON-FRI", func(ctx context.Context, run scheduler.Run) error {
		log.Printf("report for %s", run.Slot.Format(time.DateOnly))
		return nil
	}, scheduler.WithCatchUp(scheduler.CatchUpLatest, 24*time.Hour)) // a report missed while down runs at start
	if err != nil {
		log.Fatal(err)
	}
	if err := s.Start(ctx); err != nil {
		log.Fatal(err)
	}
	<-ctx.Done()

	stopCtx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	if err := s.Stop(stopCtx); err != nil {
		log.Print(err)
	}
}
