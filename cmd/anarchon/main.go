// Command anarchon operates a fleet of anarchon schedulers from anywhere on its NATS
// account: list every job and the replicas that declare it, describe a job's
// policies and limits, read its history, trigger a run, backfill a past range, pause
// and resume one job or all of them, list the runs in progress, manage schedule
// entries and calendars, and watch the replicas' events live. It talks to the replicas' fleet
// service (package fleet); each replica must serve it (fleet.Serve).
//
// Usage:
//
//	anarchon [flags] jobs [--window D]
//	anarchon [flags] describe JOB [ENTRY]
//	anarchon [flags] history JOB [-n N] [--status S,...] [--since T] [--entry ID]
//	anarchon [flags] active [JOB]
//	anarchon [flags] trigger JOB [--wait]
//	anarchon [flags] backfill JOB --from T --to T [--rerun] [--wait]
//	anarchon [flags] pause JOB|--all --reason R [--for D | --until T]
//	anarchon [flags] resume JOB|--all
//	anarchon [flags] watch [JOB]
//	anarchon [flags] schedule ls|show|add|set|rm JOB [ID] [flags]
//	anarchon [flags] calendar ls|show|set|rm [NAME] [flags]
//	anarchon [flags] permissions viewer|operator|replica
//	anarchon completion bash|zsh|fish|powershell
//	anarchon version
//
// `anarchon help COMMAND` and `anarchon COMMAND --help` print a command's own
// help; `anarchon completion bash` (zsh, fish, powershell) prints a completion
// script, which completes commands, flags and the fleet's job names.
//
// It connects as the nats CLI does, with its flags and environment variables:
// --server/-s (NATS_URL), --context (NATS_CONTEXT; default: the context selected
// with `nats context select`, unless --no-context), --creds (NATS_CREDS), --user
// and --password (NATS_USER, NATS_PASSWORD; a user without a password is a
// token), --nkey (NATS_NKEY), --tlscert, --tlskey, --tlsca (NATS_CERT, NATS_KEY,
// NATS_CA), --tlsfirst, --inbox-prefix and --timeout (NATS_TIMEOUT). Flags
// override the context's settings; a flag of credentials replaces the context's
// credentials. With no server anywhere it dials nats://127.0.0.1:4222.
//
// Tables fit 100 columns, cutting long names and errors with an ellipsis; -o wide
// shows every column whole, and --json (or -o json) prints the replies as package
// fleet defines them. Times are RFC 3339 in UTC (with milliseconds when a time has
// them), and relative ("12s ago", "in 3m") in tables. Command lines the command
// prints for you to paste quote every word for a POSIX shell.
//
// Text the replicas stored (a handler's error, a pause's reason, a job's or a
// replica's name) is printed with its control characters made visible, so that it
// cannot drive the terminal (an OSC 52 that sets the clipboard, a clear screen, a
// right-to-left override) and a row stays one line: C0 controls as \t, \n, \r,
// \x1b, DEL as \x7f, the C1 controls and the bidi controls as \u009b, \u202e.
// --json writes the texts as stored, encoding/json's way, with the C1 and bidi
// controls and DEL as JSON escapes (\u009b), which decode to the same strings.
//
// A failure prints one line to stderr, which says what failed, where and what to
// do, and exits 1; a usage error exits 2, with the command or flag meant when one
// is close to what was typed. Warnings (replicas that disagree on a job's schedule
// or pause, mixed library versions) go to stderr after the table and into the
// JSON's warnings fields.
//
// The command is a module of its own, so that programs that import the library
// download none of its dependencies (its parser, spf13/cobra). The nats CLI's
// parser, choria-io/fisk, is not served by the module proxy this project builds
// from; cobra gives per-command help, completion and suggestions alike.
package main

import (
	"context"
	"os"
	"os/signal"
	"syscall"
)

func main() {
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	code := run(ctx, os.Args[1:], os.Getenv, os.Stdout, os.Stderr)
	stop()
	os.Exit(code)
}
