package main

import (
	"context"
	"errors"
	"fmt"
	"strings"

	"github.com/nats-io/nats.go"
	"github.com/spf13/pflag"

	"github.com/anarchon/anarchon/connect"
)

// connFlags are the connection flags, spelt as the nats CLI spells them, with
// its environment variables.
type connFlags struct {
	server      string
	context     string
	noContext   bool
	user        string
	password    string
	creds       string
	nkey        string
	tlsCert     string
	tlsKey      string
	tlsCA       string
	tlsFirst    bool
	inboxPrefix string

	from map[string]string // flag name → the environment variable it was read from
}

// envOf are the environment variables the flags fall back to, as in the nats CLI.
var envOf = []struct{ flag, env string }{
	{"server", "NATS_URL"}, {"context", "NATS_CONTEXT"}, {"user", "NATS_USER"}, {"password", "NATS_PASSWORD"},
	{"creds", "NATS_CREDS"}, {"nkey", "NATS_NKEY"}, {"tlscert", "NATS_CERT"}, {"tlskey", "NATS_KEY"},
	{"tlsca", "NATS_CA"}, {"timeout", "NATS_TIMEOUT"},
}

func (f *connFlags) register(fs *pflag.FlagSet) {
	fs.StringVarP(&f.server, "server", "s", "", "NATS server URLs, comma-separated (env NATS_URL)")
	fs.StringVar(&f.context, "context", "", "NATS CLI context (env NATS_CONTEXT; default: the selected one)")
	fs.BoolVar(&f.noContext, "no-context", false, "use no NATS context, not even the selected one")
	fs.StringVar(&f.user, "user", "", "user name, or a token when no --password is given (env NATS_USER)")
	fs.StringVar(&f.password, "password", "", "password (env NATS_PASSWORD)")
	fs.StringVar(&f.creds, "creds", "", "user credentials file (env NATS_CREDS)")
	fs.StringVar(&f.nkey, "nkey", "", "user nkey seed file (env NATS_NKEY)")
	fs.StringVar(&f.tlsCert, "tlscert", "", "TLS client certificate file (env NATS_CERT)")
	fs.StringVar(&f.tlsKey, "tlskey", "", "TLS client key file (env NATS_KEY)")
	fs.StringVar(&f.tlsCA, "tlsca", "", "TLS certificate authority file (env NATS_CA)")
	fs.BoolVar(&f.tlsFirst, "tlsfirst", false, "do the TLS handshake before the server's greeting")
	fs.StringVar(&f.inboxPrefix, "inbox-prefix", "", "inbox prefix, for a user allowed its own inboxes only (_INBOX_viewer)")
}

// fromEnv gives each flag not on the command line the value of its
// environment variable, as the nats CLI does.
func (c *cli) fromEnv(fs *pflag.FlagSet) error {
	c.conn.from = map[string]string{}
	for _, e := range envOf {
		f := fs.Lookup(e.flag)
		v := c.getenv(e.env)
		if f == nil || f.Changed || v == "" {
			continue
		}
		if err := fs.Set(e.flag, v); err != nil {
			return usagef("%s=%q: %v", e.env, v, err)
		}
		c.conn.from[e.flag] = e.env
	}
	return nil
}

// origin says where a flag's value came from, for messages.
func (f *connFlags) origin(flag string) string {
	if env, ok := f.from[flag]; ok {
		return env
	}
	return "--" + flag
}

func (f *connFlags) check() error {
	p := f.inboxPrefix
	switch {
	case f.noContext && f.context != "" && f.origin("context") == "--context":
		return usagef("give --context or --no-context, not both")
	case (f.tlsCert == "") != (f.tlsKey == ""):
		return usagef("--tlscert and --tlskey go together: give both, or neither")
	case p != "" && (!strings.HasPrefix(p, "_INBOX") || strings.ContainsAny(p, "*> \t\r\n") || strings.HasSuffix(p, ".")):
		return usagef("--inbox-prefix %q: subject tokens beginning with _INBOX (replicas answer on inboxes only), without wildcards or white space", p)
	}
	return nil
}

