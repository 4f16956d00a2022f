package web

import (
	"errors"
	"fmt"
	"log/slog"
	"net"
	"net/http"
	"strings"
	"time"

	"github.com/anarchon/anarchon/fleet"
)

// ErrInvalidConfig: a field of Config is invalid; the error names it.
var ErrInvalidConfig = errors.New("web: invalid config")

// Defaults of Config.
const (
	// DefaultPrefix is the path the handler serves when Config.Prefix is empty.
	DefaultPrefix = "/"
	// DefaultHistoryLimit is how many runs the job page shows without ?limit=.
	DefaultHistoryLimit = 50
	// DefaultEntriesPage is how many schedule entries the job page lists per page
	// without ?entries= (at most fleet.MaxEntriesLimit).
	DefaultEntriesPage = 20
	// DefaultTimeout bounds the reads behind one page, and one action.
	DefaultTimeout = 10 * time.Second
	// DefaultTriggerWait is how long "run now" waits for the run to end before it
	// answers that the run goes on.
	DefaultTriggerWait = 2 * time.Second
	// DefaultTitle is the name in the pages' header.
	DefaultTitle = "anarchon"
	// DefaultRefresh is how often the jobs page reloads itself.
	DefaultRefresh = 30 * time.Second
	// MaxRefresh is the longest refresh interval, in Config and in ?refresh=N.
	MaxRefresh = 24 * time.Hour
)

// Config configures New. The zero value of every field but Source is valid.
type Config struct {
	// Source is what the pages read and act on, usually a *fleet.Client.
	// Required.
	Source Source

	// Prefix is the path the handler is mounted at, starting and ending with "/":
	// mux.Handle("/anarchon/", h) with Prefix "/anarchon/". The handler builds
	// its links under it and answers 404 outside it. Do not wrap the handler in
	// http.StripPrefix. Defaults to DefaultPrefix ("/").
	Prefix string

	// Authorize decides whether a request may act (run now, pause, resume; an
	// entry's pause and resume; adding, changing and removing an entry;
	// creating, changing and removing a calendar). It is asked on every action, and on every page
	// to decide whether to show the action controls. Nil: the pages are
	// read-only and every action is refused with 403. Actions are POST only and
	// pass Go's http.CrossOriginProtection and the Host check (Hosts) first, so
	// neither a cross-site form nor a page of another site reaching this one
	// through DNS rebinding gets to Authorize.
	Authorize func(*http.Request) bool

	// Hosts lists the names the pages answer to, as the Host header carries them
	// (compared without case and without a final dot; punycode for an
	// internationalised name): "status.example.com" matches any port,
	// "status.example.com:8443" that port only, an IP address ("10.0.0.7",
	// "[::1]") likewise. When set, a request for any other Host is refused with
	// 421 Misdirected Request before anything else, pages included: list
	// "localhost" too if the page is also opened on this machine, and behind a
	// reverse proxy, the Host it sends. Empty (the default): the pages answer any
	// Host, so a page of another site can read them through DNS rebinding, and
	// an action is refused with 403 unless its Host is a loopback name — one DNS
	// cannot re-point: localhost, a name under .localhost, an address in
	// 127.0.0.0/8, or ::1, any port.
	Hosts []string

	// Who names the person behind an action, recorded with the run or pause
	// (fleet.TriggerRequest.By, PauseRequest.By). Defaults to "web@" and the
	// request's remote IP; return the user your authentication knows (at most
	// 1 KiB).
	Who func(*http.Request) string

	// HistoryLimit is how many runs the job page shows when the URL does not say
	// (?limit=N). Defaults to DefaultHistoryLimit; at most fleet.MaxHistoryLimit.
	HistoryLimit int

	// Timeout bounds the reads behind one page (they run in parallel) and one
	// action. Defaults to DefaultTimeout.
	Timeout time.Duration

	// TriggerWait is how long "run now" waits for the run to end, so a quick run
	// shows its outcome at once; a longer run goes on and the page says so.
	// Defaults to DefaultTriggerWait; negative: do not wait.
	TriggerWait time.Duration

	// Title is the name in the pages' header. Defaults to DefaultTitle.
	Title string

	// Refresh is how often the jobs page reloads itself (a meta refresh), so a
	// page left open stays current; each reload is one Source.Jobs. A URL
	// says otherwise for its view: ?refresh=0 never reloads, ?refresh=N every N
	// seconds (1 to MaxRefresh). Whole seconds, at most MaxRefresh. Defaults to
	// DefaultRefresh; negative: the page reloads only when its URL asks.
	Refresh time.Duration

	// Logger logs reads and actions that fail. Defaults to silence.
	Logger *slog.Logger

	// Now is the clock relative times ("in 3s", "5s ago") are shown against.
	// Defaults to time.Now.
	Now func() time.Time

	// Trace returns the trace ID of a run's attempt, and a link to the trace in
	// your tracing UI (http or https; anything else is not linked), when the
	// program knows them; the attempt's page shows them. The run store keeps no
	// trace ID in this version. Nil: the page says the trace is not known.
	Trace func(run fleet.Run) (traceID, link string)
}

