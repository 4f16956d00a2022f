package backend

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"strings"
	"time"
)

// Errors of the entry store, matched with errors.Is.
var (
	// ErrEntriesNotSupported: an entry call on a backend without EntryStore.
	ErrEntriesNotSupported = errors.New("scheduler: the backend cannot store schedule entries")
	// ErrEntryExists: CreateEntry found an entry with that job and ID.
	ErrEntryExists = errors.New("scheduler: schedule entry exists")
	// ErrEntryNotFound: no entry with that job and ID is stored.
	ErrEntryNotFound = errors.New("scheduler: schedule entry not found")
	// ErrEntryConflict: the entry's stored revision is not the one the change was
	// based on: another writer changed it first.
	ErrEntryConflict = errors.New("scheduler: schedule entry changed by another writer")
	// ErrInvalidEntry: an entry whose ID, schedule or payload cannot be stored.
	ErrInvalidEntry = errors.New("scheduler: invalid schedule entry")
)

// Limits of an entry, in bytes.
const (
	// MaxEntryIDLen is the longest entry ID.
	MaxEntryIDLen = 256
	// MaxEntryPayload is the largest payload an entry carries to its handler.
	MaxEntryPayload = 16 << 10
	// MaxEntryText bounds an entry's cron expression, zone, By and User.
	MaxEntryText = 256
)

// EntrySep joins a job's name and an entry's ID into the name the entry's runs
// are stored under (EntryRunName). Neither a job name nor an entry ID may hold a
// control character, so the joined name is never a job's name nor another
// entry's.
const EntrySep = "\x1f"

// EntryRunName is the name the runs of entry id of job are claimed, leased and
// recorded under in every run call (ClaimInput.Job, RunClaim.Job, History...). A
// backend that implements EntryStore accepts it wherever a job name goes and
// keeps those runs apart from the job's own and from its other entries'.
func EntryRunName(job, id string) string { return job + EntrySep + id }

// SplitEntryRunName is the reverse of EntryRunName; ok is false for a job's own
// name.
func SplitEntryRunName(name string) (job, id string, ok bool) {
	return strings.Cut(name, EntrySep)
}

// JobOf returns the job a run name belongs to: the job itself, or the job of an
// entry's run name.
func JobOf(name string) string {
	job, _, _ := strings.Cut(name, EntrySep)
	return job
}

// ValidateEntryID reports whether id can name an entry: the rules of job names,
// at most MaxEntryIDLen bytes.
func ValidateEntryID(id string) error {
	if problem := nameProblem(id, "ID", MaxEntryIDLen); problem != "" {
		return fmt.Errorf("%w: %s", ErrInvalidEntry, problem)
	}
	return nil
}

// EntrySpec is what a user stores for an entry: its schedule, payload and
// pause. Exactly one of Every, Cron and At is set.
type EntrySpec struct {
	// Every runs the entry on the multiples of Every since the Unix epoch.
	Every time.Duration `json:"every,omitempty"`
	// Cron is a cron expression (5 fields, or 6 with seconds first), in Zone.
	Cron string `json:"cron,omitempty"`
	// Zone is an IANA time zone for Cron; empty is UTC.
	Zone string `json:"zone,omitempty"`
	// At runs the entry once, at that instant.
	At time.Time `json:"at,omitzero"`
	// Start and End, when set, bound the entry's slots: none before Start, none
	// after End.
	Start time.Time `json:"start,omitzero"`
	End   time.Time `json:"end,omitzero"`
	// Payload is handed to every run of the entry; at most MaxEntryPayload bytes.
	Payload []byte `json:"payload,omitempty"`
	// Paused entries keep their place but run no slot.
	Paused bool `json:"paused,omitempty"`
	// Deadline, when set, is how long after each slot the entry's run must
	// have ended ok; a slot that has not is recorded StatusDeadline. Zero: the
	// job's deadline (scheduler.WithDeadline), if any.
	Deadline time.Duration `json:"deadline,omitempty"`
	// DST is Cron's daylight saving time policy in Zone; zero: the defaults.
	// A zone that never changes its clocks (UTC) takes none.
	DST DSTPolicy `json:"dst,omitzero"`
	// Calendars name calendars whose days the entry's slots are excluded on,
	// besides the job's (scheduler.WithCalendars); at most
	// MaxCalendarsPerSchedule.
	Calendars []string `json:"calendars,omitempty"`
}