// settings are the NATS context (named, or the selected one unless
// --no-context) with the flags' values over it. A flag of credentials
// replaces the context's credentials of every kind.
func (c *cli) settings() (*connect.Settings, error) {
	f := &c.conn
	s := &connect.Settings{}
	if !f.noContext {
		loaded, err := connect.Load(f.context)
		switch {
		case err == nil:
			s = loaded
		case f.context == "" && errors.Is(err, connect.ErrNoContextSelected):
		case errors.Is(err, connect.ErrContextNotFound) && f.context == "":
			return nil, fmt.Errorf("%s (the selected context); select another with nats context select NAME, or give --no-context", strings.TrimPrefix(err.Error(), "connect: "))
		case errors.Is(err, connect.ErrContextNotFound):
			return nil, fmt.Errorf("%s (from %s); nats context ls lists them", strings.TrimPrefix(err.Error(), "connect: "), f.origin("context"))
		default:
			return nil, errors.New(strings.TrimPrefix(err.Error(), "connect: "))
		}
	}
	if f.server != "" {
		s.URL = f.server
	}
	if f.password != "" && f.user == "" {
		if s.User == "" {
			return nil, usagef("%s needs a user: give --user", f.origin("password"))
		}
		s.Password = f.password // the context's user, with this password
	}
	if f.user != "" || f.creds != "" || f.nkey != "" {
		s.User, s.Password, s.Token, s.Creds, s.NKey, s.UserJWT, s.UserSeed = "", "", "", "", "", "", ""
	}
	switch {
	case f.user != "" && f.password == "":
		s.Token = f.user // as the nats CLI: a user without a password is a token
	case f.user != "":
		s.User, s.Password = f.user, f.password
	}
	if f.creds != "" {
		s.Creds = f.creds
	}
	if f.nkey != "" {
		s.NKey = f.nkey
	}
	if f.tlsCert != "" {
		s.Cert, s.Key = f.tlsCert, f.tlsKey
	}
	if f.tlsCA != "" {
		s.CA = f.tlsCA
	}
	if f.tlsFirst {
		s.TLSFirst = true
	}
	if f.inboxPrefix != "" {
		s.InboxPrefix = f.inboxPrefix
	}
	return s, nil
}

// where says which server the command dials, and why that one.
func (c *cli) where(s *connect.Settings) string {
	url := connect.RedactURLs(s.ServerURL())
	switch {
	case c.conn.server != "":
		return fmt.Sprintf("%s (from %s)", url, c.conn.origin("server"))
	case s.Name != "" && s.URL != "":
		return fmt.Sprintf("%s (from NATS context %q)", url, s.Name)
	case s.Name != "":
		return fmt.Sprintf("%s (the default: NATS context %q has no url)", url, s.Name)
	}
	return url + " (the default: no --server, NATS_URL or NATS context)"
}

// connect dials the server, within --timeout. A permissions violation is
// reported on the connection, not to the request: onPermissions ends the
// command at once with the server's words instead of a timeout.
func (c *cli) connect(ctx context.Context, onPermissions context.CancelCauseFunc) (*nats.Conn, error) {
	s, err := c.settings()
	if err != nil {
		return nil, err
	}
	ctx, cancel := context.WithTimeout(ctx, c.timeout)
	defer cancel()
	nc, err := s.Dial(ctx,
		nats.Name("anarchon-cli"),
		nats.Timeout(c.timeout),
		nats.ErrorHandler(func(_ *nats.Conn, _ *nats.Subscription, err error) {
			if errors.Is(err, nats.ErrPermissionViolation) {
				onPermissions(err)
			}
		}))
	if err == nil {
		return nc, nil
	}
	where := c.where(s)
	var hint string
	switch {
	case errors.Is(err, connect.ErrInvalidContext):
		return nil, errors.New(strings.TrimPrefix(err.Error(), "connect: "))
	case errors.Is(err, nats.ErrAuthorization), errors.Is(err, nats.ErrAuthExpired), errors.Is(err, nats.ErrAuthRevoked):
		hint = "the server refused the credentials: give --creds FILE, --user and --password, --nkey FILE, or a --context that has them"
	case strings.Contains(err.Error(), "tls: ") || strings.Contains(err.Error(), "x509: "):
		hint = "the TLS handshake failed: check --tlsca, --tlscert and --tlskey (or the context's ca, cert and key)"
	case (strings.HasPrefix(s.ServerURL(), "tls://") || s.CA != "" || s.Cert != "") && !s.TLSFirst &&
		(errors.Is(err, context.DeadlineExceeded) || strings.Contains(err.Error(), "i/o timeout") || strings.HasSuffix(err.Error(), "EOF")):
		hint = "no answer to the TLS handshake: give --tlsfirst if the server wants TLS first, and check that it serves TLS there"
	case errors.Is(err, context.DeadlineExceeded):
		hint = fmt.Sprintf("nothing answered within --timeout %v: is nats-server running there? give --server URL or --context NAME", c.timeout)
	default:
		hint = "is nats-server running there? give --server URL (or NATS_URL), or --context NAME (or NATS_CONTEXT)"
	}
	return nil, fmt.Errorf("connect to %s: %s; %s", where, natsWords(err), hint)
}

// natsWords is nats.go's error without what the command says itself.
func natsWords(err error) string {
	msg := err.Error()
	if i := strings.LastIndex(msg, "): "); i >= 0 && strings.HasPrefix(msg, "connect: ") {
		msg = msg[i+3:]
	}
	return strings.TrimPrefix(msg, "nats: ")
}
