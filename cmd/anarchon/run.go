package main

import (
	"context"
	"errors"
	"fmt"
	"io"
	"os"
	"os/user"
	"strings"
	"time"

	"github.com/spf13/cobra"
	"github.com/spf13/pflag"

	"github.com/anarchon/anarchon/fleet"
)

// Exit codes.
const (
	exitOK    = 0
	exitFail  = 1 // the command failed: one line on stderr
	exitUsage = 2 // the command line is wrong
)

// cli is the parsed command line and where the command writes.
type cli struct {
	stdout, stderr io.Writer
	getenv         func(string) string
	cmd            *cobra.Command // the command being run

	conn    connFlags
	prefix  string
	json    bool
	output  string // table (the default), wide or json
	timeout time.Duration
	by      string

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
	status []string
	since  string
	entry  string
	// allEntries is backfill's --all-entries.
	allEntries bool
	perm       permissionsFlags
	sched      scheduleFlags
	cal        calendarFlags
}

// given reports whether a flag was given on the command line (or by its
// environment variable): a flag given as 0s or "" is not the same as no flag.
func (c *cli) given(name string) bool {
	f := c.cmd.Flags().Lookup(name)
	return f != nil && f.Changed
}

// wide and jsonOut say which output -o (or --json) asked for.
func (c *cli) wide() bool    { return c.output == "wide" }
func (c *cli) jsonOut() bool { return c.json }

// usageError is a command line that cannot be run.
type usageError struct{ msg string }

func (e *usageError) Error() string { return e.msg }

func usagef(format string, args ...any) error { return &usageError{msg: fmt.Sprintf(format, args...)} }

// run is the whole command: it returns the exit code. getenv reads the
// environment (NATS_URL, NATS_CONTEXT, ...).
func run(ctx context.Context, args []string, getenv func(string) string, stdout, stderr io.Writer) int {
	errOut := newTerminalSafe(stderr, false)
	defer errOut.Flush()
	c := &cli{stderr: errOut, getenv: getenv, prefix: fleet.DefaultPrefix, timeout: fleet.DefaultTimeout,
		window: fleet.DefaultGatherWindow, by: defaultBy()}
	var out *terminalSafe
	root := c.root(func() io.Writer {
		if out == nil {
			out = newTerminalSafe(stdout, c.json)
			c.stdout = out
		}
		return out
	})
	root.SetArgs(args)
	root.SetErr(errOut)
	cmd, err := root.ExecuteContextC(ctx)
	if out == nil { // help and usage errors print before any command ran
		out = newTerminalSafe(stdout, c.json)
	}
	defer out.Flush()
	var ue *usageError
	switch {
	case err == nil:
		return exitOK
	case errors.As(err, &ue):
		msg := ue.msg
		if !strings.Contains(msg, "(anarchon ") {
			msg += fmt.Sprintf(" (%s shows the usage)", cmdHelp(cmd))
		}
		fmt.Fprintf(errOut, "anarchon: %s\n", visible(oneLine(msg)))
		return exitUsage
	default:
		fmt.Fprintf(errOut, "anarchon: %s\n", visible(oneLine(err.Error())))
		return exitFail
	}
}

