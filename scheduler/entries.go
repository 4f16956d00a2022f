package scheduler

import (
	"bytes"
	"context"
	"crypto/rand"
	"encoding/binary"
	"errors"
	"fmt"
	"log/slog"
	"math"
	"slices"
	"time"
	"unicode/utf8"

	"github.com/anarchon/anarchon/backend"
)

// Entry is a schedule entry of a job: a schedule stored in the backend and
// shared by every instance, run with the job's handler and policies. See
// AddEntry.
type Entry = backend.Entry

// EntrySpec is what an entry is made of: its schedule, payload and pause.
type EntrySpec = backend.EntrySpec

// Errors of schedule entries, the backend's values.
var (
	ErrEntriesNotSupported = backend.ErrEntriesNotSupported
	ErrEntryExists         = backend.ErrEntryExists
	ErrEntryNotFound       = backend.ErrEntryNotFound
	ErrEntryConflict       = backend.ErrEntryConflict
	ErrInvalidEntry        = backend.ErrInvalidEntry
)

// Declare registers a job with no schedule of its own: its slots are those of
// its schedule entries (AddEntry), and RunNow runs it. Like Every, it is called
// before Start or on a started scheduler. Its max lateness defaults to
// DefaultMaxLate, each entry's to the gap between that entry's slots when
// shorter.
func (s *Scheduler) Declare(name string, h Handler, opts ...JobOption) error {
	if err := s.registerErr(name); err != nil {
		return err
	}
	return s.add(name, noSchedule{}, 0, h, opts)
}

// noSchedule has no slot: the schedule of a job declared for its entries.
type noSchedule struct{}

func (noSchedule) Next(time.Time) time.Time { return time.Time{} }
func (noSchedule) String() string           { return "entries only" }

// entryStore returns the backend's entry store, or an error saying there is none.
func (s *Scheduler) entryStore() (backend.EntryStore, error) {
	es, ok := s.backend.(backend.EntryStore)
	if !ok {
		return nil, fmt.Errorf("%w: the %s backend", ErrEntriesNotSupported, s.backend.Name())
	}
	return es, nil
}

// AddEntry stores a schedule entry of job, declared on this instance. Within a
// second, every instance that declares the job runs its slots. Each slot runs once
// across the fleet, with the job's leases, overlap per entry, catch-up, retries and
// pauses. Its handler's Run carries the entry's ID and payload. The entry is
// checked here as a job is at registration (its schedule, bounds, the job's jitter
// and lateness against the dedupe window) and refused with a clear error. Its slots
// begin after it is stored: a slot before that is never run for it. An entry with
// the same ID is ErrEntryExists.
func (s *Scheduler) AddEntry(ctx context.Context, job, id string, spec EntrySpec, opts ...EntryChangeOption) (Entry, error) {
	e, es, err := s.checkEntry(job, id, spec, opts)
	if err != nil {
		return Entry{}, err
	}
	if err := s.init(ctx); err != nil {
		return Entry{}, err
	}
	cctx, cancel := s.callCtx(ctx)
	defer cancel()
	e.Incarnation = newIncarnation()
	rev, err := es.CreateEntry(cctx, e)
	if errors.Is(err, ErrEntryExists) {
		// A store client that resent a create whose answer was lost finds its
		// own write: the entry as stored is this call's, written and stamped here.
		if got, gerr := es.GetEntry(cctx, job, id); gerr == nil && sameWrite(got, e) {
			return got, nil
		}
	}
	if err != nil {
		return Entry{}, fmt.Errorf("scheduler: add entry %q of job %q: %w", id, job, err)
	}
	e.Revision = rev
	return e, nil
}

// UpdateEntry replaces entry id of job with spec, if its stored revision is still
// rev (the Revision of the Entry it was read as). When another writer changed it
// first, nothing is stored and the error matches ErrEntryConflict. A run of the
// entry in progress finishes; the new schedule's slots begin after the change.
func (s *Scheduler) UpdateEntry(ctx context.Context, job, id string, spec EntrySpec, rev uint64, opts ...EntryChangeOption) (Entry, error) {
	e, es, err := s.checkEntry(job, id, spec, opts)
	if err != nil {
		return Entry{}, err
	}
	if err := s.init(ctx); err != nil {
		return Entry{}, err
	}
	cctx, cancel := s.callCtx(ctx)
	defer cancel()
	// The change keeps the entry's incarnation: read at the revision it is
	// based on (a removal and a new entry since would change the revision).
	cur, err := es.GetEntry(cctx, job, id)
	switch {
	case err != nil:
		return Entry{}, fmt.Errorf("scheduler: update entry %q of job %q: %w", id, job, err)
	case rev != 0 && cur.Revision != rev:
		return Entry{}, fmt.Errorf("scheduler: update entry %q of job %q: %w: it is at revision %d, not %d", id, job, ErrEntryConflict, cur.Revision, rev)
	}
	e.Incarnation = cur.Incarnation
	rev, err = es.UpdateEntry(cctx, e, rev)
	if err != nil {
		return Entry{}, fmt.Errorf("scheduler: update entry %q of job %q: %w", id, job, err)
	}
	e.Revision = rev
	return e, nil
}

