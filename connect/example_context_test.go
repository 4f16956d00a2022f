package connect_test

import (
	"context"
	"errors"
	"fmt"
	"log"
	"os"
	"path/filepath"

	"github.com/anarchon/anarchon/connect"
	"github.com/anarchon/anarchon/embedded"
)

// A context file is what `nats context add local --server URL` writes. Here the
// example writes one for a server it starts itself, in a configuration directory
// of its own (XDG_CONFIG_HOME), and connects through it by name. A name that does
// not exist, or no name with no context selected, is an error that says so.
func ExampleContext_file() {
	srv, err := embedded.Start(context.Background(), embedded.Options{Listen: "127.0.0.1:0"})
	if err != nil {
		log.Fatal(err)
	}
	defer srv.Shutdown()

	home, err := os.MkdirTemp("", "anarchon-example-")
	if err != nil {
		log.Fatal(err)
	}
	defer os.RemoveAll(home)
	if old, ok := os.LookupEnv("XDG_CONFIG_HOME"); ok {
		defer os.Setenv("XDG_CONFIG_HOME", old)
	} else {
		defer os.Unsetenv("XDG_CONFIG_HOME")
	}
	os.Setenv("XDG_CONFIG_HOME", home) // in a real program: the user's own, ~/.config
	dir := filepath.Join(home, "nats", "context")
	if err := os.MkdirAll(dir, 0o700); err != nil {
		log.Fatal(err)
	}
	file := fmt.Sprintf(`{"url": %q}`, srv.ClientURL())
	if err := os.WriteFile(filepath.Join(dir, "local.json"), []byte(file), 0o600); err != nil {
		log.Fatal(err)
	}

	nc, err := connect.Context("local")
	if err != nil {
		log.Fatal(err)
	}
	defer nc.Close()
	fmt.Println("connected:", nc.IsConnected())

	_, err = connect.Context("prod")
	fmt.Println("unknown name:", errors.Is(err, connect.ErrContextNotFound))
	_, err = connect.Context("") // nothing selected with `nats context select`
	fmt.Println("none selected:", errors.Is(err, connect.ErrNoContextSelected))
	// Output:
	// connected: true
	// unknown name: true
	// none selected: true
}
