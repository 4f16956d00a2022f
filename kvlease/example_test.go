package kvlease_test

import (
	"context"
	"errors"
	"fmt"
	"time"

	"github.com/nats-io/nats.go/jetstream"

	"github.com/anarchon/anarchon/backend"
	"github.com/anarchon/anarchon/embedded"
	"github.com/anarchon/anarchon/kvlease"
)

// Two replicas claim the same run: one wins the lease, the other is told who holds
// it and stands by. The NATS server judges the lease; replica clocks are never
// compared. A scheduler does all this itself once the store is in its backend
// (jetstream.NewLeased(js, runs)); this is the store alone.
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
	js, err := jetstream.New(nc)
	if err != nil {
		panic(err)
	}

	runs, err := kvlease.New(js) // kvlease.WithReplicas(3) on a 3-node cluster
	if err != nil {
		panic(err)
	}
	defer runs.Close()
	if err := runs.Init(ctx); err != nil { // creates the bucket, or checks it
		panic(err)
	}
	fmt.Println("bucket:", runs.Bucket())

	slot := time.Now().Truncate(time.Minute)
	claim := func(token, instance string) backend.ClaimResult {
		res, err := runs.Claim(ctx, backend.RunClaim{
			Job: "billing", Slot: slot, Token: token, Instance: instance,
			Lease: 30 * time.Second, Deadline: slot.Add(5 * time.Minute),
		})
		if err != nil {
			panic(err)
		}
		return res
	}
	won := claim("token-a", "a")
	fmt.Println("a:", won.Outcome, won.Attempt)
	other := claim("token-b", "b")
	fmt.Println("b:", other.Outcome, "held by", other.Holder)

	// Only the holder can finish the run; afterwards every claim is answered done.
	err = runs.Finish(ctx, backend.RunKey{Job: "billing", Slot: slot, Token: "token-b"}, backend.StatusOK)
	fmt.Println("b finishes:", errors.Is(err, backend.ErrStaleToken))
	if err := runs.Finish(ctx, backend.RunKey{Job: "billing", Slot: slot, Token: "token-a"}, backend.StatusOK); err != nil {
		panic(err)
	}
	done := claim("token-c", "c")
	fmt.Println("c:", done.Outcome, done.Status)
	// Output:
	// bucket: anarchon_leases
	// a: won 1
	// b: running held by a
	// b finishes: true
	// c: done ok
}
