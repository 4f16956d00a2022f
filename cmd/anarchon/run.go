package main

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"io"
	"os"
	"os/user"
	"strings"
	"time"

	"github.com/nats-io/nats.go"

	"github.com/anarchon/anarchon/connect"
	"github.com/anarchon/anarchon/fleet"
)

// Exit codes.
const (
	exitOK    = 0
	exitFail  = 1 // the command failed: one line on stderr
	exitUsage = 2 // the command line is wrong
)

const usage = `Usage:
  anarchon [flags] jobs [--window D]
  anarchon [flags] history JOB [-n N]
  anarchon [flags] trigger JOB [--wait]
  anarchon [flags] backfill JOB --from T --to T [--rerun] [--wait]
  anarchon [flags] pause JOB --reason R [--for D | --until T]
  anarchon [flags] pause --all --reason R [--for D | --until T]
  anarchon [flags] resume JOB
  anarchon [flags] resume --all
  anarchon [flags] active [JOB]
  anarchon [flags] watch [JOB]
  anarchon [flags] schedule ls JOB [--after ID] [--limit N]
  anarchon [flags] schedule show JOB ID [-n N]
  anarchon [flags] schedule add JOB ID (--every D | --cron E [--zone Z] | --at T)
                   [--start T] [--end T] [--payload S | --payload-file F] [--paused]
  anarchon [flags] schedule set JOB ID [--rev N] [the flags of add that change]
  anarchon [flags] schedule rm JOB ID [--rev N]
  anarchon [flags] permissions viewer|operator|replica
  anarchon version

Flags, before or after the command:
  --context NAME   NATS CLI context (default: the selected one)
  --server URL     NATS server URL instead of a context
  --prefix P       the fleet's subject prefix (default anarchon)
  --json           JSON for scripts instead of tables
  --timeout D      bounds each request, and a trigger's --wait (default 5s)
  --by WHO         who asks, recorded with pauses and triggers (default user@host)
  --inbox-prefix P the inbox prefix of the connection, for a user whose permissions
                   allow its own inboxes only (default: the context's, else _INBOX)

Command flags:
  jobs     --window D   how long to collect the replicas' answers (default 500ms)
  history  -n N         how many runs, newest first (default 20, at most 1000)
  trigger  --wait       wait for the run to end and show how it ended
  backfill --from T --to T  run the job's slots in [from, to) that never ran, on one
                        replica; T is RFC 3339 or a duration back from now (-10m);
                        --rerun also runs the slots that ran; --wait waits for every
                        slot to end and lists them (at most 1000 slots per request)
  pause    --reason R   why (required); --for D or --until T (RFC 3339) end it by itself,
                        in the future (without either the pause has no end)
  pause, resume  --all  every job (the all-jobs pause) instead of one
  active   unfinished runs (leases) of JOB, or of every job
  watch    print the replicas' events (fleet.Events), one line each, until interrupted
  schedule  a job's schedule entries, stored in the backend and run by the replicas
           that declare the job: ls lists a page (--after ID: the next; --limit N,
           default 50, at most 100); show prints one with its payload and last -n runs;
           add stores one (T is RFC 3339 or +D from now; --payload-file - reads stdin;
           a payload is at most 16 KiB); set changes the flags given on the entry as
           read (an empty --start or --end removes the bound), stored only if nobody
           changed it since (or since --rev N); rm removes it (--rev N: only if unchanged)
  permissions  print a role's NATS permissions as a nats-server configuration block
           (--json: as JSON); --registry-bucket B, and for replica --subject-prefix,
           --stream-prefix, --lease-bucket; --prefix and --inbox-prefix apply
`

// cli is the parsed command line.
type cli struct {
	stdout, stderr io.Writer

	natsContext string
	server      string
	prefix      string
	json        bool
	timeout     time.Duration
	by          string
	inboxPrefix string

	// Command flags.
	window time.Duration
	n      int
	wait   bool
	from   string
	to     string
	rerun  bool
	reason string
	forD   time.Duration
	until  string
	all    bool
	perm   permissionsFlags
	sched  scheduleFlags

	// given names the command's flags given on the command line: a flag given as
	// 0s or "" is not the same as no flag (pause --for 0s is no pause for ever).
	given map[string]bool
}

// usageError is a command line that cannot be run.
type usageError struct{ msg string }

func (e *usageError) Error() string { return e.msg }

func usagef(format string, args ...any) error { return &usageError{msg: fmt.Sprintf(format, args...)} }

