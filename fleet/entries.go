package fleet

import (
	"context"
	"encoding/json"
	"fmt"
	"strings"
	"time"
	"unicode/utf8"

	"github.com/anarchon/anarchon/backend"
	"github.com/anarchon/anarchon/scheduler"
)

// Limits of the entries endpoints.
const (
	// DefaultEntriesLimit is the page of an entries request without a limit.
	DefaultEntriesLimit = 50
	// MaxEntriesLimit caps an entries request's limit (scheduler.MaxEntryViewsPage);
	// a larger one is clamped to it and the reply's limit says so.
	MaxEntriesLimit = scheduler.MaxEntryViewsPage
	// DefaultEntryHistory is how many recent runs an entry request without a
	// history gets; MaxEntryHistory caps it.
	DefaultEntryHistory = 10
	MaxEntryHistory     = MaxHistoryLimit
)

// EntrySpec is a schedule entry's schedule, payload and pause on the wire
// (scheduler.EntrySpec): exactly one of Every, Cron and At.
type EntrySpec struct {
	// Every is a Go duration ("90m"): the entry's slots are its multiples since
	// the Unix epoch.
	Every string `json:"every,omitempty"`
	// Cron is a cron expression in Zone (an IANA zone; empty is UTC).
	Cron string `json:"cron,omitempty"`
	Zone string `json:"zone,omitempty"`
	// At is the one slot of a one-time entry.
	At time.Time `json:"at,omitzero"`
	// Start and End, when set, bound the entry's slots.
	Start time.Time `json:"start,omitzero"`
	End   time.Time `json:"end,omitzero"`
	// Payload is handed to every run of the entry (base64 in JSON), at most
	// backend.MaxEntryPayload bytes.
	Payload []byte `json:"payload,omitempty"`
	// Paused entries keep their place but run no slot.
	Paused bool `json:"paused,omitempty"`
	// Deadline is a Go duration ("30m"): how long after each slot the entry's
	// run must have ended ok; empty: the job's deadline, if any.
	Deadline string `json:"deadline,omitempty"`
	// DSTRepeated ("first", "last", "both") and DSTMissing ("shift", "skip")
	// are Cron's daylight saving time policy in Zone (scheduler.DSTPolicy);
	// empty: the defaults, first and shift.
	DSTRepeated string `json:"dst_repeated,omitempty"`
	DSTMissing  string `json:"dst_missing,omitempty"`
	// Calendars name calendars whose days the entry's slots are excluded on,
	// besides the job's; at most backend.MaxCalendarsPerSchedule.
	Calendars []string `json:"calendars,omitempty"`
}

// entrySpecOf is s as the wire carries it.
func entrySpecOf(s scheduler.EntrySpec) EntrySpec {
	out := EntrySpec{Cron: s.Cron, Zone: s.Zone, At: s.At, Start: s.Start, End: s.End, Payload: s.Payload, Paused: s.Paused,
		DSTRepeated: string(s.DST.Repeated), DSTMissing: string(s.DST.Missing), Calendars: s.Calendars}
	if s.Every != 0 {
		out.Every = s.Every.String()
	}
	if s.Deadline != 0 {
		out.Deadline = s.Deadline.String()
	}
	return out
}

// spec is s as the scheduler takes it; an interval that is no duration is a bad
// request. The scheduler checks the rest.
func (s EntrySpec) spec() (scheduler.EntrySpec, error) {
	out := scheduler.EntrySpec{Cron: s.Cron, Zone: s.Zone, At: s.At, Start: s.Start, End: s.End, Payload: s.Payload, Paused: s.Paused,
		DST:       scheduler.DSTPolicy{Repeated: scheduler.DSTRepeated(s.DSTRepeated), Missing: scheduler.DSTMissing(s.DSTMissing)},
		Calendars: s.Calendars}
	if s.Every != "" {
		d, err := time.ParseDuration(s.Every)
		if err != nil {
			return out, badRequest("every: %v", err)
		}
		if d <= 0 {
			return out, badRequest("every %s is not positive", s.Every)
		}
		out.Every = d
	}
	if s.Deadline != "" {
		d, err := time.ParseDuration(s.Deadline)
		if err != nil {
			return out, badRequest("deadline: %v", err)
		}
		if d <= 0 {
			return out, badRequest("deadline %s is not positive", s.Deadline)
		}
		out.Deadline = d
	}
	if len(s.Payload) > backend.MaxEntryPayload {
		return out, badRequest("a payload of %d bytes: at most %d", len(s.Payload), backend.MaxEntryPayload)
	}
	return out, nil
}