// withDefaults validates c and fills in its defaults.
func (c Config) withDefaults() (Config, error) {
	if c.Source == nil {
		return c, fmt.Errorf("%w: Source is required (a *fleet.Client)", ErrInvalidConfig)
	}
	if c.Prefix == "" {
		c.Prefix = DefaultPrefix
	}
	if !strings.HasPrefix(c.Prefix, "/") || !strings.HasSuffix(c.Prefix, "/") {
		return c, fmt.Errorf("%w: Prefix %q must start and end with /", ErrInvalidConfig, c.Prefix)
	}
	if strings.ContainsAny(c.Prefix, "?#%") || strings.Contains(c.Prefix, "//") {
		return c, fmt.Errorf("%w: Prefix %q: a plain path (no ?, #, %% or //)", ErrInvalidConfig, c.Prefix)
	}
	switch {
	case c.HistoryLimit == 0:
		c.HistoryLimit = DefaultHistoryLimit
	case c.HistoryLimit < 0 || c.HistoryLimit > fleet.MaxHistoryLimit:
		return c, fmt.Errorf("%w: HistoryLimit %d: between 1 and %d (0: %d)", ErrInvalidConfig, c.HistoryLimit,
			fleet.MaxHistoryLimit, DefaultHistoryLimit)
	}
	switch {
	case c.Timeout == 0:
		c.Timeout = DefaultTimeout
	case c.Timeout < 0:
		return c, fmt.Errorf("%w: Timeout %v: negative", ErrInvalidConfig, c.Timeout)
	}
	switch {
	case c.TriggerWait == 0:
		c.TriggerWait = DefaultTriggerWait
	case c.TriggerWait >= c.Timeout:
		return c, fmt.Errorf("%w: TriggerWait %v: shorter than Timeout (%v)", ErrInvalidConfig, c.TriggerWait, c.Timeout)
	}
	switch {
	case c.Refresh == 0:
		c.Refresh = DefaultRefresh
	case c.Refresh > MaxRefresh || c.Refresh > 0 && c.Refresh%time.Second != 0:
		return c, fmt.Errorf("%w: Refresh %v: whole seconds up to %v (negative: none)", ErrInvalidConfig, c.Refresh, MaxRefresh)
	}
	if c.Title == "" {
		c.Title = DefaultTitle
	}
	if c.Who == nil {
		c.Who = remoteWho
	}
	if c.Logger == nil {
		c.Logger = slog.New(slog.DiscardHandler)
	}
	if c.Now == nil {
		c.Now = time.Now
	}
	return c, nil
}

// AllowLoopback is a Config.Authorize that allows the requests that come from
// this machine (a loopback remote address): for a page on a developer's machine
// or reached through an SSH tunnel. Behind a reverse proxy on the same machine
// every request comes from loopback: do not use it there. A page of another site
// whose name is re-pointed at 127.0.0.1 (DNS rebinding) also posts from loopback,
// with its own name as the Host: the Host check (Config.Hosts) refuses it before
// AllowLoopback is asked.
func AllowLoopback(r *http.Request) bool {
	host, _, err := net.SplitHostPort(r.RemoteAddr)
	if err != nil {
		return false
	}
	ip := net.ParseIP(host)
	return ip != nil && ip.IsLoopback()
}

// remoteWho is the default Config.Who: "web@" and the remote IP.
func remoteWho(r *http.Request) string {
	host, _, err := net.SplitHostPort(r.RemoteAddr)
	if err != nil {
		host = r.RemoteAddr
	}
	if host == "" {
		return "web"
	}
	return "web@" + host
}