// run is the whole command: it returns the exit code.
func run(ctx context.Context, args []string, stdout, stderr io.Writer) int {
	errOut := newTerminalSafe(stderr, false)
	defer errOut.Flush()
	stderr = errOut
	c := &cli{stdout: stdout, stderr: stderr, prefix: fleet.DefaultPrefix, timeout: fleet.DefaultTimeout,
		window: fleet.DefaultGatherWindow, by: defaultBy()}
	cmd, rest, err := c.parse(args)
	out := newTerminalSafe(stdout, c.json)
	defer out.Flush()
	c.stdout, stdout = out, out
	if err == nil && cmd == "help" {
		fmt.Fprint(stdout, usage)
		return exitOK
	}
	if err == nil && cmd == "version" {
		fmt.Fprintln(stdout, "anarchon", fleet.Version)
		return exitOK
	}
	switch {
	case err == nil && cmd == "permissions":
		err = c.permissions(rest) // needs no server
	case err == nil:
		err = c.run(ctx, cmd, rest)
	}
	var ue *usageError
	switch {
	case err == nil:
		return exitOK
	case errors.Is(err, flag.ErrHelp):
		fmt.Fprint(stdout, usage)
		return exitOK
	case errors.As(err, &ue):
		fmt.Fprintf(stderr, "anarchon: %s (anarchon help shows the usage)\n", visible(oneLine(ue.msg)))
		return exitUsage
	default:
		fmt.Fprintf(stderr, "anarchon: %s\n", visible(oneLine(describe(err))))
		return exitFail
	}
}

// commands and the flags each takes besides the common ones.
var commands = map[string]func(c *cli, fs *flag.FlagSet){
	"jobs": func(c *cli, fs *flag.FlagSet) {
		fs.DurationVar(&c.window, "window", c.window, "how long to collect the replicas' answers")
	},
	"history": func(c *cli, fs *flag.FlagSet) {
		fs.IntVar(&c.n, "n", c.n, "how many runs")
	},
	"trigger": func(c *cli, fs *flag.FlagSet) {
		fs.BoolVar(&c.wait, "wait", false, "wait for the run to end")
	},
	"backfill": func(c *cli, fs *flag.FlagSet) {
		fs.StringVar(&c.from, "from", "", "the range's start (RFC 3339, or a duration back from now)")
		fs.StringVar(&c.to, "to", "", "the range's end, not included")
		fs.BoolVar(&c.rerun, "rerun", false, "also run the slots that ran")
		fs.BoolVar(&c.wait, "wait", false, "wait for every slot to end")
	},
	"pause": func(c *cli, fs *flag.FlagSet) {
		fs.StringVar(&c.reason, "reason", "", "why (required)")
		fs.DurationVar(&c.forD, "for", 0, "end the pause after this long")
		fs.StringVar(&c.until, "until", "", "end the pause at this time (RFC 3339)")
		fs.BoolVar(&c.all, "all", false, "pause every job")
	},
	"resume": func(c *cli, fs *flag.FlagSet) {
		fs.BoolVar(&c.all, "all", false, "end the all-jobs pause")
	},
	"active":  func(*cli, *flag.FlagSet) {},
	"watch":   func(*cli, *flag.FlagSet) {},
	"help":    func(*cli, *flag.FlagSet) {},
	"version": func(*cli, *flag.FlagSet) {},
	"permissions": func(c *cli, fs *flag.FlagSet) {
		c.perm.register(fs)
	},
	"schedule": func(c *cli, fs *flag.FlagSet) { c.registerSchedule(fs) },
}

// common registers the flags every command takes, with the values parsed so far as
// defaults (so flags before the command survive the command's own parse).
func (c *cli) common(fs *flag.FlagSet) {
	fs.StringVar(&c.natsContext, "context", c.natsContext, "NATS CLI context")
	fs.StringVar(&c.server, "server", c.server, "NATS server URL")
	fs.StringVar(&c.prefix, "prefix", c.prefix, "subject prefix")
	fs.BoolVar(&c.json, "json", c.json, "JSON output")
	fs.DurationVar(&c.timeout, "timeout", c.timeout, "request timeout")
	fs.StringVar(&c.by, "by", c.by, "who asks")
	fs.StringVar(&c.inboxPrefix, "inbox-prefix", c.inboxPrefix, "inbox prefix")
}