// Entry is a stored schedule entry of a job (scheduler.Entry).
type Entry struct {
	Job string `json:"job"`
	ID  string `json:"id"`
	EntrySpec
	// PayloadSize is the payload's length. Lists (the entries endpoint) leave
	// the payload out and carry its size only; an entry request carries both.
	PayloadSize int `json:"payload_size,omitempty"`
	// Revision is the stored revision: the base of an update or removal.
	Revision uint64 `json:"revision"`
	// Updated is when the entry was last written; By who asked for it (the
	// request's by, or the replica's name when none was given); User the NATS
	// user the server named for the request (a replica served WithRequestInfo,
	// for a request through a service import); Instance the replica that
	// stored it.
	Updated  time.Time `json:"updated,omitzero"`
	By       string    `json:"by,omitempty"`
	User     string    `json:"user,omitempty"`
	Instance string    `json:"instance,omitempty"`
}

func entryOf(e scheduler.Entry, payload bool) Entry {
	out := Entry{Job: e.Job, ID: e.ID, EntrySpec: entrySpecOf(e.EntrySpec), PayloadSize: len(e.Payload),
		Revision: e.Revision, Updated: e.Updated, By: e.By, User: e.User, Instance: e.Instance}
	if !payload {
		out.Payload = nil
	}
	return out
}

// EntryView is an entry with what the replica that answers sees of it
// (scheduler.EntryView): whether it follows it, its next slot there, and its
// newest run, success and failure from the shared history.
type EntryView struct {
	Entry
	// Followed says the replica follows the entry (it loaded it and can run its
	// schedule); Next is its next slot there, absent when paused, ended or not
	// followed.
	Followed bool      `json:"followed"`
	Next     time.Time `json:"next,omitzero"`
	// LastRun, LastSuccess and LastFailure are as JobState's, errors cut at
	// MaxViewError.
	LastRun     *Run `json:"last_run,omitempty"`
	LastSuccess *Run `json:"last_success,omitempty"`
	LastFailure *Run `json:"last_failure,omitempty"`
}

func entryViewOf(v scheduler.EntryView, payload bool) EntryView {
	return EntryView{Entry: entryOf(v.Entry, payload), Followed: v.Followed, Next: v.Next,
		LastRun: runPtr(v.Last.Run), LastSuccess: runPtr(v.Last.Success), LastFailure: runPtr(v.Last.Failure)}
}

// EntriesRequest is the body of <prefix>.ENTRIES.<job>.LIST: a page of the job's
// entries, ordered by ID.
type EntriesRequest struct {
	// V is the request format, RequestVersion; Client sets it when zero.
	V int `json:"v"`
	// After lists the entries after this ID: the Next of the page before.
	After string `json:"after,omitempty"`
	// Limit is the most entries: 0 means DefaultEntriesLimit, more than
	// MaxEntriesLimit is clamped to it, a negative limit is a bad request.
	Limit int `json:"limit,omitempty"`
}

// EntriesReply answers an entries request with one page, in one message: the
// entries, without their payloads, in order of ID. A page holds at most Limit
// entries and at most what a message holds, so it may hold fewer.
type EntriesReply struct {
	Job      string `json:"job"`
	Instance string `json:"instance"`
	// Limit is the limit applied (after the default and the clamp).
	Limit   int         `json:"limit"`
	Entries []EntryView `json:"entries"`
	// Next, when set, is the After of the next page: more entries follow.
	Next string `json:"next,omitempty"`
}

// EntryRequest is the body of <prefix>.ENTRIES.<job>.GET: one entry, with its payload
// and recent runs.
type EntryRequest struct {
	// V is the request format, RequestVersion; Client sets it when zero.
	V  int    `json:"v"`
	ID string `json:"id"`
	// History is how many recent runs, newest first: 0 means
	// DefaultEntryHistory, more than MaxEntryHistory is clamped to it.
	History int `json:"history,omitempty"`
}

