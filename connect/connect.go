package connect

import (
	"context"
	"fmt"

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
	if err := ctx.Err(); err != nil {
		return nil, fmt.Errorf("connect: through NATS context %q: %w", name, err)
	}
	s, err := Load(name)
	if err != nil {
		return nil, err
	}
	return s.Dial(ctx, opts...)
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
	if err := ctx.Err(); err != nil {
		return nil, nil, fmt.Errorf("connect: through NATS context %q: %w", name, err)
	}
	s, err := Load(name)
	if err != nil {
		return nil, nil, err
	}
	return s.DialJetStream(ctx, opts...)
}

// DialJetStream is the package's DialJetStream on settings already loaded.
func (s *Settings) DialJetStream(ctx context.Context, opts ...nats.Option) (*nats.Conn, jetstream.JetStream, error) {
	domain, prefix := s.JSDomain, s.JSAPIPrefix
	if domain != "" && prefix != "" {
		return nil, nil, fmt.Errorf("%w: %s sets both jetstream_domain %q and jetstream_api_prefix %q; keep one", ErrInvalidContext, s.what(), domain, prefix)
	}
	nc, err := s.Dial(ctx, opts...)
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
		return nil, nil, fmt.Errorf("connect: JetStream through %s: %w", s.what(), err)
	}
	return nc, js, nil
}

// ContextJetStream is DialJetStream without a ctx: only nats.go's dial timeout
// bounds it.
func ContextJetStream(name string, opts ...nats.Option) (*nats.Conn, jetstream.JetStream, error) {
	return DialJetStream(context.Background(), name, opts...)
}

// Dial connects with the settings, giving up when ctx ends; the package's Dial
// says more. nats.go's Connect takes no
// context, so it runs in a goroutine that outlives an abandoned dial by at most
// nats.go's own timeouts, and closes the connection if one comes up after all.
// (Capping nats.Timeout at ctx's deadline instead would shorten every reconnect of
// the connection's life too.)
func (s *Settings) Dial(ctx context.Context, opts ...nats.Option) (*nats.Conn, error) {
	fail := func(err error) error {
		return fmt.Errorf("connect: through %s (%s): %w", s.what(), RedactURLs(s.ServerURL()), err)
	}
	if err := ctx.Err(); err != nil {
		return nil, fail(err)
	}
	nopts, err := s.Options(opts...)
	if err != nil {
		return nil, err
	}
	connect := func() (*nats.Conn, error) { return nats.Connect(s.ServerURL(), nopts...) }
	if ctx.Done() == nil { // never ends (Context, ContextJetStream)
		nc, err := connect()
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
		nc, err := connect()
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

// what names the settings in errors: their context, if they came from one.
func (s *Settings) what() string {
	if s.Name == "" {
		return "NATS settings"
	}
	return fmt.Sprintf("NATS context %q", s.Name)
}