// root builds the command tree. stdout gives the output writer, made once the
// command's --json is known.
func (c *cli) root(stdout func() io.Writer) *cobra.Command {
	root := &cobra.Command{
		Use:   "anarchon",
		Short: "Operate a fleet of anarchon schedulers over NATS",
		Long: `anarchon operates a fleet of anarchon schedulers from anywhere on its NATS account:
the jobs and the replicas that declare them, a job's policies, history and runs in
progress, triggers, backfills, pauses, schedule entries and live events.

It connects as the nats CLI does: --server or NATS_URL, --context or NATS_CONTEXT
(default: the context selected with nats context select), and --creds, --user,
--password, --nkey and the TLS flags, which override the context's settings.`,
		Example: `  anarchon jobs
  anarchon describe report
  anarchon history report --status error --since 24h
  anarchon pause report --reason "quarter close" --for 2h
  anarchon trigger report --wait --timeout 1m
  anarchon schedule add feeds eu-west --cron "0 9 * * *" --zone Europe/Athens`,
		SilenceErrors: true,
		SilenceUsage:  true,
		PersistentPreRunE: func(cmd *cobra.Command, _ []string) error {
			c.cmd = cmd
			if err := c.fromEnv(cmd.Flags()); err != nil {
				return err
			}
			if err := c.checkCommon(); err != nil {
				return err
			}
			c.stdout = stdout()
			return nil
		},
	}
	root.Args = cobra.ArbitraryArgs
	var showVersion bool
	root.Flags().BoolVarP(&showVersion, "version", "v", false, "print the version (as anarchon version)")
	root.RunE = func(cmd *cobra.Command, args []string) error {
		if showVersion {
			_, err := fmt.Fprintln(c.stdout, versionText())
			return err
		}
		return groupArgs(cmd, args)
	}
	root.SetFlagErrorFunc(flagError)
	root.SetUsageFunc(usage)
	root.SetOut(stdoutLazy{stdout})
	fs := root.PersistentFlags()
	c.conn.register(fs)
	fs.StringVar(&c.prefix, "prefix", c.prefix, "the fleet's subject prefix")
	fs.BoolVar(&c.json, "json", false, "print JSON for scripts (the fleet package's structs)")
	fs.StringVarP(&c.output, "output", "o", "", "table (the default, at most 100 columns), wide or json")
	fs.DurationVar(&c.timeout, "timeout", c.timeout, "bounds each request, and --wait (env NATS_TIMEOUT)")
	fs.StringVar(&c.by, "by", c.by, "who asks, recorded with pauses, triggers, entries and calendars")
	root.AddCommand(c.commands()...)
	root.AddCommand(c.scheduleCommand(), c.calendarCommand(), c.permissionsCommand(), c.versionCommand())
	return root
}

// stdoutLazy writes where the command's output goes, once it is made.
type stdoutLazy struct{ w func() io.Writer }

func (s stdoutLazy) Write(p []byte) (int, error) { return s.w().Write(p) }

// usage writes a command's usage as cobra's default does, with its flags
// wrapped at 100 columns. It is a function, not a template: a template executed
// through text/template keeps every method of the program in the binary.
func usage(c *cobra.Command) error {
	w := c.OutOrStdout()
	fmt.Fprint(w, "Usage:")
	if c.Runnable() {
		fmt.Fprintf(w, "\n  %s", c.UseLine())
	}
	if c.HasAvailableSubCommands() {
		fmt.Fprintf(w, "\n  %s [command]", c.CommandPath())
	}
	if c.HasExample() {
		fmt.Fprintf(w, "\n\nExamples:\n%s", c.Example)
	}
	if c.HasAvailableSubCommands() {
		fmt.Fprint(w, "\n\nCommands:")
		for _, sub := range c.Commands() {
			if sub.IsAvailableCommand() || sub.Name() == "help" {
				fmt.Fprintf(w, "\n  %-*s %s", sub.NamePadding(), sub.Name(), sub.Short)
			}
		}
	}
	if c.HasAvailableLocalFlags() {
		fmt.Fprintf(w, "\n\nFlags:\n%s", strings.TrimRight(c.LocalFlags().FlagUsagesWrapped(maxWidth), " \n"))
	}
	if c.HasAvailableInheritedFlags() {
		fmt.Fprintf(w, "\n\nGlobal Flags:\n%s", strings.TrimRight(c.InheritedFlags().FlagUsagesWrapped(maxWidth), " \n"))
	}
	if c.HasAvailableSubCommands() {
		fmt.Fprintf(w, "\n\nUse \"%s [command] --help\" for more about a command.", c.CommandPath())
	}
	fmt.Fprintln(w)
	return nil
}

// checkCommon checks the flags every command takes, before any request.
func (c *cli) checkCommon() error {
	switch c.output {
	case "", "table":
		c.output = "table"
	case "wide":
	case "json":
		c.json = true
	default:
		return usagef("-o %q: the outputs are table, wide and json", c.output)
	}
	if c.json && c.given("output") && c.output != "json" {
		return usagef("give --json or -o %s, not both", c.output)
	}
	if c.json {
		c.output = "json"
	}
	if c.timeout <= 0 {
		return usagef("--timeout %v is not positive", c.timeout)
	}
	return c.conn.check()
}