// EntryReply answers an entry request: the entry with its payload, and its
// recent runs, in parts (see HistoryReply.Part) when they do not fit in one
// message.
type EntryReply struct {
	Job      string    `json:"job"`
	Instance string    `json:"instance"`
	Entry    EntryView `json:"entry"`
	// History is the number of runs asked for (after the default and the clamp).
	History int   `json:"history"`
	Runs    []Run `json:"runs"`
	Part    int   `json:"part,omitempty"`
	Parts   int   `json:"parts,omitempty"`
}

// AddEntryRequest is the body of <prefix>.ENTRIES.<job>.ADD: store a new entry
// (scheduler.AddEntry).
type AddEntryRequest struct {
	// V is the request format, RequestVersion; Client sets it when zero.
	V  int    `json:"v"`
	ID string `json:"id"`
	EntrySpec
	// By names who asked: stored with the entry (Entry.By), at most
	// backend.MaxEntryText bytes.
	By string `json:"by,omitempty"`
}

// UpdateEntryRequest is the body of <prefix>.ENTRIES.<job>.UPDATE: replace an
// entry's spec if its stored revision is still Rev (scheduler.UpdateEntry).
type UpdateEntryRequest struct {
	// V is the request format, RequestVersion; Client sets it when zero.
	V  int    `json:"v"`
	ID string `json:"id"`
	// Rev is the revision the change is based on (Entry.Revision); required.
	Rev uint64 `json:"rev"`
	EntrySpec
	By string `json:"by,omitempty"`
}

// EntryChangeReply answers an add or an update: the entry as stored.
type EntryChangeReply struct {
	Job      string `json:"job"`
	Instance string `json:"instance"`
	By       string `json:"by,omitempty"`
	Entry    Entry  `json:"entry"`
}

// RemoveEntryRequest is the body of <prefix>.ENTRIES.<job>.REMOVE: remove an entry
// if its stored revision is Rev, whatever its revision when Rev is 0
// (scheduler.RemoveEntry).
type RemoveEntryRequest struct {
	// V is the request format, RequestVersion; Client sets it when zero.
	V   int    `json:"v"`
	ID  string `json:"id"`
	Rev uint64 `json:"rev,omitempty"`
	By  string `json:"by,omitempty"`
}

// RemoveEntryReply answers a removal.
type RemoveEntryReply struct {
	Job      string `json:"job"`
	Instance string `json:"instance"`
	ID       string `json:"id"`
	By       string `json:"by,omitempty"`
}

// checkEntryID refuses an ID no entry can have, before any backend call.
func checkEntryID(id string) error {
	if err := backend.ValidateEntryID(id); err != nil {
		return badRequest("%v", err)
	}
	return nil
}

func (f *Service) entries(job string) func(context.Context, []byte) (any, error) {
	return func(ctx context.Context, data []byte) (any, error) {
		var in EntriesRequest
		if err := decode(data, &in); err != nil {
			return nil, err
		}
		limit, err := clampLimit("limit", in.Limit, DefaultEntriesLimit, MaxEntriesLimit)
		if err != nil {
			return nil, err
		}
		if in.After != "" {
			if err := checkEntryID(in.After); err != nil {
				return nil, err
			}
		}
		views, err := f.s.EntryViews(ctx, job, in.After, limit)
		if err != nil {
			return nil, err
		}
		out := EntriesReply{Job: job, Instance: f.s.Instance(), Limit: limit}
		items := make([]json.RawMessage, len(views))
		for i, v := range views {
			if items[i], err = json.Marshal(entryViewOf(v, false)); err != nil {
				return nil, err
			}
		}
		// The page is one message: cut it where the next entry would not fit.
		// The envelope is measured with a Next as long as any ID can write.
		head := out
		head.Next = strings.Repeat(`\u0000`, backend.MaxEntryIDLen)
		headJSON, err := json.Marshal(head)
		if err != nil {
			return nil, err
		}
		size, n := len(headJSON), 0
		for ; n < len(items); n++ {
			if size+len(items[n])+1 > f.budget() {
				break
			}
			size += len(items[n]) + 1
		}
		if n == 0 && len(items) > 0 {
			return nil, fmt.Errorf("fleet: entry %q of job %q is %d bytes, more than a message holds", views[0].ID, job, len(items[0]))
		}
		switch {
		case n < len(items):
			out.Next = views[n-1].ID
		case len(views) == limit:
			// A full page: another follows if an entry is stored after it.
			more, err := f.s.ListEntries(ctx, job, job, views[n-1].ID, 1)
			if err != nil {
				return nil, err
			}
			if len(more) > 0 {
				out.Next = views[n-1].ID
			}
		}
		return struct {
			EntriesReply
			Entries []json.RawMessage `json:"entries"`
		}{out, append([]json.RawMessage{}, items[:n]...)}, nil
	}
}

