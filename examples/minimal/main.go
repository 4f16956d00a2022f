// Command minimal is one replica of a service with a scheduled job, on NATS JetStream
// with leases. Start it in several terminals against the same server: each slot runs
// on exactly one of them, and when one is stopped mid-run another takes over.
package main

import (
	"context"
	"log"
	"os"
	"os/signal"
	"time"

	"github.com/nats-io/nats.go"
	natsjs "github.com/nats-io/nats.go/jetstream"

	"github.com/anarchon/anarchon/jetstream"
	"github.com/anarchon/anarchon/kvlease"
	"github.com/anarchon/anarchon/scheduler"
)

func main() {
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt)
	defer stop()

	url := os.Getenv("NATS_URL") // a NATS server with JetStream: nats-server -js
	if url == "" {
		url = nats.DefaultURL
	}
	nc, err := nats.Connect(url)
	if err != nil {
		log.Fatal(err)
	}
	defer nc.Close()
	js, err := natsjs.New(nc)
	if err != nil {
		log.Fatal(err)
	}
	runs, err := kvlease.New(js) // leases in a KV bucket: backups, overlap, catch-up, hand-over
	if err != nil {
		log.Fatal(err)
	}
	defer runs.Close()
	if err := runs.Init(ctx); err != nil {
		log.Fatal(err)
	}
	backend, err := jetstream.NewLeased(js, runs) // claims and history in a stream per job
	if err != nil {
		log.Fatal(err)
	}

	s, err := scheduler.New(scheduler.Config{Backend: backend})
	if err != nil {
		log.Fatal(err)
	}
	err = s.Every("reconcile", 10*time.Second, func(ctx context.Context, run scheduler.Run) error {
		// ctx ends on timeout, lease loss or hard stop; run.Token and run.Fence fence writes.
		log.Printf("%s: slot %s, attempt %d", run.Instance, run.Slot.Format(time.TimeOnly), run.Attempt)
		return nil
	}, scheduler.WithTimeout(time.Minute))
	if err != nil {
		log.Fatal(err) // bad names, intervals and options fail here, not at run time
	}
	if err := s.Start(ctx); err != nil {
		log.Fatal(err)
	}
	<-ctx.Done() // until interrupted

	stopCtx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	if err := s.Stop(stopCtx); err != nil { // hands unfinished runs over to the other replicas
		log.Print(err)
	}
}
