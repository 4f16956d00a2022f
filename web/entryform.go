package web

import (
	"context"
	"errors"
	"fmt"
	"net/http"
	"slices"
	"strconv"
	"strings"
	"time"
	"unicode/utf8"

	"github.com/anarchon/anarchon/backend"
	"github.com/anarchon/anarchon/fleet"
)

// maxEntryForm bounds the body of an entry's add or change: a payload at its
// limit, form-encoded (every byte may take three), and the other fields.
const maxEntryForm = 3*backend.MaxEntryPayload + maxActionBody

// entryForm is the form that adds or changes an entry, as the page fills it.
type entryForm struct {
	ID, Every, Cron, Zone, At, Start, End string
	Deadline                              string
	DSTRepeated, DSTMissing               string
	// Calendars are the entry's calendars, separated by commas.
	Calendars string
	Payload   string
	// Binary: the stored payload is not text; the form keeps it as it is.
	Binary bool
	Paused bool
	Rev    uint64
}

// formFrame is an entry's form with where it posts: an add (the job page) or
// a change (the entry page).
type formFrame struct {
	entryForm
	Action string
	Add    bool
}

// formTime is how the forms write an instant: RFC 3339.
const formTime = time.RFC3339Nano

func formOf(e fleet.Entry) entryForm {
	f := entryForm{ID: e.ID, Every: e.Every, Cron: e.Cron, Zone: e.Zone, Deadline: e.Deadline, Paused: e.Paused, Rev: e.Revision,
		DSTRepeated: e.DSTRepeated, DSTMissing: e.DSTMissing, Calendars: strings.Join(e.Calendars, ", ")}
	for _, t := range []struct {
		at  time.Time
		out *string
	}{{e.At, &f.At}, {e.Start, &f.Start}, {e.End, &f.End}} {
		if !t.at.IsZero() {
			*t.out = t.at.UTC().Format(formTime)
		}
	}
	if utf8.Valid(e.Payload) {
		f.Payload = string(e.Payload)
	} else {
		f.Binary = true
	}
	return f
}

// choice is an option of a select of the form.
type choice struct {
	Value, Label string
	Selected     bool
}

// dstSelect is a select of an entry's DST policy: the values it offers with
// their words, the default (empty) first, and the default spelled out, which
// it accepts and shows when stored.
type dstSelect struct {
	name, want string
	offered    [][2]string
	spelled    [2]string
}

var (
	dstRepeatedSelect = dstSelect{name: "dst_repeated", want: "first, last or both",
		offered: [][2]string{{"", "once, the first time (default)"}, {"last", "once, the second time"}, {"both", "twice"}},
		spelled: [2]string{"first", "once, the first time"}}
	dstMissingSelect = dstSelect{name: "dst_missing", want: "shift or skip",
		offered: [][2]string{{"", "later by the jump (default)"}, {"skip", "not at all"}},
		spelled: [2]string{"shift", "later by the jump"}}
)

func (d dstSelect) valid(v string) bool {
	return v == d.spelled[0] || slices.ContainsFunc(d.offered, func(o [2]string) bool { return o[0] == v })
}

// choices are the options with stored selected; a stored value not offered
// (spelled out, or unknown) is an option of its own, so that a change keeps it.
func (d dstSelect) choices(stored string) []choice {
	out := make([]choice, 0, len(d.offered)+1)
	for _, o := range d.offered {
		out = append(out, choice{Value: o[0], Label: o[1], Selected: o[0] == stored})
	}
	if !slices.ContainsFunc(d.offered, func(o [2]string) bool { return o[0] == stored }) {
		label := stored + " (as stored)"
		if stored == d.spelled[0] {
			label = d.spelled[1]
		}
		out = append(out, choice{Value: stored, Label: label, Selected: true})
	}
	return out
}

// RepeatedChoices and MissingChoices are the options of the DST selects.
func (f entryForm) RepeatedChoices() []choice { return dstRepeatedSelect.choices(f.DSTRepeated) }
func (f entryForm) MissingChoices() []choice  { return dstMissingSelect.choices(f.DSTMissing) }