func (f *Service) entry(job string) func(context.Context, []byte) (any, error) {
	return func(ctx context.Context, data []byte) (any, error) {
		var in EntryRequest
		if err := decode(data, &in); err != nil {
			return nil, err
		}
		if err := checkEntryID(in.ID); err != nil {
			return nil, err
		}
		limit, err := clampLimit("history", in.History, DefaultEntryHistory, MaxEntryHistory)
		if err != nil {
			return nil, err
		}
		view, err := f.s.EntryView(ctx, job, in.ID)
		if err != nil {
			return nil, err
		}
		recs, err := f.s.EntryHistory(ctx, job, in.ID, limit)
		if err != nil {
			return nil, err
		}
		runs := make([]Run, 0, len(recs))
		for _, r := range recs {
			runs = append(runs, runOf(r, scheduler.MaxErrorText))
		}
		items, err := marshalEach(runs)
		if err != nil {
			return nil, err
		}
		out := EntryReply{Job: job, Instance: f.s.Instance(), Entry: entryViewOf(view, true), History: limit}
		return parted{items: items, field: "runs", envelope: func(part, parts int) any {
			out := out
			out.Part, out.Parts = part, parts
			return struct {
				EntryReply
				Runs []Run `json:"runs,omitempty"`
			}{EntryReply: out}
		}}, nil
	}
}

func (f *Service) addEntry(job string) func(context.Context, []byte) (any, error) {
	return func(ctx context.Context, data []byte) (any, error) {
		var in AddEntryRequest
		if err := decode(data, &in); err != nil {
			return nil, err
		}
		spec, err := checkEntryChange(in.ID, in.By, in.EntrySpec)
		if err != nil {
			return nil, err
		}
		e, err := f.s.AddEntry(ctx, job, in.ID, spec, changedBy(ctx, in.By)...)
		if err != nil {
			return nil, err
		}
		f.log.Info("fleet entry added", "job", job, "entry", in.ID, "by", in.By, "user", userOf(ctx), "rev", e.Revision)
		return EntryChangeReply{Job: job, Instance: f.s.Instance(), By: in.By, Entry: entryOf(e, false)}, nil
	}
}

func (f *Service) updateEntry(job string) func(context.Context, []byte) (any, error) {
	return func(ctx context.Context, data []byte) (any, error) {
		var in UpdateEntryRequest
		if err := decode(data, &in); err != nil {
			return nil, err
		}
		spec, err := checkEntryChange(in.ID, in.By, in.EntrySpec)
		if err != nil {
			return nil, err
		}
		if in.Rev == 0 {
			return nil, badRequest("an update needs rev, the revision it is based on (the entry's revision as read)")
		}
		e, err := f.s.UpdateEntry(ctx, job, in.ID, spec, in.Rev, changedBy(ctx, in.By)...)
		if err != nil {
			return nil, err
		}
		f.log.Info("fleet entry updated", "job", job, "entry", in.ID, "by", in.By, "user", userOf(ctx), "from_rev", in.Rev, "rev", e.Revision)
		return EntryChangeReply{Job: job, Instance: f.s.Instance(), By: in.By, Entry: entryOf(e, false)}, nil
	}
}

func (f *Service) removeEntry(job string) func(context.Context, []byte) (any, error) {
	return func(ctx context.Context, data []byte) (any, error) {
		var in RemoveEntryRequest
		if err := decode(data, &in); err != nil {
			return nil, err
		}
		if err := checkEntryID(in.ID); err != nil {
			return nil, err
		}
		if err := checkEntryBy(in.By); err != nil {
			return nil, err
		}
		if err := f.s.RemoveEntry(ctx, job, in.ID, in.Rev, changedBy(ctx, in.By)...); err != nil {
			return nil, err
		}
		f.log.Info("fleet entry removed", "job", job, "entry", in.ID, "by", in.By, "user", userOf(ctx), "rev", in.Rev)
		return RemoveEntryReply{Job: job, Instance: f.s.Instance(), ID: in.ID, By: in.By}, nil
	}
}

