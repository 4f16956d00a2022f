// Package connect connects to NATS the way NATS users already do: through a NATS
// CLI context (`nats context add`, `nats context select`). The URLs, credentials,
// TLS files, inbox prefix and JetStream domain stay in the context file, so a
// program and the operator's `nats` CLI reach the same account the same way.
//
// Contexts are read with jsm.go's natscontext package from
// $XDG_CONFIG_HOME/nats/context/<name>.json (~/.config/nats/context when
// XDG_CONFIG_HOME is unset); the selected context's name is in
// $XDG_CONFIG_HOME/nats/context.txt.
//
//	nc, js, err := connect.DialJetStream(ctx, "prod", nats.Name("billing"))
//	if err != nil {
//		return err
//	}
//	defer nc.Drain()
//	// js honours the context's jetstream_domain or jetstream_api_prefix.
//
// Dial and DialJetStream give up when their ctx ends, as well as on nats.go's own
// dial timeout (nats.Timeout, 2s per server by default). Context and
// ContextJetStream, without a ctx, are bounded by that timeout alone (unless the
// options ask for retries with nats.RetryOnFailedConnect).
//
// # Guides
//
// [Connecting through a NATS context] shows it beside the rest of operating a fleet.
//
// [Connecting through a NATS context]: https://github.com/anarchon/anarchon/blob/main/docs/operating.md#connecting-through-a-nats-context
package connect

import (
	"context"
	"errors"
	"fmt"
	"path/filepath"
	"strings"

	"github.com/nats-io/jsm.go/natscontext"
	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"
)

// Dial connects through the NATS context called name; "" means the selected
// context, and is an error wrapping ErrNoContextSelected when none is selected.
// opts are applied after the context's settings, so they can add to or override
// them (nats.Name, handlers, timeouts). The caller owns the connection.
//
// Dial returns when ctx ends, with an error wrapping ctx's, even while nats.go is
// still dialing; a connection that comes up after that is closed. An unknown name
// is an error wrapping ErrContextNotFound; a connection failure names the context
// and its servers (credentials in URLs redacted) and wraps nats.go's error.
func Dial(ctx context.Context, name string, opts ...nats.Option) (*nats.Conn, error) {
	c, err := load(ctx, name)
	if err != nil {
		return nil, err
	}
	return dial(ctx, c, opts)
}

// Context is Dial without a ctx: only nats.go's dial timeout bounds it.
func Context(name string, opts ...nats.Option) (*nats.Conn, error) {
	return Dial(context.Background(), name, opts...)
}

// DialJetStream connects like Dial and returns a JetStream client on the
// connection, using the context's JetStream domain (jetstream_domain) or API prefix
// (jetstream_api_prefix) when it has one; a context with both is an error wrapping
// ErrInvalidContext. The caller owns the connection and closes it (nc.Drain or
// nc.Close); the JetStream client needs nothing else.
func DialJetStream(ctx context.Context, name string, opts ...nats.Option) (*nats.Conn, jetstream.JetStream, error) {
	c, err := load(ctx, name)
	if err != nil {
		return nil, nil, err
	}
	domain, prefix := c.JSDomain(), c.JSAPIPrefix()
	if domain != "" && prefix != "" {
		return nil, nil, fmt.Errorf("%w: %q sets both jetstream_domain %q and jetstream_api_prefix %q; keep one", ErrInvalidContext, c.Name, domain, prefix)
	}
	nc, err := dial(ctx, c, opts)
	if err != nil {
		return nil, nil, err
	}
	var js jetstream.JetStream
	switch {
	case domain != "":
		js, err = jetstream.NewWithDomain(nc, domain)
	case prefix != "":
		js, err = jetstream.NewWithAPIPrefix(nc, prefix)
	default:
		js, err = jetstream.New(nc)
	}
	if err != nil {
		nc.Close()
		return nil, nil, fmt.Errorf("connect: JetStream through NATS context %q: %w", c.Name, err)
	}
	return nc, js, nil
}

// ContextJetStream is DialJetStream without a ctx: only nats.go's dial timeout
// bounds it.
func ContextJetStream(name string, opts ...nats.Option) (*nats.Conn, jetstream.JetStream, error) {
	return DialJetStream(context.Background(), name, opts...)
}

// load reads the named context, or the selected one when name is "". A registry
// is built per call so that a changed XDG_CONFIG_HOME is honoured. It reads files
// only: nothing here waits on the network.
func load(ctx context.Context, name string) (*natscontext.Context, error) {
	reg := natscontext.NewRegistry(natscontext.NewDefaultFileBackend())
	if name == "" {
		selected, err := reg.Selected(ctx)
		switch {
		case errors.Is(err, natscontext.ErrNoneSelected) || (err == nil && selected == ""):
			return nil, fmt.Errorf("%w: pass a context name, or select one with `nats context select NAME` (contexts in %s: %s)",
				ErrNoContextSelected, contextDir(), known(reg))
		case err != nil:
			return nil, fmt.Errorf("%w: reading the selected context: %w", ErrInvalidContext, err)
		}
		name = selected
	}
	c, err := reg.Load(ctx, name)
	switch {
	case err == nil:
		return c, nil
	case errors.Is(err, natscontext.ErrNotFound):
		return nil, fmt.Errorf("%w: %q is not in %s (known: %s): %w", ErrContextNotFound, name, contextDir(), known(reg), err)
	default:
		return nil, fmt.Errorf("%w: %q: %w", ErrInvalidContext, name, err)
	}
}

// dial connects through c, giving up when ctx ends. nats.go's Connect takes no
// context, so it runs in a goroutine that outlives an abandoned dial by at most
// nats.go's own timeouts, and closes the connection if one comes up after all.
// (Capping nats.Timeout at ctx's deadline instead would shorten every reconnect of
// the connection's life too.)
func dial(ctx context.Context, c *natscontext.Context, opts []nats.Option) (*nats.Conn, error) {
	fail := func(err error) error {
		return fmt.Errorf("connect: through NATS context %q (%s): %w", c.Name, redactURLs(c.ServerURL()), err)
	}
	if err := ctx.Err(); err != nil {
		return nil, fail(err)
	}
	if ctx.Done() == nil { // never ends (Context, ContextJetStream)
		nc, err := c.Connect(opts...)
		if err != nil {
			return nil, fail(err)
		}
		return nc, nil
	}
	type dialed struct {
		nc  *nats.Conn
		err error
	}
	done := make(chan dialed, 1)
	go func() {
		nc, err := c.Connect(opts...)
		done <- dialed{nc, err}
	}()
	select {
	case d := <-done:
		if d.err != nil {
			return nil, fail(d.err)
		}
		return d.nc, nil
	case <-ctx.Done():
		go func() {
			if d := <-done; d.nc != nil {
				d.nc.Close()
			}
		}()
		return nil, fail(ctx.Err())
	}
}

// contextDir is where contexts are looked for, for error messages.
func contextDir() string {
	p, err := natscontext.ContextPath("x")
	if err != nil {
		return "the NATS context directory"
	}
	return filepath.Dir(p)
}

// known lists the context names for error messages.
func known(reg *natscontext.Registry) string {
	names, err := reg.List(context.Background())
	if err != nil || len(names) == 0 {
		return "none"
	}
	return strings.Join(names, ", ")
}
