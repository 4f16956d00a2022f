package embedded_test

import (
	"context"
	"fmt"
	"log"
	"os"

	"github.com/nats-io/nats.go/jetstream"

	"github.com/anarchon/anarchon/embedded"
)

// A single-node setup keeps its JetStream data in a directory of its own, so that a
// restarted program finds its streams (and with them its scheduler's claims,
// history and leases) where it left them.
func ExampleOptions_storeDir() {
	ctx := context.Background()
	dir, err := os.MkdirTemp("", "anarchon-example-") // a lasting directory in a real program
	if err != nil {
		log.Fatal(err)
	}
	defer os.RemoveAll(dir)

	messages := func(publish bool) uint64 {
		srv, err := embedded.Start(ctx, embedded.Options{StoreDir: dir})
		if err != nil {
			log.Fatal(err)
		}
		defer srv.Shutdown()
		nc, err := srv.Connect()
		if err != nil {
			log.Fatal(err)
		}
		defer nc.Close()
		js, err := jetstream.New(nc)
		if err != nil {
			log.Fatal(err)
		}
		stream, err := js.CreateOrUpdateStream(ctx, jetstream.StreamConfig{Name: "ORDERS", Subjects: []string{"orders.>"}})
		if err != nil {
			log.Fatal(err)
		}
		if publish {
			if _, err := js.Publish(ctx, "orders.new", []byte("42")); err != nil {
				log.Fatal(err)
			}
		}
		info, err := stream.Info(ctx)
		if err != nil {
			log.Fatal(err)
		}
		return info.State.Msgs
	}
	fmt.Println("first run:", messages(true))
	fmt.Println("after a restart:", messages(false))
	// Output:
	// first run: 1
	// after a restart: 1
}