// Entry is a stored schedule entry of a job.
type Entry struct {
	Job string `json:"job"`
	ID  string `json:"id"`
	EntrySpec
	// Revision is the store's revision of the entry: the base of a change.
	Revision uint64 `json:"-"`
	// Incarnation identifies this entry from its creation to its removal: an
	// entry removed and added again with the same ID is another incarnation.
	// The scheduler draws it at creation; a store keeps it through updates. Its
	// runs carry it (RunClaim.Incarnation).
	Incarnation uint64 `json:"incarnation,omitempty"`
	// Updated is when the entry was last written, and By who asked for the
	// write: the name the caller gave (an operator's --by), the writing
	// instance's when none was given.
	Updated time.Time `json:"updated,omitzero"`
	By      string    `json:"by,omitempty"`
	// User is who the caller's transport authenticated, when it says (the
	// fleet: the NATS user the server named for the request); empty otherwise.
	User string `json:"user,omitempty"`
	// Instance is the instance that wrote the entry.
	Instance string `json:"instance,omitempty"`
}

// RunName is the name the entry's runs are stored under.
func (e Entry) RunName() string { return EntryRunName(e.Job, e.ID) }

// Check validates what a store can judge without parsing the schedule: the
// names, one kind of schedule, the sizes. The scheduler checks the schedule
// itself before storing an entry.
func (e Entry) Check() error {
	if err := ValidateJobName(e.Job); err != nil {
		return fmt.Errorf("%w: %w", ErrInvalidEntry, err)
	}
	if err := ValidateEntryID(e.ID); err != nil {
		return err
	}
	kinds := 0
	for _, set := range []bool{e.Every != 0, e.Cron != "", !e.At.IsZero()} {
		if set {
			kinds++
		}
	}
	switch {
	case kinds != 1:
		return fmt.Errorf("%w: entry %q of job %q: set exactly one of Every, Cron and At", ErrInvalidEntry, e.ID, e.Job)
	case e.Every < 0:
		return fmt.Errorf("%w: entry %q of job %q: interval %v is negative", ErrInvalidEntry, e.ID, e.Job, e.Every)
	case e.Deadline < 0:
		return fmt.Errorf("%w: entry %q of job %q: deadline %v is negative", ErrInvalidEntry, e.ID, e.Job, e.Deadline)
	case e.Zone != "" && e.Cron == "":
		return fmt.Errorf("%w: entry %q of job %q: a zone applies to Cron only", ErrInvalidEntry, e.ID, e.Job)
	case e.DST != (DSTPolicy{}) && e.Cron == "":
		return fmt.Errorf("%w: entry %q of job %q: a DST policy applies to Cron only", ErrInvalidEntry, e.ID, e.Job)
	case len(e.Payload) > MaxEntryPayload:
		return fmt.Errorf("%w: entry %q of job %q: payload of %d bytes, at most %d", ErrInvalidEntry, e.ID, e.Job, len(e.Payload), MaxEntryPayload)
	case len(e.Cron) > MaxEntryText || len(e.Zone) > MaxEntryText || len(e.By) > MaxEntryText || len(e.User) > MaxEntryText:
		return fmt.Errorf("%w: entry %q of job %q: cron, zone, by and user are at most %d bytes each", ErrInvalidEntry, e.ID, e.Job, MaxEntryText)
	case len(e.Instance) > MaxJobNameLen:
		return fmt.Errorf("%w: entry %q of job %q: instance is at most %d bytes", ErrInvalidEntry, e.ID, e.Job, MaxJobNameLen)
	case !e.End.IsZero() && !e.Start.IsZero() && e.End.Before(e.Start):
		return fmt.Errorf("%w: entry %q of job %q: end %v is before start %v", ErrInvalidEntry, e.ID, e.Job, e.End, e.Start)
	}
	if err := e.DST.Check(); err != nil {
		return fmt.Errorf("%w: entry %q of job %q: %w", ErrInvalidEntry, e.ID, e.Job, err)
	}
	if len(e.Calendars) > MaxCalendarsPerSchedule {
		return fmt.Errorf("%w: entry %q of job %q: %d calendars, at most %d", ErrInvalidEntry, e.ID, e.Job, len(e.Calendars), MaxCalendarsPerSchedule)
	}
	for i, c := range e.Calendars {
		if err := ValidateCalendarName(c); err != nil {
			return fmt.Errorf("%w: entry %q of job %q: %w", ErrInvalidEntry, e.ID, e.Job, err)
		}
		if slices.Contains(e.Calendars[:i], c) {
			return fmt.Errorf("%w: entry %q of job %q: calendar %q named twice", ErrInvalidEntry, e.ID, e.Job, c)
		}
	}
	return nil
}

