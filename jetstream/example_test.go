package jetstream_test

import (
	"context"
	"fmt"
	"time"

	natsjs "github.com/nats-io/nats.go/jetstream"

	"github.com/anarchon/anarchon/embedded"
	"github.com/anarchon/anarchon/jetstream"
	"github.com/anarchon/anarchon/scheduler"
)

// Two instances claim the same slot: exactly one wins, and the winner asking again
// still wins.
func ExampleNew() {
	ctx := context.Background()
	srv, err := embedded.Start(ctx, embedded.Options{})
	if err != nil {
		panic(err)
	}
	defer srv.Shutdown()
	nc, err := srv.Connect()
	if err != nil {
		panic(err)
	}
	defer nc.Close()
	js, err := natsjs.New(nc)
	if err != nil {
		panic(err)
	}

	backend, err := jetstream.New(js, jetstream.WithDedupeWindow(time.Minute))
	if err != nil {
		panic(err)
	}
	if err := backend.Init(ctx); err != nil {
		panic(err)
	}
	job := scheduler.JobLimits{Job: "billing.nightly", Retention: scheduler.Retention{Size: 100}}
	if err := backend.PrepareJob(ctx, job); err != nil {
		panic(err)
	}

	slot := time.Date(2030, 1, 1, 2, 0, 0, 0, time.UTC)
	a := scheduler.ClaimInput{Job: job.Job, Slot: slot, Token: "token-a", Instance: "a"}
	b := scheduler.ClaimInput{Job: job.Job, Slot: slot, Token: "token-b", Instance: "b"}
	wonA, _ := backend.Claim(ctx, a)
	wonB, _ := backend.Claim(ctx, b)
	again, _ := backend.Claim(ctx, a)
	fmt.Println("a:", wonA, "b:", wonB, "a again:", again)
	fmt.Println("window:", backend.WindowFor(job))
	// Output:
	// a: true b: false a again: true
	// window: 1m0s
}
