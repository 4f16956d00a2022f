package jetstream_test

import (
	"context"
	"fmt"
	"time"

	natsjs "github.com/nats-io/nats.go/jetstream"

	"github.com/anarchon/anarchon/backend"
	"github.com/anarchon/anarchon/embedded"
	"github.com/anarchon/anarchon/jetstream"
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

	be, err := jetstream.New(js, jetstream.WithDedupeWindow(time.Minute))
	if err != nil {
		panic(err)
	}
	if err := be.Init(ctx); err != nil {
		panic(err)
	}
	job := backend.JobLimits{Job: "billing.nightly", Retention: backend.Retention{Size: 100}}
	if err := be.PrepareJob(ctx, job); err != nil {
		panic(err)
	}

	slot := time.Date(2030, 1, 1, 2, 0, 0, 0, time.UTC)
	a := backend.ClaimInput{Job: job.Job, Slot: slot, Token: "token-a", Instance: "a"}
	b := backend.ClaimInput{Job: job.Job, Slot: slot, Token: "token-b", Instance: "b"}
	wonA, _ := be.Claim(ctx, a)
	wonB, _ := be.Claim(ctx, b)
	again, _ := be.Claim(ctx, a)
	fmt.Println("a:", wonA, "b:", wonB, "a again:", again)
	fmt.Println("window:", be.WindowFor(job))
	// Output:
	// a: true b: false a again: true
	// window: 1m0s
}