// parse reads the common flags, the command, then the command's arguments and flags
// in any order.
func (c *cli) parse(args []string) (string, []string, error) {
	root := flag.NewFlagSet("anarchon", flag.ContinueOnError)
	root.SetOutput(io.Discard)
	c.common(root)
	if err := root.Parse(args); err != nil {
		return "", nil, flagError(err)
	}
	if root.NArg() == 0 {
		return "", nil, usagef("no command given")
	}
	cmd := root.Arg(0)
	flags, ok := commands[cmd]
	if !ok {
		return "", nil, usagef("unknown command %q", cmd)
	}
	fs := flag.NewFlagSet(cmd, flag.ContinueOnError)
	fs.SetOutput(io.Discard)
	c.common(fs)
	flags(c, fs)
	rest, err := parseInterleaved(fs, root.Args()[1:])
	if err != nil {
		return "", nil, flagError(err)
	}
	c.given = map[string]bool{}
	fs.Visit(func(f *flag.Flag) { c.given[f.Name] = true })
	switch {
	case c.timeout <= 0:
		return "", nil, usagef("--timeout %v is not positive", c.timeout)
	case c.window <= 0:
		return "", nil, usagef("--window %v is not positive", c.window)
	case c.server != "" && c.natsContext != "":
		return "", nil, usagef("give --server or --context, not both")
	case c.inboxPrefix != "" && (!strings.HasPrefix(c.inboxPrefix, "_INBOX") || strings.ContainsAny(c.inboxPrefix, "*> \t\r\n") ||
		strings.HasSuffix(c.inboxPrefix, ".")):
		return "", nil, usagef("--inbox-prefix %q: subject tokens beginning with _INBOX (replicas answer on inboxes only), without wildcards or white space", c.inboxPrefix)
	}
	return cmd, rest, nil
}

func flagError(err error) error {
	if errors.Is(err, flag.ErrHelp) {
		return err
	}
	return usagef("%v", err)
}

// parseInterleaved parses fs's flags wherever they are among the positional
// arguments, which it returns in order. After "--" everything is positional.
func parseInterleaved(fs *flag.FlagSet, args []string) ([]string, error) {
	var pos []string
	for {
		if err := fs.Parse(args); err != nil {
			return nil, err
		}
		rest := fs.Args()
		if used := len(args) - len(rest); used > 0 && args[used-1] == "--" {
			return append(pos, rest...), nil
		}
		if len(rest) == 0 {
			return pos, nil
		}
		pos, args = append(pos, rest[0]), rest[1:]
	}
}

// job returns the one JOB argument, or none with --all where allowed.
func (c *cli) job(cmd string, args []string, allowAll bool) (string, error) {
	switch {
	case allowAll && c.all && len(args) == 0:
		return "", nil
	case allowAll && c.all:
		return "", usagef("%s --all takes no JOB", cmd)
	case len(args) == 0:
		return "", usagef("%s needs a JOB", cmd)
	case len(args) > 1:
		return "", usagef("%s takes one JOB, got %d arguments (quote a name with spaces)", cmd, len(args))
	}
	return args[0], nil
}

// run connects and runs cmd.
func (c *cli) run(ctx context.Context, cmd string, args []string) error {
	var job, action, id string
	var err error
	switch cmd {
	case "schedule":
		action, job, id, err = c.scheduleArgs(args)
	case "jobs":
		if len(args) > 0 {
			return usagef("jobs takes no arguments")
		}
	case "pause", "resume":
		job, err = c.job(cmd, args, true)
	case "active", "watch":
		if len(args) > 1 {
			return usagef("%s takes at most one JOB, got %d arguments (quote a name with spaces)", cmd, len(args))
		}
		if len(args) == 1 {
			job = args[0]
		}
	default:
		job, err = c.job(cmd, args, false)
	}
	if err != nil {
		return err
	}
	var until time.Time
	if cmd == "pause" {
		if until, err = c.pauseEnd(); err != nil {
			return err
		}
	}
	if cmd == "history" && c.n < 0 {
		return usagef("-n %d is negative", c.n)
	}
	var from, to time.Time
	if cmd == "backfill" {
		if from, to, err = c.backfillRange(time.Now()); err != nil {
			return err
		}
	}

	// A permissions violation is reported on the connection, not to the request:
	// it ends the command at once with the server's words instead of a timeout.
	ctx, cancel := context.WithCancelCause(ctx)
	defer cancel(nil)
	nc, err := c.connect(cancel)
	if err != nil {
		return err
	}
	defer nc.Close()
	client, err := fleet.NewClient(nc, fleet.WithPrefix(c.prefix), fleet.WithTimeout(c.timeout), fleet.WithGatherWindow(c.window))
	if err != nil {
		return usagef("%v", err)
	}
	if cmd == "watch" {
		return c.watch(ctx, client, job)
	}
	rctx, rcancel := context.WithTimeout(ctx, c.timeout)
	defer rcancel()
	switch cmd {
	case "schedule":
		return c.schedule(rctx, client, action, job, id)
	case "active":
		return c.active(rctx, client, job)
	case "jobs":
		return c.jobs(rctx, client)
	case "history":
		return c.history(rctx, client, job)
	case "trigger":
		return c.trigger(rctx, client, job)
	case "backfill":
		return c.backfill(rctx, client, job, from, to)
	case "pause":
		return c.pause(rctx, client, job, until)
	default:
		return c.resume(rctx, client, job)
	}
}

