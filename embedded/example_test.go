package embedded_test

import (
	"context"
	"fmt"
	"log"
	"strings"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"

	"github.com/anarchon/anarchon/embedded"
)

func Example() {
	ctx := context.Background()

	srv, err := embedded.Start(ctx, embedded.Options{})
	if err != nil {
		log.Fatal(err)
	}
	defer srv.Shutdown()

	nc, err := srv.Connect() // in-process: no TCP port needed
	if err != nil {
		log.Fatal(err)
	}
	defer nc.Close()

	js, err := jetstream.New(nc)
	if err != nil {
		log.Fatal(err)
	}
	if _, err := js.CreateStream(ctx, jetstream.StreamConfig{Name: "GREETINGS", Subjects: []string{"greet.>"}}); err != nil {
		log.Fatal(err)
	}
	ack, err := js.Publish(ctx, "greet.world", []byte("hello"))
	if err != nil {
		log.Fatal(err)
	}
	fmt.Println(ack.Stream, ack.Sequence)
	// Output: GREETINGS 1
}

func ExampleOptions_listen() {
	srv, err := embedded.Start(context.Background(), embedded.Options{Listen: "127.0.0.1:0"})
	if err != nil {
		log.Fatal(err)
	}
	defer srv.Shutdown()

	nc, err := nats.Connect(srv.ClientURL()) // over TCP, on the port the server picked
	if err != nil {
		log.Fatal(err)
	}
	defer nc.Close()
	fmt.Println(strings.HasPrefix(srv.ClientURL(), "nats://127.0.0.1:"), nc.IsConnected())
	// Output: true true
}

func ExampleStartCluster() {
	ctx := context.Background()

	c, err := embedded.StartCluster(ctx, embedded.ClusterOptions{}) // 3 nodes
	if err != nil {
		log.Fatal(err)
	}
	defer c.Shutdown()

	nc, err := c.Connect()
	if err != nil {
		log.Fatal(err)
	}
	defer nc.Close()
	js, err := jetstream.New(nc)
	if err != nil {
		log.Fatal(err)
	}
	if _, err := js.CreateStream(ctx, jetstream.StreamConfig{Name: "EVENTS", Replicas: 3}); err != nil {
		log.Fatal(err)
	}

	// Fail the stream's leader over, then bring it back on its store.
	leader, err := c.StreamLeader("", "EVENTS")
	if err != nil {
		log.Fatal(err)
	}
	if err := c.StopNode(leader); err != nil {
		log.Fatal(err)
	}
	if err := c.RestartNode(ctx, leader); err != nil {
		log.Fatal(err)
	}
}