// EntryChange is one event of WatchEntries.
type EntryChange struct {
	// Entry is the entry as stored now; for a removal, its Job and ID (and the
	// revision of the removal when the store has one).
	Entry Entry
	// Removed says the entry was removed.
	Removed bool
	// Synced marks the end of the entries stored when the watch began: every
	// change before it was already stored, every change after it is new. Its
	// Entry is empty.
	Synced bool
	// Resync says the watch may have missed changes (a reconnect, a server
	// restart): the view may be stale until the next Synced. The store reads the
	// entries again at once and delivers what changed meanwhile (entries stored
	// or changed, removals of those gone), then Synced. Its Entry is empty.
	Resync bool
}

// EntryStore is implemented by backends that store schedule entries, shared by
// every instance. A backend that implements it accepts EntryRunName(job, id) as a
// job name in every run call (Claim, History, the RunStore's calls) and stores
// those runs beside the job's own: no stream, table or bucket per entry.
type EntryStore interface {
	// CreateEntry stores e, unless an entry with its job and ID is stored
	// (ErrEntryExists). It returns the entry's revision.
	CreateEntry(ctx context.Context, e Entry) (uint64, error)
	// UpdateEntry replaces the entry with e's job and ID if its stored revision is
	// rev (ErrEntryConflict if not, ErrEntryNotFound if none is stored). It
	// returns the new revision.
	UpdateEntry(ctx context.Context, e Entry, rev uint64) (uint64, error)
	// DeleteEntry removes the entry if its stored revision is rev, or whatever
	// its revision when rev is 0 (ErrEntryConflict, ErrEntryNotFound).
	DeleteEntry(ctx context.Context, job, id string, rev uint64) error
	// GetEntry returns one entry, ErrEntryNotFound if none is stored.
	GetEntry(ctx context.Context, job, id string) (Entry, error)
	// ListEntries returns, ordered by job then ID, at most limit entries of job
	// (every job's when job is "") that come after (afterJob, afterID).
	ListEntries(ctx context.Context, job, afterJob, afterID string, limit int) ([]Entry, error)
	// WatchEntries calls fn with every stored entry, then one change marked
	// Synced, then every change after, until ctx ends (it returns nil) or the
	// watch fails. fn is called from one goroutine at a time and must return
	// quickly. A change may be delivered twice; a later revision of an entry
	// never before an earlier one.
	WatchEntries(ctx context.Context, fn func(EntryChange)) error
}

// ValidateRunName reports whether name can name the runs of a job or of one of
// its entries (EntryRunName): what a backend with EntryStore accepts wherever a
// job name goes.
func ValidateRunName(name string) error {
	job, id, ok := SplitEntryRunName(name)
	if !ok {
		return ValidateJobName(name)
	}
	if err := ValidateJobName(job); err != nil {
		return err
	}
	if err := ValidateEntryID(id); err != nil {
		return fmt.Errorf("%w: %w", ErrInvalidJobName, err)
	}
	return nil
}