// RemoveEntry removes entry id of job if its stored revision is rev (whatever it
// is when rev is 0). A run of it in progress finishes; no slot of it starts
// after every instance has seen the removal. Its history stays until the job's
// retention drops it. Who asked (ChangedBy, ChangedByUser) is logged, as nothing
// of the entry stays to store it with.
func (s *Scheduler) RemoveEntry(ctx context.Context, job, id string, rev uint64, opts ...EntryChangeOption) error {
	es, err := s.entryStore()
	if err != nil {
		return err
	}
	c, err := entryChangeOf(opts)
	if err != nil {
		return fmt.Errorf("scheduler: remove entry %q of job %q: %w", id, job, err)
	}
	if err := s.init(ctx); err != nil {
		return err
	}
	cctx, cancel := s.callCtx(ctx)
	defer cancel()
	if err := es.DeleteEntry(cctx, job, id, rev); err != nil {
		return fmt.Errorf("scheduler: remove entry %q of job %q: %w", id, job, err)
	}
	s.log.Info("schedule entry removed", "job", job, "entry", id, "rev", rev, "by", c.by, "user", c.user)
	return nil
}

// EntryChangeOption changes one AddEntry, UpdateEntry or RemoveEntry call. An
// invalid value is an error wrapping ErrInvalidOption, and nothing is stored.
type EntryChangeOption func(*entryChange) error

type entryChange struct{ by, user string }

// ChangedBy records who asks for the change with the entry (Entry.By): an
// operator, a service, a CLI's --by. Defaults to the instance's name. At most
// backend.MaxEntryText bytes of UTF-8.
func ChangedBy(who string) EntryChangeOption {
	return func(c *entryChange) error {
		if !utf8.ValidString(who) || len(who) > backend.MaxEntryText {
			return optErr("ChangedBy must be valid UTF-8 of at most %d bytes", backend.MaxEntryText)
		}
		c.by = who
		return nil
	}
}

// ChangedByUser records who the caller's transport authenticated with the entry
// (Entry.User): for the fleet, the NATS user the server named. At most
// backend.MaxEntryText bytes of UTF-8.
func ChangedByUser(user string) EntryChangeOption {
	return func(c *entryChange) error {
		if !utf8.ValidString(user) || len(user) > backend.MaxEntryText {
			return optErr("ChangedByUser must be valid UTF-8 of at most %d bytes", backend.MaxEntryText)
		}
		c.user = user
		return nil
	}
}

func entryChangeOf(opts []EntryChangeOption) (entryChange, error) {
	var c entryChange
	for _, o := range opts {
		if o == nil {
			continue
		}
		if err := o(&c); err != nil {
			return c, err
		}
	}
	return c, nil
}

// GetEntry reads entry id of job from the backend.
func (s *Scheduler) GetEntry(ctx context.Context, job, id string) (Entry, error) {
	es, err := s.entryStore()
	if err != nil {
		return Entry{}, err
	}
	if err := s.init(ctx); err != nil {
		return Entry{}, err
	}
	cctx, cancel := s.callCtx(ctx)
	defer cancel()
	e, err := es.GetEntry(cctx, job, id)
	if err != nil {
		return Entry{}, fmt.Errorf("scheduler: entry %q of job %q: %w", id, job, err)
	}
	return e, nil
}

// MaxEntriesPage bounds one page of ListEntries.
const MaxEntriesPage = 1000

// ListEntries reads from the backend at most limit (up to MaxEntriesPage)
// entries of job ordered by ID, those after afterID: pass the last ID of a page
// to read the next one. With job "", it lists every job's entries, those of jobs
// nobody declares included, after (afterJob, afterID) ordered by job then ID.
func (s *Scheduler) ListEntries(ctx context.Context, job, afterJob, afterID string, limit int) ([]Entry, error) {
	es, err := s.entryStore()
	if err != nil {
		return nil, err
	}
	if limit <= 0 || limit > MaxEntriesPage {
		return nil, fmt.Errorf("%w: limit %d is not between 1 and %d", ErrInvalidOption, limit, MaxEntriesPage)
	}
	if job != "" {
		afterJob = job
	}
	if err := s.init(ctx); err != nil {
		return nil, err
	}
	cctx, cancel := s.callCtx(ctx)
	defer cancel()
	out, err := es.ListEntries(cctx, job, afterJob, afterID, limit)
	if err != nil {
		return nil, fmt.Errorf("scheduler: list entries of job %q: %w", job, err)
	}
	return out, nil
}

