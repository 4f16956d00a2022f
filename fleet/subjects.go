package fleet

import (
	"encoding/base64"
	"errors"
	"fmt"
	"strings"
	"unicode"

	"github.com/anarchon/anarchon/backend"
	"github.com/anarchon/anarchon/internal/natsutil"
)

// Endpoint verbs: the token after the prefix. They are upper case, as NATS's own
// API is ($JS.API.STREAM.INFO), so that no job's stream can listen on them: a job
// stream's tokens are lower case (jetstream's job token escapes every other
// byte), and a per-job endpoint's last token is a JobToken.
const (
	verbJobs      = "JOBS"
	verbPauseAll  = "PAUSEALL"
	verbResumeAll = "RESUMEALL"
	verbTrigger   = "TRIGGER"
	verbBackfill  = "BACKFILL"
	verbPause     = "PAUSE"
	verbResume    = "RESUME"
	verbHistory   = "HISTORY"
	verbActive    = "ACTIVE"
	verbPreview   = "PREVIEW"
	verbWhy       = "WHY"
	verbEvents    = "EVENTS"
	// A job's schedule entries: <prefix>.ENTRIES.<job>.<op>, one subscription
	// per job whatever the op; the op (the last token) names what is asked, so
	// that permissions tell reads (LIST, GET) from changes (ADD, UPDATE, REMOVE).
	verbEntries = "ENTRIES"
	opList      = "LIST"
	opGet       = "GET"
	opAdd       = "ADD"
	opUpdate    = "UPDATE"
	opRemove    = "REMOVE"
	// opTrigger runs one entry now: an operator's, as a change is.
	opTrigger = "TRIGGER"
	// The calendars, fleet-wide: <prefix>.CALENDARS.<op>, reads (LIST, GET)
	// apart from changes (PUT, DELETE).
	verbCalendars = "CALENDARS"
	opPut         = "PUT"
	opDelete      = "DELETE"
)

// JobToken encodes a job name as one subject token: base64url without padding, so
// any job name (dots, spaces, wildcards, any UTF-8) fits in one token made of
// letters, digits, '-' and '_'. Per-job endpoints are <prefix>.<VERB>.<JobToken>:
//
//	nats req anarchon.TRIGGER.$(printf %s 'nightly report' | basenc --base64url | tr -d =) '{"v":1}'
func JobToken(job string) string { return base64.RawURLEncoding.EncodeToString([]byte(job)) }

// subjects builds the endpoint subjects under one prefix.
type subjects string

func (p subjects) fleet(verb string) string { return string(p) + "." + verb }

func (p subjects) job(verb, job string) string { return string(p) + "." + verb + "." + JobToken(job) }

// entry is the subject of op on job's schedule entries: <prefix>.ENTRIES.<job>.<op>.
func (p subjects) entry(op, job string) string { return p.job(verbEntries, job) + "." + op }

// calendar is the subject of op on the calendars: <prefix>.CALENDARS.<op>.
func (p subjects) calendar(op string) string { return p.fleet(verbCalendars) + "." + op }

// all are the subjects the fleet service listens on and Events publishes to, as
// patterns: every endpoint of every job, and micro's own.
func (p subjects) all() []string {
	out := []string{p.fleet(verbJobs), p.fleet(verbPauseAll), p.fleet(verbResumeAll)}
	for _, verb := range []string{verbCalendars, verbTrigger, verbBackfill, verbPause, verbResume, verbHistory, verbActive, verbPreview, verbWhy, verbEvents} {
		out = append(out, p.fleet(verb)+".*")
	}
	out = append(out, p.fleet(verbEntries)+".*.*")
	return append(out, "$SRV.>")
}