// pauseEnd checks the pause flags before any request: a pause without --for and
// --until has no end, so one that was given must end in the future (--for 0s, an
// empty --until or one in the past by this machine's clock are refused, never read
// as "no end"). The replica judges the time again on its own clock.
func (c *cli) pauseEnd() (time.Time, error) {
	switch {
	case c.reason == "":
		return time.Time{}, usagef("pause needs --reason")
	case c.given["for"] && c.given["until"]:
		return time.Time{}, usagef("give --for or --until, not both")
	case c.given["for"] && c.forD <= 0:
		return time.Time{}, usagef("--for %v is not positive (a pause without --for or --until has no end)", c.forD)
	case !c.given["until"]:
		return time.Time{}, nil
	}
	t, err := time.Parse(time.RFC3339, c.until)
	if err != nil {
		return time.Time{}, usagef("--until %q is not an RFC 3339 time such as 2026-03-01T18:00:00Z", c.until)
	}
	if now := time.Now(); !t.After(now) {
		return time.Time{}, usagef("--until %s is in the past (this machine's clock says %s)",
			t.Format(time.RFC3339Nano), now.UTC().Format(time.RFC3339))
	}
	return t, nil
}

func (c *cli) connect(onPermissions context.CancelCauseFunc) (*nats.Conn, error) {
	opts := []nats.Option{
		nats.Name("anarchon-cli"),
		nats.ErrorHandler(func(_ *nats.Conn, _ *nats.Subscription, err error) {
			if errors.Is(err, nats.ErrPermissionViolation) {
				onPermissions(err)
			}
		}),
	}
	if c.inboxPrefix != "" { // after the context's own, which it overrides
		opts = append(opts, nats.CustomInboxPrefix(c.inboxPrefix))
	}
	if c.server != "" {
		nc, err := nats.Connect(c.server, opts...)
		if err != nil {
			return nil, fmt.Errorf("connect to %s: %w", redact(c.server), err)
		}
		return nc, nil
	}
	return connect.Context(c.natsContext, opts...)
}

// redact hides a password in a URL given on the command line.
func redact(url string) string {
	scheme, rest, ok := strings.Cut(url, "://")
	if !ok {
		return url
	}
	creds, host, ok := strings.Cut(rest, "@")
	if !ok {
		return url
	}
	if name, _, ok := strings.Cut(creds, ":"); ok {
		return scheme + "://" + name + ":xxx@" + host
	}
	return url
}

// defaultBy names whoever runs the command: user@host.
func defaultBy() string {
	name := os.Getenv("USER")
	if u, err := user.Current(); err == nil && u.Username != "" {
		name = u.Username
	}
	if name == "" {
		name = "unknown"
	}
	if host, err := os.Hostname(); err == nil && host != "" {
		return name + "@" + host
	}
	return name
}

// describe writes err for a person: a replica's refusal as its own words and name.
func describe(err error) string {
	var se *fleet.ServiceError
	if errors.As(err, &se) {
		msg := se.Description
		if se.Instance != "" {
			msg += " (replica " + se.Instance + ")"
		}
		switch se.Code {
		case fleet.CodeJobBusy:
			msg += "; nothing ran: the job forbids overlap, trigger it again once its run ends (anarchon active shows it)"
		case fleet.CodeTooManyManualRuns:
			msg += "; nothing ran: trigger it again once one of them ends"
		}
		if prefix, _, ok := strings.Cut(err.Error(), ": fleet: "); ok {
			return prefix + ": " + msg // the command's own context, then the replica's words
		}
		return msg
	}
	return err.Error()
}

func oneLine(s string) string { return strings.Join(strings.Fields(s), " ") }