// readEntryForm reads an entry's form (or its JSON, fleet's AddEntryRequest
// fields) into its ID, spec and base revision. keep is the stored payload a
// change keeps when the form says so (a payload that is not text).
func readEntryForm(w http.ResponseWriter, r *http.Request) (id string, spec fleet.EntrySpec, rev uint64, keepPayload bool, err error) {
	r.Body = http.MaxBytesReader(w, r.Body, maxEntryForm)
	if err := r.ParseForm(); err != nil {
		var tooBig *http.MaxBytesError
		if errors.As(err, &tooBig) {
			return "", spec, 0, false, fmt.Errorf("%w: body over %d bytes (a payload is at most %d)", errBadInput, maxEntryForm, backend.MaxEntryPayload)
		}
		return "", spec, 0, false, fmt.Errorf("%w: form: %w", errBadInput, err)
	}
	f := r.PostForm
	for k, vs := range f {
		if len(vs) > 1 {
			return "", spec, 0, false, fmt.Errorf("%w: %s given %d times", errBadInput, k, len(vs))
		}
	}
	id = f.Get("id")
	spec.Every = strings.TrimSpace(f.Get("every"))
	spec.Cron = strings.TrimSpace(f.Get("cron"))
	spec.Zone = strings.TrimSpace(f.Get("zone"))
	spec.Deadline = strings.TrimSpace(f.Get("deadline"))
	spec.DSTRepeated = strings.TrimSpace(f.Get("dst_repeated"))
	spec.DSTMissing = strings.TrimSpace(f.Get("dst_missing"))
	for _, t := range []struct {
		name string
		out  *time.Time
	}{{"at", &spec.At}, {"start", &spec.Start}, {"end", &spec.End}} {
		s := strings.TrimSpace(f.Get(t.name))
		if s == "" {
			continue
		}
		at, perr := time.Parse(time.RFC3339Nano, s)
		if perr != nil {
			return "", spec, 0, false, fmt.Errorf("%w: %s=%q: an RFC 3339 time, such as 2030-01-02T09:00:00Z", errBadInput, t.name, s)
		}
		*t.out = at
	}
	kinds := 0
	for _, set := range []bool{spec.Every != "", spec.Cron != "", !spec.At.IsZero()} {
		if set {
			kinds++
		}
	}
	if kinds != 1 {
		return "", spec, 0, false, fmt.Errorf("%w: give one schedule: every (a duration), cron (with an optional zone) or at (a time); got %d", errBadInput, kinds)
	}
	if spec.Zone != "" && spec.Cron == "" {
		return "", spec, 0, false, fmt.Errorf("%w: zone is for a cron schedule", errBadInput)
	}
	for _, d := range []struct {
		dstSelect
		v string
	}{{dstRepeatedSelect, spec.DSTRepeated}, {dstMissingSelect, spec.DSTMissing}} {
		switch {
		case !d.valid(d.v):
			return "", spec, 0, false, fmt.Errorf("%w: %s=%q: %s, or empty for the default", errBadInput, d.name, d.v, d.want)
		case d.v != "" && spec.Cron == "":
			return "", spec, 0, false, fmt.Errorf("%w: %s is for a cron schedule: leave it at the default", errBadInput, d.name)
		}
	}
	// Calendar names have no commas the form can take: a name with one is
	// stored with the CLI or the fleet's API.
	for c := range strings.SplitSeq(f.Get("calendars"), ",") {
		if c = strings.TrimSpace(c); c != "" {
			spec.Calendars = append(spec.Calendars, c)
		}
	}
	if len(spec.Calendars) > backend.MaxCalendarsPerSchedule {
		return "", spec, 0, false, fmt.Errorf("%w: %d calendars: at most %d", errBadInput, len(spec.Calendars), backend.MaxCalendarsPerSchedule)
	}
	if p := f.Get("payload"); p != "" {
		// A textarea sends CRLF line ends: the payload is what was typed.
		spec.Payload = []byte(strings.ReplaceAll(p, "\r\n", "\n"))
	}
	if len(spec.Payload) > backend.MaxEntryPayload {
		return "", spec, 0, false, fmt.Errorf("%w: payload of %d bytes: at most %d", errBadInput, len(spec.Payload), backend.MaxEntryPayload)
	}
	keepPayload = f.Get("keep_payload") == "1"
	switch v := f.Get("paused"); v {
	case "", "0":
	case "1", "on":
		spec.Paused = true
	default:
		return "", spec, 0, false, fmt.Errorf("%w: paused=%q: 1 or absent", errBadInput, v)
	}
	if s := f.Get("rev"); s != "" {
		if rev, err = strconv.ParseUint(s, 10, 64); err != nil {
			return "", spec, 0, false, fmt.Errorf("%w: rev=%q: the entry's revision, a number", errBadInput, s)
		}
	}
	return id, spec, rev, keepPayload, nil
}