// validPrefix reports whether prefix is one or more subject tokens without
// wildcards or white space, in no subject space NATS or a client library
// reserves ($JS, $KV, $SRV, $SYS and every other "$" name, _INBOX).
func validPrefix(prefix string) error {
	if prefix == "" {
		return fmt.Errorf("%w: empty prefix", ErrInvalidOption)
	}
	first, _, _ := strings.Cut(prefix, ".")
	if strings.HasPrefix(first, "$") || strings.HasPrefix(first, "_INBOX") {
		return fmt.Errorf("%w: prefix %q is in a subject space NATS reserves (%s)", ErrInvalidOption, prefix, first)
	}
	for tok := range strings.SplitSeq(prefix, ".") {
		switch {
		case tok == "":
			return fmt.Errorf("%w: prefix %q has an empty token", ErrInvalidOption, prefix)
		case tok == "*" || tok == ">" || strings.ContainsAny(tok, "*>"):
			return fmt.Errorf("%w: prefix %q has a wildcard", ErrInvalidOption, prefix)
		case strings.IndexFunc(tok, func(r rune) bool { return unicode.IsSpace(r) || unicode.IsControl(r) }) >= 0:
			return fmt.Errorf("%w: prefix %q has white space or a control character", ErrInvalidOption, prefix)
		}
	}
	return nil
}

// SubjectLister is a backend (or a backend.RunStore) that keeps its jobs on NATS
// subjects of its own: jetstream.Backend (each job's stream), jetstream.LeasedBackend
// and kvlease.Store (the lease bucket). Serve refuses to serve a scheduler whose
// backend's subjects overlap the fleet's or the registry's, since a stream that
// listens on a request's subject answers it with its publish acknowledgement.
type SubjectLister interface {
	// Subjects returns the subjects, or patterns, that the backend's streams listen
	// on and it publishes to for these jobs.
	Subjects(jobs []string) []string
}

// ErrSubjectsOverlap: two parts of one replica would share subjects (the fleet
// service, the registry, the backend): Serve refuses it, naming both.
var ErrSubjectsOverlap = errors.New("fleet: subjects overlap")

// subjectOwner is one part of a replica and the subjects it uses, with the job
// each is for ("" for none).
type subjectOwner struct {
	name     string
	subjects []string
	jobs     []string
}

// checkSubjects refuses a replica in which the fleet service, the registry and the
// backend (and its run store) listen on overlapping subjects.
func checkSubjects(p subjects, c *config, b backend.Backend, jobs []string) error {
	owners := []subjectOwner{{name: "the fleet service (prefix " + string(p) + ")", subjects: p.all()}}
	if !c.noRegistry {
		owners = append(owners, subjectOwner{name: "the registry (bucket " + c.bucket + ")", subjects: []string{registrySubjects(c.bucket)}})
	}
	if l, ok := b.(SubjectLister); ok {
		owners = append(owners, subjectsOf("the backend "+b.Name(), l, jobs))
	} else if lb, ok := b.(backend.LeaseBackend); ok {
		if l, ok := lb.Runs().(SubjectLister); ok {
			owners = append(owners, subjectsOf("the run store of the backend "+b.Name(), l, jobs))
		}
	}
	for i, a := range owners {
		for _, o := range owners[i+1:] {
			for ai, x := range a.subjects {
				for oi, y := range o.subjects {
					if natsutil.SubjectsOverlap(x, y) {
						job := a.job(ai)
						if job == "" {
							job = o.job(oi)
						}
						return fmt.Errorf("%w: %s listens on %s, which overlaps %s of %s%s: give one of them another prefix or bucket",
							ErrSubjectsOverlap, a.name, x, y, o.name, forJob(job))
					}
				}
			}
		}
	}
	return nil
}

// job is the job of the i-th subject, "" when it is for none in particular.
func (o subjectOwner) job(i int) string {
	if i < len(o.jobs) {
		return o.jobs[i]
	}
	return ""
}

// subjectsOf asks l for the subjects it uses whatever the jobs, then for each
// job's, so that an overlap names the job its subject is for.
func subjectsOf(name string, l SubjectLister, jobs []string) subjectOwner {
	o := subjectOwner{name: name}
	seen := map[string]bool{}
	for _, s := range l.Subjects(nil) {
		if !seen[s] {
			seen[s] = true
			o.subjects = append(o.subjects, s)
			o.jobs = append(o.jobs, "")
		}
	}
	for _, job := range jobs {
		for _, s := range l.Subjects([]string{job}) {
			if !seen[s] {
				seen[s] = true
				o.subjects = append(o.subjects, s)
				o.jobs = append(o.jobs, job)
			}
		}
	}
	return o
}

func forJob(job string) string {
	if job == "" {
		return ""
	}
	return fmt.Sprintf(" (for job %q)", job)
}

// registrySubjects is what the registry's bucket listens on.
func registrySubjects(bucket string) string { return "$KV." + bucket + ".>" }
