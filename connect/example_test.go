package connect_test

import (
	"context"
	"log"
	"time"

	"github.com/nats-io/nats.go"

	"github.com/anarchon/anarchon/connect"
)

// Connect through the context the operator made with `nats context add prod ...`:
// servers, credentials, TLS and JetStream domain come from the context file. The
// dial gives up when ctx ends.
func ExampleDialJetStream() {
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	nc, js, err := connect.DialJetStream(ctx, "prod", nats.Name("billing"))
	if err != nil {
		log.Fatal(err)
	}
	defer nc.Drain()

	info, err := js.AccountInfo(ctx)
	if err != nil {
		log.Fatal(err)
	}
	log.Printf("%d streams in domain %q", info.Streams, info.Domain)
}

// An empty name uses the context selected with `nats context select`.
func ExampleContext() {
	nc, err := connect.Context("")
	if err != nil {
		log.Fatal(err)
	}
	defer nc.Close()
}