// changeEntry adds (rt.action add-entry), changes or removes an entry: the
// change and the removal on the revision the page showed, so a change made
// since is refused, not undone. It returns the reply, the path to go back to,
// and its done message.
func (h *Handler) changeEntry(ctx context.Context, w http.ResponseWriter, r *http.Request, rt route, by string) (any, string, string, error) {
	if rt.action == actionRemove {
		in, err := readAction(w, r)
		if err != nil {
			return nil, "", "", err
		}
		if in.Rev == 0 {
			return nil, "", "", fmt.Errorf("%w: a removal needs rev, the revision the page showed", errBadInput)
		}
		reply, err := h.cfg.Source.RemoveEntry(ctx, rt.job, fleet.RemoveEntryRequest{ID: rt.entry, Rev: in.Rev, By: by})
		return reply, jobPath(rt.job), "entry-removed", conflictHint(err, in.Rev)
	}
	id, spec, rev, keep, err := readEntryForm(w, r)
	if err != nil {
		return nil, "", "", err
	}
	if rt.action == actionAddEntry {
		if err := backend.ValidateEntryID(id); err != nil {
			return nil, "", "", fmt.Errorf("%w: id=%q: %w", errBadInput, id, err)
		}
		reply, err := h.cfg.Source.AddEntry(ctx, rt.job, fleet.AddEntryRequest{ID: id, EntrySpec: spec, By: by})
		return reply, entryPath(rt.job, id), "entry-added", err
	}
	if rev == 0 {
		return nil, "", "", fmt.Errorf("%w: a change needs rev, the revision the page showed", errBadInput)
	}
	if id != "" && id != rt.entry {
		return nil, "", "", fmt.Errorf("%w: id=%q: an entry's ID does not change (add one with the new ID, remove this one)", errBadInput, id)
	}
	if keep {
		cur, err := h.cfg.Source.Entry(ctx, rt.job, fleet.EntryRequest{ID: rt.entry, History: 1})
		if err != nil {
			return nil, "", "", err
		}
		if cur.Entry.Revision != rev {
			return nil, "", "", conflictHint(fleet.ErrEntryConflict, rev)
		}
		spec.Payload = cur.Entry.Payload
	}
	reply, err := h.cfg.Source.UpdateEntry(ctx, rt.job, fleet.UpdateEntryRequest{ID: rt.entry, Rev: rev, EntrySpec: spec, By: by})
	return reply, entryPath(rt.job, rt.entry), "entry-updated", conflictHint(err, rev)
}

// conflictHint says what to do about a change refused for its revision.
func conflictHint(err error, rev uint64) error {
	if errors.Is(err, fleet.ErrEntryConflict) {
		return fmt.Errorf("%w: the entry changed since the page was read (revision %d); reload it to see it as it is", err, rev)
	}
	return err
}

// entryActionPath is where an entry's form posts, under the prefix.
func entryActionPath(job, id, action string) string {
	if id == "" {
		return jobPath(job) + "/" + action
	}
	return entryPath(job, id) + "/" + action
}