// checkEntryChange refuses, before anything is stored, an add or update whose
// ID, who or spec cannot be; the scheduler then checks the schedule.
func checkEntryChange(id, by string, s EntrySpec) (scheduler.EntrySpec, error) {
	if err := checkEntryID(id); err != nil {
		return scheduler.EntrySpec{}, err
	}
	if err := checkEntryBy(by); err != nil {
		return scheduler.EntrySpec{}, err
	}
	return s.spec()
}

// checkEntryBy refuses a by an entry cannot store.
func checkEntryBy(by string) error {
	if !utf8.ValidString(by) || len(by) > backend.MaxEntryText {
		return badRequest("by must be valid UTF-8 of at most %d bytes for an entry", backend.MaxEntryText)
	}
	return nil
}

// changedBy are the options that record who changed an entry: the request's
// by, and the NATS user the server named (WithRequestInfo).
func changedBy(ctx context.Context, by string) []scheduler.EntryChangeOption {
	var opts []scheduler.EntryChangeOption
	if by != "" {
		opts = append(opts, scheduler.ChangedBy(by))
	}
	if user := userOf(ctx); user != "" {
		opts = append(opts, scheduler.ChangedByUser(user))
	}
	return opts
}

// Entries returns a page of job's schedule entries, ordered by ID, from one
// replica that declares the job: pass the reply's Next as in.After for the
// next page. An entry of a job no replica declares is stored but never run, and
// no replica lists it: the request gets a *NoReplicaError.
func (c *Client) Entries(ctx context.Context, job string, in EntriesRequest) (EntriesReply, error) {
	var out EntriesReply
	in.V = versioned(in.V)
	err := c.request(ctx, endpoint{c.subj.entry(opList, job), job}, in, &out)
	if out.Entries == nil {
		out.Entries = []EntryView{}
	}
	return out, err
}

// Entry returns one schedule entry of job with its payload and its recent runs,
// newest first (in.History), read from every part of the reply.
func (c *Client) Entry(ctx context.Context, job string, in EntryRequest) (EntryReply, error) {
	in.V = versioned(in.V)
	out, err := gatherParts(ctx, c, endpoint{c.subj.entry(opGet, job), job}, in,
		func(r *EntryReply) (int, int, *[]Run) { return r.Part, r.Parts, &r.Runs })
	out.Part = 0
	return out, err
}

// AddEntry stores a new schedule entry of job, through one replica that
// declares it. An ID already stored is an error matching ErrEntryExists; a spec
// the replica refuses (a bad schedule, a payload over backend.MaxEntryPayload)
// matches ErrBadRequest, and nothing is stored.
func (c *Client) AddEntry(ctx context.Context, job string, in AddEntryRequest) (EntryChangeReply, error) {
	var out EntryChangeReply
	in.V = versioned(in.V)
	return out, c.request(ctx, endpoint{c.subj.entry(opAdd, job), job}, in, &out)
}

// UpdateEntry replaces entry in.ID of job with in's spec if its stored revision
// is still in.Rev: when another writer changed it first, nothing is stored and
// the error matches ErrEntryConflict (and scheduler.ErrEntryConflict).
func (c *Client) UpdateEntry(ctx context.Context, job string, in UpdateEntryRequest) (EntryChangeReply, error) {
	var out EntryChangeReply
	in.V = versioned(in.V)
	return out, c.request(ctx, endpoint{c.subj.entry(opUpdate, job), job}, in, &out)
}

// RemoveEntry removes entry in.ID of job if its stored revision is in.Rev
// (whatever it is when in.Rev is 0); ErrEntryConflict and ErrEntryNotFound as
// UpdateEntry.
func (c *Client) RemoveEntry(ctx context.Context, job string, in RemoveEntryRequest) (RemoveEntryReply, error) {
	var out RemoveEntryReply
	in.V = versioned(in.V)
	return out, c.request(ctx, endpoint{c.subj.entry(opRemove, job), job}, in, &out)
}
