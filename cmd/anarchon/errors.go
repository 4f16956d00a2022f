package main

import (
	"context"
	"encoding/base64"
	"errors"
	"fmt"
	"regexp"
	"strings"
	"time"

	"github.com/nats-io/nats.go"

	"github.com/anarchon/anarchon/fleet"
)

// failed says a request's failure once, for a person: what was asked (op, such
// as `trigger "report"`), what went wrong and where, and what to do. It names
// jobs, never the subject tokens they travel under.
func (c *cli) failed(ctx context.Context, client *fleet.Client, op, job string, err error) error {
	if cause := context.Cause(ctx); errors.Is(cause, nats.ErrPermissionViolation) {
		return fmt.Errorf("%s: %s", op, c.refused(cause))
	}
	var nr *fleet.NoReplicaError
	var se *fleet.ServiceError
	switch {
	case errors.As(err, &nr) && nr.Checked && len(nr.Up) > 0:
		msg := fmt.Sprintf("%s: no replica declares job %q (replicas up: %s)", op, job, upList(nr.Up))
		if s := c.suggestJob(client, job); s != "" {
			return fmt.Errorf("%s; did you mean %q?", msg, s)
		}
		return fmt.Errorf("%s; anarchon jobs lists the jobs", msg)
	case errors.As(err, &nr) && nr.Checked, errors.Is(err, fleet.ErrNoReplica):
		return fmt.Errorf("%s: no replica is up: nothing answers under prefix %q; start one (fleet.Serve), or check --prefix and --server",
			op, c.prefix)
	case errors.As(err, &nr):
		return fmt.Errorf("%s: no replica that declares job %q answered; anarchon jobs shows which replicas are up", op, job)
	case errors.As(err, &se):
		return fmt.Errorf("%s: %s", op, c.serviceError(se, op, job))
	case errors.Is(err, context.DeadlineExceeded), errors.Is(err, nats.ErrTimeout):
		return fmt.Errorf("%s: no answer within --timeout %v; give a longer --timeout, or see whether the replicas are up with anarchon jobs",
			op, c.timeout)
	}
	return fmt.Errorf("%s: %s", op, plain(err.Error()))
}

// violation is the server's permissions violation: what was refused, on which
// subject.
var violation = regexp.MustCompile(`Permissions Violation for (Publish|Subscription) to "([^"]*)"`)

// refused says a permissions violation: what this user may not do, and what
// to do about it.
func (c *cli) refused(err error) string {
	m := violation.FindStringSubmatch(err.Error())
	switch {
	case m == nil:
		return fmt.Sprintf("the server refused: %s; this user may not do it (anarchon permissions operator prints an operator's permissions)", plain(err.Error()))
	case m[1] == "Subscription":
		return fmt.Sprintf("the server refused this user a subscription to %q (permissions violation): connect with the inbox prefix its permissions allow (--inbox-prefix, or the context's inbox_prefix: anarchon permissions ROLE prints it)", m[2])
	}
	what := fmt.Sprintf("publishing to %q", m[2])
	if p := subjects.FindStringSubmatch(m[2]); p != nil && p[0] == m[2] {
		what = "sending " + plain(m[2])
	}
	return fmt.Sprintf("the server refused this user %s (permissions violation): this user's role may not do it (anarchon permissions operator prints an operator's permissions)", what)
}

// serviceError says a replica's refusal by its code, in the command's words,
// with the replica's own words where they add something.
func (c *cli) serviceError(se *fleet.ServiceError, op, job string) string {
	words := strings.Replace(plain(se.Description), op+": ", "", 1) // said already
	at := ""
	if se.Instance != "" {
		at = " (replica " + se.Instance + ")"
	}
	switch se.Code {
	case fleet.CodeJobBusy:
		return fmt.Sprintf("nothing ran: %s%s; the job forbids overlap: trigger it again once its run ends (%s shows it)",
			words, at, cmdline("active", []string{job}))
	case fleet.CodeTooManyManualRuns:
		return fmt.Sprintf("nothing ran: %s%s; trigger it again once one of them ends", words, at)
	// The replica's words for an entry repeat the job and the entry the
	// operation already names: the sentinel's words are enough.
	case fleet.CodeEntryNotFound:
		return fmt.Sprintf("no schedule entry of job %q has that ID%s; %s lists the job's entries", job, at, cmdline("schedule ls", []string{job}))
	case fleet.CodeEntryExists:
		return fmt.Sprintf("a schedule entry with that ID exists%s; change it with anarchon schedule set, or remove it with anarchon schedule rm", at)
	case fleet.CodeEntryConflict:
		return fmt.Sprintf("the schedule entry was changed by another writer since the revision this is based on%s; nothing was stored: read it again with anarchon schedule show", at)
	case fleet.CodeNotSupported:
		return fmt.Sprintf("%s%s: the replica's backend does not support it", words, at)
	case fleet.CodeUnavailable:
		return fmt.Sprintf("%s%s; try again", words, at)
	}
	return words + at
}

// suggestJob is the declared job nearest to job, from the registry, if one is
// near enough to be what was meant.
func (c *cli) suggestJob(client *fleet.Client, job string) string {
	ctx, cancel := context.WithTimeout(context.Background(), min(c.timeout, 2*time.Second))
	defer cancel()
	regs, _, err := client.Registry(ctx)
	if err != nil {
		return ""
	}
	var names []string
	for _, r := range regs {
		for _, d := range r.Jobs {
			names = append(names, d.Name)
		}
	}
	return closest(job, names)
}

func upList(up []string) string {
	const most = 10
	s := strings.Join(up[:min(len(up), most)], ", ")
	if n := len(up) - most; n > 0 {
		s += fmt.Sprintf(" and %d more", n)
	}
	return s
}

// prefixes are the package prefixes that wrapped errors repeat ("scheduler:
// add entry: scheduler: schedule entry exists").
var prefixes = regexp.MustCompile(`\b(fleet|scheduler|backend|jetstream|kvlease|sqlbackend|nats|connect): `)

// subjects are fleet subjects with a job token in them.
var subjects = regexp.MustCompile(`\b[A-Za-z0-9_-]+\.(TRIGGER|BACKFILL|PAUSE|RESUME|HISTORY|ACTIVE|PREVIEW|WHY|ENTRIES|EVENTS)\.([A-Za-z0-9_-]+)((\.[A-Z]+)?)`)

// plain is an error's text without the package prefixes it repeats, a
// "bad request: " prefix, or a job's subject token: the job's name is said.
func plain(s string) string {
	s = prefixes.ReplaceAllString(s, "")
	s = strings.TrimPrefix(s, "bad request: ")
	return subjects.ReplaceAllStringFunc(s, func(m string) string {
		p := subjects.FindStringSubmatch(m)
		name, err := base64.RawURLEncoding.DecodeString(p[2])
		if err != nil {
			return m
		}
		return fmt.Sprintf("the %s request of job %q", strings.ToLower(p[1]+p[3]), name)
	})
}