// EntryHistory returns the recent runs of entry id of job from all instances,
// newest first, each with Job and Entry set.
func (s *Scheduler) EntryHistory(ctx context.Context, job, id string, limit int) ([]RunRecord, error) {
	if err := backend.ValidateEntryID(id); err != nil {
		return nil, err
	}
	recs, err := s.history(ctx, backend.EntryRunName(job, id), limit)
	if err != nil {
		return nil, fmt.Errorf("scheduler: history of entry %q of job %q: %w", id, job, err)
	}
	for i := range recs {
		recs[i].Job, recs[i].Entry = job, id
	}
	return recs, nil
}

// checkEntry builds the entry to store and checks it against the job declared
// here, as registration checks a job.
func (s *Scheduler) checkEntry(job, id string, spec EntrySpec, opts []EntryChangeOption) (Entry, backend.EntryStore, error) {
	es, err := s.entryStore()
	if err != nil {
		return Entry{}, nil, err
	}
	c, err := entryChangeOf(opts)
	if err != nil {
		return Entry{}, nil, fmt.Errorf("entry %q of job %q: %w", id, job, err)
	}
	if c.by == "" {
		c.by = backend.TruncateText(s.instance, backend.MaxEntryText)
	}
	p, err := s.declared(job)
	if err != nil {
		return Entry{}, nil, fmt.Errorf("%w (an entry is added on an instance that declares its job)", err)
	}
	e := Entry{Job: job, ID: id, EntrySpec: spec, Updated: s.clock.Now().UTC().Truncate(time.Millisecond),
		By: c.by, User: c.user, Instance: s.instance}
	if err := e.Check(); err != nil {
		return Entry{}, nil, err
	}
	if _, ok := s.backend.(backend.CalendarStore); len(e.Calendars) > 0 && !ok {
		return Entry{}, nil, fmt.Errorf("%w: entry %q of job %q: calendars need a backend that stores them (backend.CalendarStore); %q has none", ErrInvalidEntry, id, job, s.backend.Name())
	}
	j, err := s.entryJob(p, e)
	if err != nil {
		return Entry{}, nil, err
	}
	if j.deadlineDropped != nil {
		return Entry{}, nil, j.deadlineDropped
	}
	if j.sched.Next(e.Updated).IsZero() && !spec.Paused {
		return Entry{}, nil, fmt.Errorf("%w: entry %q of job %q: %s has no slot after now (its instant or end is past)", ErrInvalidEntry, id, job, j.sched)
	}
	return e, es, nil
}

// entryRef is what an entry's run view carries beyond its job's.
type entryRef struct {
	job, id string
	payload []byte
}

