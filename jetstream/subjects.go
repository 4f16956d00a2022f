package jetstream

import (
	natsjs "github.com/nats-io/nats.go/jetstream"

	"github.com/anarchon/anarchon/backend"
	"github.com/anarchon/anarchon/internal/option"
)

// subjectLister is what LeasedBackend.Subjects asks its run store for, when the
// store says (kvlease.Store does).
type subjectLister interface{ Subjects(jobs []string) []string }

// Subjects returns the subjects the streams of these jobs listen on, one pattern
// per job: <subject prefix>.<job token>.>, the only subjects the backend publishes
// to besides the JetStream API (the job's entries' records included). A service that shares the backend's connection
// (package fleet) checks that none of its own subjects overlaps them.
func (b *Backend) Subjects(jobs []string) []string {
	out := make([]string, 0, len(jobs))
	for _, job := range jobs {
		out = append(out, b.cfg.namesFor(backend.JobOf(job)).all)
	}
	return out
}

// Subjects returns Backend.Subjects and the run store's subjects, when the store
// lists them (kvlease.Store: its bucket).
func (b *LeasedBackend) Subjects(jobs []string) []string {
	out := b.Backend.Subjects(jobs)
	if l, ok := b.runs.(subjectLister); ok {
		out = append(out, l.Subjects(jobs)...)
	}
	return out
}

// Permissions returns the subjects a backend made with opts publishes to (NATS
// publish permissions), on an account with the default JetStream API prefix. They
// are the account information, the job streams' API and the job subjects it writes.
// The API is for any stream name: a permission cannot name the streams that begin
// with the stream prefix. The job subjects are claims, results, manual runs and
// lease records, of jobs and of their entries. Its only subscriptions are inboxes.
// A leased backend needs its run store's too (kvlease.Permissions).
func Permissions(opts ...Option) ([]string, error) {
	cfg := defaultConfig()
	if err := option.Apply(&cfg, opts); err != nil {
		return nil, err
	}
	api := natsjs.DefaultAPIPrefix
	sp := cfg.subjectPrefix + ".*."
	ep := sp + kindEntry + ".*." // the job's entries' subjects
	return []string{
		api + "INFO",
		api + "STREAM.INFO.*",
		api + "STREAM.CREATE.*",
		api + "STREAM.UPDATE.*",
		api + "STREAM.MSG.GET.*",
		api + "DIRECT.GET.*",
		sp + kindClaim + ".*",
		sp + kindResult,
		sp + kindManual,
		sp + kindLease,
		ep + kindClaim + ".*",
		ep + kindResult,
		ep + kindManual,
		ep + kindLease,
	}, nil
}
