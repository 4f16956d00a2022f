package web

import (
	"context"

	"github.com/anarchon/anarchon/fleet"
)

// Source is what the pages read and what their actions ask: the methods of
// *fleet.Client the handler calls, and nothing more. Any other implementation
// (a cache in front of a client, a fleet in another form) serves the same pages;
// its errors should match fleet's sentinels (fleet.ErrUnknownJob,
// fleet.ErrNoReplica, fleet.ErrBadRequest, fleet.ErrEntryNotFound…) for the pages to answer with the right
// status.
type Source interface {
	// Jobs is every replica's answer summarised by job: the jobs and fleet pages.
	Jobs(ctx context.Context) (*fleet.Fleet, error)
	// History is a job's recent runs, newest first: the job page.
	History(ctx context.Context, job string, limit int) (fleet.HistoryReply, error)
	// Active is a job's unfinished runs: the job page's leases.
	Active(ctx context.Context, job string) (fleet.ActiveReply, error)
	// Trigger, Pause and Resume are the actions.
	Trigger(ctx context.Context, job string, in fleet.TriggerRequest) (fleet.TriggerReply, error)
	Pause(ctx context.Context, job string, in fleet.PauseRequest) (fleet.PauseReply, error)
	Resume(ctx context.Context, job string, in fleet.ResumeRequest) (fleet.ResumeReply, error)
	// Entries is a page of a job's schedule entries, ordered by ID, after
	// in.After: the job page's entries. A backend without entries answers
	// fleet.ErrNotSupported, and the page shows none.
	Entries(ctx context.Context, job string, in fleet.EntriesRequest) (fleet.EntriesReply, error)
	// Entry is one schedule entry with its payload and recent runs: the entry
	// page. An unknown entry is fleet.ErrEntryNotFound.
	Entry(ctx context.Context, job string, in fleet.EntryRequest) (fleet.EntryReply, error)
	// UpdateEntry is the entry page's pause and resume (the entry as read,
	// Paused changed) and its change form, stored on the revision the page
	// showed.
	UpdateEntry(ctx context.Context, job string, in fleet.UpdateEntryRequest) (fleet.EntryChangeReply, error)
	// AddEntry and RemoveEntry are the job page's and the entry page's forms
	// that add an entry and remove one (on the revision the page showed).
	AddEntry(ctx context.Context, job string, in fleet.AddEntryRequest) (fleet.EntryChangeReply, error)
	RemoveEntry(ctx context.Context, job string, in fleet.RemoveEntryRequest) (fleet.RemoveEntryReply, error)
}

var _ Source = (*fleet.Client)(nil)

// EntryTriggerer is a Source that also runs one schedule entry now: the entry
// page's Run now, shown only when the Source is one. *fleet.Client is one.
type EntryTriggerer interface {
	TriggerEntry(ctx context.Context, job string, in fleet.TriggerEntryRequest) (fleet.TriggerReply, error)
}

var _ EntryTriggerer = (*fleet.Client)(nil)

// CalendarSource is a Source that also keeps calendars: the calendars page and
// its forms, shown only when the Source is one. *fleet.Client is one. Its
// errors should match fleet's (fleet.ErrCalendarNotFound,
// fleet.ErrCalendarConflict, fleet.ErrCalendarExists, fleet.ErrBadRequest).
type CalendarSource interface {
	// Calendars is every calendar summed up, ordered by name: the list page.
	Calendars(ctx context.Context) (fleet.CalendarsReply, error)
	// Calendar is one calendar whole: its page.
	Calendar(ctx context.Context, name string) (fleet.CalendarReply, error)
	// PutCalendar creates (in.Rev 0) or changes a calendar on the revision the
	// page showed; DeleteCalendar removes one on that revision.
	PutCalendar(ctx context.Context, in fleet.PutCalendarRequest) (fleet.CalendarReply, error)
	DeleteCalendar(ctx context.Context, in fleet.DeleteCalendarRequest) (fleet.DeleteCalendarReply, error)
}

var _ CalendarSource = (*fleet.Client)(nil)