// entryJob is the run view of entry e of job p: p's handler and policies on e's
// schedule, claimed and recorded under e's run name. Its slots begin after e was
// stored, so a change never reruns a slot of the entry's earlier schedule.
func (s *Scheduler) entryJob(p *job, e Entry) (*job, error) {
	bad := func(err error) error {
		return fmt.Errorf("%w: entry %q of job %q: %w", ErrInvalidEntry, e.ID, e.Job, err)
	}
	// An entry read from the store was written by any version or hand: what
	// Check refuses (two schedules, a size past the limits) is not run on a
	// part of it.
	if err := e.Check(); err != nil {
		return nil, err
	}
	var (
		sched    Schedule
		interval time.Duration
		err      error
	)
	switch {
	case e.Every != 0:
		sched, err = NewIntervalSchedule(e.Every)
		interval = e.Every
	case e.Cron != "":
		loc := time.UTC
		if e.Zone != "" {
			if loc, err = time.LoadLocation(e.Zone); err != nil {
				return nil, bad(fmt.Errorf("zone %q: %w", e.Zone, err))
			}
		}
		sched, err = ParseCronDST(e.Cron, loc, e.DST)
	default:
		at := time.UnixMilli(e.At.UnixMilli()).UTC()
		if e.At.Before(firstMillis) || e.At.After(lastMillis) {
			err = fmt.Errorf("%w: the instant %v is outside the range of slots", ErrInvalidSchedule, e.At)
		}
		sched = OnceSchedule{At: at}
	}
	if err != nil {
		return nil, bad(err)
	}
	cfg := p.cfg
	if e.Deadline > 0 {
		cfg.deadline = e.Deadline
	}
	if len(e.Calendars) > 0 {
		cfg.calendars = slices.Clone(p.cfg.calendars)
		for _, c := range e.Calendars {
			if !slices.Contains(cfg.calendars, c) {
				cfg.calendars = append(cfg.calendars, c)
			}
		}
	}
	if !cfg.maxLateSet {
		cfg.maxLate = min(p.cfg.maxLate, shortestGap(sched, interval))
	}
	if !e.Start.IsZero() && e.Start.After(cfg.start) {
		cfg.start = ceilMillis(e.Start)
	}
	if !e.Updated.IsZero() && !e.Updated.Before(cfg.start) {
		cfg.start = ceilMillis(e.Updated.Add(time.Millisecond))
	}
	if !e.End.IsZero() && (cfg.end.IsZero() || e.End.Before(cfg.end)) {
		cfg.end = ceilMillis(e.End)
	}
	name := backend.EntryRunName(e.Job, e.ID)
	if sched, err = cfg.spread(name, sched, interval); err != nil {
		return nil, bad(err)
	}
	if bounded, err := cfg.bound(sched); err == nil {
		sched = bounded
	} else {
		sched = noSchedule{} // bounds that hold no slot (an end already past): it does nothing
	}
	if e.Deadline > MaxDuration {
		return nil, bad(fmt.Errorf("%w: deadline %v is above MaxDuration (%v)", ErrInvalidOption, e.Deadline, MaxDuration))
	}
	var deadlineDropped error
	if err := cfg.checkDeadline(sched, interval, s.maxSkew); err != nil {
		if e.Deadline > 0 {
			return nil, bad(err)
		}
		// The job's deadline does not fit this entry's schedule: the entry
		// runs, unjudged, rather than not at all; AddEntry refuses it.
		deadlineDropped, cfg.deadline = bad(err), 0
	}
	if cfg.jitter > 0 && cfg.jitter >= cfg.maxLate {
		return nil, bad(fmt.Errorf("%w: the job's jitter %v must be below the entry's max lateness %v (the gap between its slots)", ErrInvalidOption, cfg.jitter, cfg.maxLate))
	}
	if !isOnce(sched) {
		if err := cfg.retry.check(shortestGap(sched, interval)); err != nil {
			return nil, bad(err)
		}
	}
	limits := p.limits
	limits.Job, limits.Schedule, limits.Interval, limits.MaxLate = name, sched.String(), interval, cfg.maxLate
	limits.DST = nil
	if e.Cron != "" {
		limits.DST = new(e.DST.Normal())
	}
	j := &job{name: name, sched: sched, handler: p.handler, cfg: cfg, limits: limits, interval: interval,
		entry: &entryRef{job: e.Job, id: e.ID, payload: e.Payload}}
	j.deadlineDropped = deadlineDropped
	j.judgedSince.Store(math.MaxInt64) // an entry's history is not read at Start
	// The entry's run limit is its own (limitHit ends its slots): the job's
	// own slots reaching the job's limit do not end it.
	j.ended, j.end = context.Background(), func() {}
	j.gone, j.remove = p.gone, p.remove
	return j, nil
}

func ceilMillis(t time.Time) time.Time {
	ms := time.UnixMilli(t.UnixMilli()).UTC()
	if ms.Before(t) {
		ms = ms.Add(time.Millisecond)
	}
	return ms
}

// pauseFailingEntry pauses the entry j runs (its stored Paused), as
// WithPauseAfterFailures pauses a job: the job's other entries go on.
func (s *Scheduler) pauseFailingEntry(ctx context.Context, j *job, streak int, reason string) {
	es, err := s.entryStore()
	if err != nil {
		return
	}
	for range 3 { // another writer's change in between: read it again
		e, err := es.GetEntry(ctx, j.entry.job, j.entry.id)
		if err != nil || e.Paused {
			return
		}
		e.Paused, e.Updated = true, s.clock.Now().UTC().Truncate(time.Millisecond)
		e.By, e.User, e.Instance = backend.TruncateText(s.instance, backend.MaxEntryText), "", s.instance
		if _, err = es.UpdateEntry(ctx, e, e.Revision); err == nil {
			s.log.Warn("schedule entry paused after failed slots", "job", e.Job, "entry", e.ID, "failed_slots", streak, "reason", reason)
			return
		}
		if !errors.Is(err, ErrEntryConflict) {
			s.log.Warn("cannot pause a failing schedule entry", "job", e.Job, "entry", e.ID, "err", err)
			return
		}
	}
}

