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
//	nc, js, err := connect.ContextJetStream("prod", nats.Name("billing"))
//	if err != nil {
//		return err
//	}
//	defer nc.Drain()
//	// js honours the context's jetstream_domain or jetstream_api_prefix.
//
// Connecting is bounded by nats.go's own dial timeout (nats.Timeout, 2s per
// server by default) unless the options ask for retries
// (nats.RetryOnFailedConnect).
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

// Context connects through the NATS context called name; "" means the selected
// context, and is an error wrapping ErrNoContextSelected when none is selected.
// opts are applied after the context's settings, so they can add to or override
// them (nats.Name, handlers, timeouts). The caller owns the connection.
//
// An unknown name is an error wrapping ErrContextNotFound; a connection failure
// names the context and its servers (credentials in URLs redacted) and wraps
// nats.go's error.
func Context(name string, opts ...nats.Option) (*nats.Conn, error) {
	c, err := load(name)
	if err != nil {
		return nil, err
	}
	return dial(c, opts)
}

// ContextJetStream connects like Context and returns a JetStream client on the
// connection, using the context's JetStream domain (jetstream_domain) or API prefix
// (jetstream_api_prefix) when it has one; a context with both is an error wrapping
// ErrInvalidContext. The caller owns the connection and closes it (nc.Drain or
// nc.Close); the JetStream client needs nothing else.
func ContextJetStream(name string, opts ...nats.Option) (*nats.Conn, jetstream.JetStream, error) {
	c, err := load(name)
	if err != nil {
		return nil, nil, err
	}
	domain, prefix := c.JSDomain(), c.JSAPIPrefix()
	if domain != "" && prefix != "" {
		return nil, nil, fmt.Errorf("%w: %q sets both jetstream_domain %q and jetstream_api_prefix %q; keep one", ErrInvalidContext, c.Name, domain, prefix)
	}
	nc, err := dial(c, opts)
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

// load reads the named context, or the selected one when name is "". A registry
// is built per call so that a changed XDG_CONFIG_HOME is honoured.
func load(name string) (*natscontext.Context, error) {
	ctx := context.Background() // file reads only: nothing here can block on the network
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

func dial(c *natscontext.Context, opts []nats.Option) (*nats.Conn, error) {
	nc, err := c.Connect(opts...)
	if err != nil {
		return nil, fmt.Errorf("connect: through NATS context %q (%s): %w", c.Name, redactURLs(c.ServerURL()), err)
	}
	return nc, nil
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
