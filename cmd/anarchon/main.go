// Command anarchon operates a fleet of anarchon schedulers from anywhere on its NATS
// account: list every job and the replicas that declare it, read a job's history,
// trigger a run, pause and resume one job or all of them, list the runs in progress,
// and watch the replicas' events live. It talks to the replicas'
// fleet service (package fleet); each replica must serve it (fleet.Serve).
//
// Usage:
//
//	anarchon [flags] jobs [--window D]
//	anarchon [flags] history JOB [-n N]
//	anarchon [flags] trigger JOB [--wait]
//	anarchon [flags] backfill JOB --from T --to T [--rerun] [--wait]
//	anarchon [flags] pause JOB --reason R [--for D | --until T]
//	anarchon [flags] pause --all --reason R [--for D | --until T]
//	anarchon [flags] resume JOB
//	anarchon [flags] resume --all
//	anarchon [flags] active [JOB]
//	anarchon [flags] watch [JOB]
//	anarchon [flags] schedule ls JOB [--after ID] [--limit N]
//	anarchon [flags] schedule show JOB ID [-n N]
//	anarchon [flags] schedule add JOB ID (--every D | --cron E [--zone Z] | --at T)
//	                 [--start T] [--end T] [--payload S | --payload-file F] [--paused]
//	anarchon [flags] schedule set JOB ID [--rev N] [the flags of add that change]
//	anarchon [flags] schedule rm JOB ID [--rev N]
//	anarchon [flags] permissions viewer|operator|replica
//	anarchon version
//
// Flags, before or after the command:
//
//	--context NAME   NATS CLI context (default: the selected one; `nats context select`)
//	--server URL     NATS server URL instead of a context
//	--prefix P       the fleet's subject prefix (default anarchon)
//	--json           JSON for scripts instead of tables
//	--timeout D      bounds each request, and a trigger's --wait (default 5s)
//	--by WHO         who asks, recorded with pauses and triggers (default user@host)
//	--inbox-prefix P the connection's inbox prefix, for a user whose permissions
//	                 allow its own inboxes only (default: the context's, else _INBOX)
//
// Tables are the default; --json prints the replies as package fleet defines them
// (watch --json: one fleet.Event per line). jobs shows, per job, its state (active,
// or paused with reason, who and until), schedule, next slot, last run (slot, start
// lag, duration, outcome, replica), last success, last failure and the runs in
// progress. watch needs replicas that publish their events (fleet.Events) and runs
// until interrupted. permissions prints the NATS permissions of a role
// (fleet.Permissions) as a nats-server configuration block, with the inbox prefix
// its users connect with; it needs no server. A pause without --for and --until
// has no end; a --for or --until that is given must end it in the future (--for 0s
// is refused, not read as "no end"). backfill runs, on one replica, the job's
// slots in [--from, --to) that never ran (scheduler.Backfill); a time is RFC 3339
// or a duration back from now (--from -2h, or 2h); --rerun also runs the slots
// that ran; --wait waits for every slot to end (within --timeout) and lists them.
//
// schedule operates a job's schedule entries (scheduler.AddEntry): stored in the
// backend, run by every replica that declares the job, each slot once. ls lists a
// page of them, ordered by ID, with each one's schedule, state, next slot, last
// run, success and failure, payload size and revision, and the command for the
// next page; show prints one with its payload and its recent runs; add stores
// one; set changes the flags given on the entry as read and stores it only if
// nobody changed it since (or since --rev N: a conflict stores nothing and says
// so); rm removes one (with --rev N only if unchanged). The entries of a job no
// replica declares are never run, and no replica answers for them.
//
// Text the replicas stored (a handler's error, a pause's reason, a job's or a
// replica's name) is printed with its control characters made visible, so that it
// cannot drive the terminal (an OSC 52 that sets the clipboard, a clear screen, a
// right-to-left override) and a row stays one line: C0 controls as \t, \n, \r,
// \x1b, DEL as \x7f, the C1 controls and the bidi controls as \u009b, \u202e.
// --json writes the texts as stored, encoding/json's way, with the C1 and bidi
// controls and DEL as JSON escapes (\u009b), which decode to the same strings.
//
// A job's schedule is shown in words, as the status page shows it
// (scheduler.DescribeSchedule: "at 09:00 on MON-FRI (Europe/Athens)"); --json
// carries both ("schedule" and "schedule_text"). A command about a job that no
// replica declares says so and names the replicas that are up ("no replica
// declares job "X" (replicas up: a, b, c)"), which tells a misspelt job from a
// fleet that is down ("no replica is up"). resume of a job that is not paused
// says that there was nothing to resume.
//
// help, -h and --help print the usage and exit 0. A failure prints one line to
// stderr and exits 1; a usage error exits 2. Warnings
// (replicas that disagree on a job's schedule or pause, mixed library versions) go to
// stderr after the table and into the JSON's warnings fields.
//
// Examples:
//
//	anarchon jobs
//	anarchon active
//	anarchon watch report
//	anarchon pause report --reason "quarter close" --for 2h
//	anarchon trigger report --wait --timeout 1m
//	anarchon backfill report --from 2025-06-01T00:00:00Z --to 2025-06-02T00:00:00Z --wait --timeout 10m
//	anarchon history report -n 50 --json | jq '.runs[] | select(.status != "ok")'
//	anarchon schedule add feeds eu-west --cron "0 9 * * *" --zone Europe/Athens --payload '{"region":"eu-west"}'
//	anarchon schedule set feeds eu-west --paused
//	anarchon schedule ls feeds
//
// The command line is parsed with the standard flag package, one FlagSet per
// command, flags allowed before and after the command's arguments. The NATS CLI
// uses choria-io/fisk (a kingpin fork), which would give generated help and shell
// completion; but this command lives in the library's module, so every dependency
// it adds is one more module in the go.mod of every program that imports the
// library, and ten commands with a handful of flags need nothing flag lacks. The
// examples in this repository use flag too.
package main

import (
	"context"
	"os"
	"os/signal"
	"syscall"
)

func main() {
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	code := run(ctx, os.Args[1:], os.Stdout, os.Stderr)
	stop()
	os.Exit(code)
}