// EntryView is a stored entry with what an operator asks of it: its next slot
// as this instance follows it and its newest run, success and failure from the
// shared history.
type EntryView struct {
	Entry
	// Followed says this instance follows the entry: it declares the entry's
	// job and can run its schedule. An entry of a job no instance declares is
	// orphaned: listed, never run.
	Followed bool
	// Next is the entry's next slot here; zero when there is none (paused,
	// ended, or not followed).
	Next time.Time
	// Last holds its newest run, success and failure, each with Job and Entry
	// set.
	Last LastRuns
}

// MaxEntryViewsPage bounds one page of EntryViews: each entry's last runs are
// read with it.
const MaxEntryViewsPage = 100

// EntryViews is ListEntries for operators: a page of at most limit (up to
// MaxEntryViewsPage) entries of job after afterID, each with its next slot and
// last runs.
func (s *Scheduler) EntryViews(ctx context.Context, job, afterID string, limit int) ([]EntryView, error) {
	if job == "" {
		return nil, fmt.Errorf("%w: entry views are per job", ErrInvalidOption)
	}
	if limit <= 0 || limit > MaxEntryViewsPage {
		return nil, fmt.Errorf("%w: limit %d is not between 1 and %d", ErrInvalidOption, limit, MaxEntryViewsPage)
	}
	entries, err := s.ListEntries(ctx, job, job, afterID, limit)
	if err != nil {
		return nil, err
	}
	return s.entryViews(ctx, entries)
}

// EntryView reads entry id of job from the backend with its next slot here and
// its last runs, as EntryViews shows each entry of a page.
func (s *Scheduler) EntryView(ctx context.Context, job, id string) (EntryView, error) {
	e, err := s.GetEntry(ctx, job, id)
	if err != nil {
		return EntryView{}, err
	}
	views, err := s.entryViews(ctx, []Entry{e})
	if err != nil {
		return EntryView{}, err
	}
	return views[0], nil
}

// entryViews adds to entries their next slot here and their last runs.
func (s *Scheduler) entryViews(ctx context.Context, entries []Entry) ([]EntryView, error) {
	names := make([]string, len(entries))
	out := make([]EntryView, len(entries))
	s.entries.mu.Lock()
	for i, e := range entries {
		names[i] = e.RunName()
		out[i].Entry = e
		if st, ok := s.entries.byKey[entryKey{e.Job, e.ID}]; ok {
			out[i].Followed, out[i].Next = true, st.next
		}
	}
	s.entries.mu.Unlock()
	last, err := s.lastRunsOf(ctx, names)
	if err != nil {
		return nil, err
	}
	for i, e := range entries {
		l := last[names[i]]
		for _, r := range []*RunRecord{l.Run, l.Success, l.Failure} {
			if r != nil {
				r.Job, r.Entry = e.Job, e.ID
			}
		}
		l.Job = e.Job
		out[i].Last = l
		s.seen.noteLast(l)
	}
	return out, nil
}

// logAttr names the job in a log line, and the entry on a run of an entry.
func (j *job) logAttr() slog.Attr {
	if j.entry != nil {
		return slog.Group("", slog.String("job", j.entry.job), slog.String("entry", j.entry.id))
	}
	return slog.String("job", j.name)
}

// quoted names the job in an error: "report", or entry "acme" of "tenants".
func (j *job) quoted() string {
	if j.entry != nil {
		return fmt.Sprintf("entry %q of %q", j.entry.id, j.entry.job)
	}
	return fmt.Sprintf("%q", j.name)
}

// sameWrite reports whether stored is the write of e: the same writer, instant
// and content.
func sameWrite(stored, e Entry) bool {
	return stored.By == e.By && stored.User == e.User && stored.Instance == e.Instance && stored.Updated.Equal(e.Updated) && stored.Every == e.Every && stored.Cron == e.Cron &&
		stored.Zone == e.Zone && stored.At.Equal(e.At) && stored.Start.Equal(e.Start) && stored.End.Equal(e.End) &&
		stored.Paused == e.Paused && bytes.Equal(stored.Payload, e.Payload) && stored.Incarnation == e.Incarnation &&
		stored.DST == e.DST && stored.Deadline == e.Deadline && slices.Equal(stored.Calendars, e.Calendars)
}

// newIncarnation draws an entry's incarnation: random, never zero.
func newIncarnation() uint64 {
	var b [8]byte
	for {
		_, _ = rand.Read(b[:])
		if n := binary.BigEndian.Uint64(b[:]); n != 0 {
			return n
		}
	}
}