// path is a command's words after anarchon ("schedule add"), or anarchon.
func path(cmd *cobra.Command) string {
	if !cmd.HasParent() {
		return cmd.Name()
	}
	return strings.TrimPrefix(cmd.CommandPath(), cmd.Root().Name()+" ")
}

// cmdHelp is the command line that shows a command's help.
func cmdHelp(cmd *cobra.Command) string {
	if cmd == nil || !cmd.HasParent() {
		return "anarchon --help"
	}
	return "anarchon " + path(cmd) + " --help"
}

// flagError is a flag cobra could not parse: a usage error, with the flag
// meant when one is close to what was typed.
func flagError(cmd *cobra.Command, err error) error {
	msg := err.Error()
	if name, ok := strings.CutPrefix(msg, "unknown flag: --"); ok {
		if s := closest(name, flagNames(cmd)); s != "" {
			return usagef("unknown flag --%s for %s; did you mean --%s? (%s lists its flags)", name, path(cmd), s, cmdHelp(cmd))
		}
		return usagef("unknown flag --%s for %s (%s lists its flags)", name, path(cmd), cmdHelp(cmd))
	}
	return usagef("%s", msg)
}

func flagNames(cmd *cobra.Command) []string {
	var names []string
	cmd.Flags().VisitAll(func(f *pflag.Flag) { names = append(names, f.Name) })
	cmd.InheritedFlags().VisitAll(func(f *pflag.Flag) { names = append(names, f.Name) })
	return names
}

// closest is the name among names nearest to s, when it is near enough to be
// what was meant.
func closest(s string, names []string) string {
	best, bestD := "", 3
	for _, n := range names {
		d := levenshtein(strings.ToLower(s), strings.ToLower(n))
		if d < bestD || (strings.HasPrefix(n, s) && len(s) >= 2 && bestD > 1) {
			best, bestD = n, min(d, 1)
		}
	}
	return best
}

func levenshtein(a, b string) int {
	ra, rb := []rune(a), []rune(b)
	prev := make([]int, len(rb)+1)
	for j := range prev {
		prev[j] = j
	}
	for i := 1; i <= len(ra); i++ {
		cur := make([]int, len(rb)+1)
		cur[0] = i
		for j := 1; j <= len(rb); j++ {
			cost := 1
			if ra[i-1] == rb[j-1] {
				cost = 0
			}
			cur[j] = min(prev[j]+1, cur[j-1]+1, prev[j-1]+cost)
		}
		prev = cur
	}
	return prev[len(rb)]
}

// unknownCommand is the error for a word that is no command of parent.
func unknownCommand(parent *cobra.Command, word string) error {
	var names []string
	for _, sub := range parent.Commands() {
		if sub.IsAvailableCommand() {
			names = append(names, sub.Name())
			names = append(names, sub.Aliases...)
		}
	}
	path := parent.CommandPath()
	if s := closest(word, names); s != "" {
		return usagef("unknown command %q for %s; did you mean %q? (%s lists the commands)", word, path, s, cmdHelp(parent))
	}
	return usagef("unknown command %q for %s (%s lists the commands)", word, path, cmdHelp(parent))
}

// groupArgs makes a command of subcommands refuse a word that is none of them.
func groupArgs(cmd *cobra.Command, args []string) error {
	if len(args) > 0 {
		return unknownCommand(cmd, args[0])
	}
	if !cmd.HasParent() {
		return usagef("no command given: %s (%s says what each does)", subNames(cmd), cmdHelp(cmd))
	}
	return usagef("%s needs a command: %s (%s says what each does)", path(cmd), subNames(cmd), cmdHelp(cmd))
}

func subNames(cmd *cobra.Command) string {
	var names []string
	for _, sub := range cmd.Commands() {
		if sub.IsAvailableCommand() {
			names = append(names, sub.Name())
		}
	}
	return strings.Join(names, ", ")
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

func oneLine(s string) string { return strings.Join(strings.Fields(s), " ") }
