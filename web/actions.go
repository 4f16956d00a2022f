package web

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"mime"
	"net/http"
	"strconv"
	"strings"
	"time"

	"github.com/anarchon/anarchon/fleet"
)

// maxActionBody bounds an action's body: a reason and a duration.
const maxActionBody = 16 << 10

// maxText is the longest reason or name fleet accepts (1 KiB).
const maxText = 1024

// actionInput is an action's body: form fields from the page, or JSON from a
// client of api/.
type actionInput struct {
	// Reason is the pause's reason (required for pause).
	Reason string `json:"reason"`
	// For is the pause's length, a Go duration ("30m"); empty: until resumed.
	For string `json:"for"`
	// Rev is the revision of the entry the page showed (an entry's pause and
	// resume; required there).
	Rev uint64 `json:"rev"`
}

// act runs an action after the cross-origin check: refused for a Host the page
// does not answer to (hosts.go), without an authorizer, or when it says no.
func (h *Handler) act(w http.ResponseWriter, r *http.Request, rt route) {
	if rt.calendarRoute() {
		h.actCalendar(w, r, rt)
		return
	}
	// What is asked, for the messages: run "report", pause entry "acme" of "tenants".
	what, of := fmt.Sprintf("%s %q", rt.action, rt.job), fmt.Sprintf("%s of %q", rt.action, rt.job)
	if rt.action == actionAddEntry {
		what, of = fmt.Sprintf("add an entry to %q", rt.job), fmt.Sprintf("adding an entry to %q", rt.job)
	}
	if rt.entry != "" {
		what = fmt.Sprintf("%s entry %q of %q", rt.action, rt.entry, rt.job)
		of = what
	}
	by, ok := h.allowAction(w, r, of)
	if !ok {
		return
	}
	form := rt.action == actionAddEntry || rt.action == actionUpdate || rt.action == actionRemove
	var in actionInput
	if !form {
		var err error
		if in, err = readAction(w, r); err != nil {
			h.failErr(w, r, rt.action, err)
			return
		}
	}
	ctx, cancel := context.WithTimeout(r.Context(), h.cfg.Timeout)
	defer cancel()
	var (
		reply any
		done  string
		err   error
		back  string // the page to go back to, when not the job's or the entry's
	)
	switch {
	case form:
		reply, back, done, err = h.changeEntry(ctx, w, r, rt, by)
		if errors.Is(err, fleet.ErrEntryNotFound) {
			h.fail(w, r, http.StatusNotFound, fmt.Sprintf("%s: the job has no schedule entry with this ID (removed, or never added)", what))
			return
		}
	case rt.entry != "" && rt.action == actionRun:
		reply, done, err = h.triggerEntry(ctx, rt, by)
		if errors.Is(err, fleet.ErrEntryNotFound) {
			h.fail(w, r, http.StatusNotFound, fmt.Sprintf("%s: the job has no schedule entry with this ID (removed, or never added)", what))
			return
		}
	case rt.entry != "":
		reply, done, err = h.pauseEntry(ctx, rt, in.Rev, by)
		if errors.Is(err, fleet.ErrEntryNotFound) {
			h.fail(w, r, http.StatusNotFound, fmt.Sprintf("%s: the job has no schedule entry with this ID (removed, or never added)", what))
			return
		}
	case rt.action == actionRun:
		reply, done, err = h.trigger(ctx, rt.job, by)
	case rt.action == actionPause:
		var p fleet.PauseRequest
		if p, err = pauseRequest(in, by); err == nil {
			reply, err = h.cfg.Source.Pause(ctx, rt.job, p)
			done = "paused"
		}
	case rt.action == actionResume:
		var res fleet.ResumeReply
		res, err = h.cfg.Source.Resume(ctx, rt.job, fleet.ResumeRequest{By: by})
		reply, done = res, "resumed"
		if res.NotPaused {
			done = "not-paused"
		}
	}
	if err != nil {
		h.failErr(w, r, what, jobErr(err))
		return
	}
	h.cfg.Logger.Info("web: action", "action", rt.action, "job", rt.job, "entry", rt.entry, "by", by)
	if wantsJSON(r, rt) {
		writeJSON(w, http.StatusOK, reply) // as the CLI's --json prints it
		return
	}
	// Post, redirect, get: a reload does not repeat the action.
	switch {
	case back != "":
	case rt.entry != "":
		back = entryPath(rt.job, rt.entry)
	default:
		back = jobPath(rt.job)
	}
	http.Redirect(w, r, h.cfg.Prefix+back+"?done="+done, http.StatusSeeOther)
}

// allowAction runs the checks every action passes after the cross-origin one:
// the Host, the authorizer (of names the action in its refusal), and the
// length of who asks. A refusal is answered here, and ok is false.
func (h *Handler) allowAction(w http.ResponseWriter, r *http.Request, of string) (by string, ok bool) {
	if !h.checkHost(w, r, true) {
		return "", false
	}
	if h.cfg.Authorize == nil {
		h.fail(w, r, http.StatusForbidden, "the status page is read-only: the service passes no authorizer (web.Config.Authorize)")
		return "", false
	}
	if !h.cfg.Authorize(r) {
		h.fail(w, r, http.StatusForbidden, "not allowed: the authorizer refused "+of)
		return "", false
	}
	by = h.cfg.Who(r)
	if len(by) > maxText {
		h.fail(w, r, http.StatusInternalServerError, fmt.Sprintf("web.Config.Who returned %d bytes: at most %d", len(by), maxText))
		return "", false
	}
	return by, true
}

// pauseEntry pauses or resumes (rt.action) entry rt.entry of rt.job as the page
// showed it, at revision rev: the entry is read and stored again with Paused
// changed, on rev, as `anarchon schedule set --paused` does. A change another
// writer made since the page was read is refused (fleet.ErrEntryConflict), not
// undone. An entry already so is left as it is.
func (h *Handler) pauseEntry(ctx context.Context, rt route, rev uint64, by string) (any, string, error) {
	if rev == 0 {
		return nil, "", fmt.Errorf("%w: an entry's %s needs rev, the revision the page showed", errBadInput, rt.action)
	}
	paused := rt.action == actionPause
	cur, err := h.cfg.Source.Entry(ctx, rt.job, fleet.EntryRequest{ID: rt.entry, History: 1})
	if err != nil {
		return nil, "", err
	}
	if cur.Entry.Paused == paused && cur.Entry.Revision == rev {
		e := cur.Entry.Entry
		e.Payload = nil // as a change's reply: the size only
		return fleet.EntryChangeReply{Job: rt.job, Instance: cur.Instance, By: by, Entry: e}, "entry-unchanged", nil
	}
	spec := cur.Entry.EntrySpec
	spec.Paused = paused
	r, err := h.cfg.Source.UpdateEntry(ctx, rt.job, fleet.UpdateEntryRequest{ID: rt.entry, Rev: rev, EntrySpec: spec, By: by})
	if errors.Is(err, fleet.ErrEntryConflict) {
		err = fmt.Errorf("%w: the entry changed since the page was read (revision %d, now %d); reload it to see it as it is", err, rev, cur.Entry.Revision)
	}
	done := "entry-paused"
	if !paused {
		done = "entry-resumed"
	}
	return r, done, err
}

// trigger asks for a manual run and waits up to TriggerWait for it to end.
func (h *Handler) trigger(ctx context.Context, job, by string) (fleet.TriggerReply, string, error) {
	return h.waitRun(ctx, func(ctx context.Context, wait bool) (fleet.TriggerReply, error) {
		return h.cfg.Source.Trigger(ctx, job, fleet.TriggerRequest{By: by, Wait: wait})
	})
}

// triggerEntry asks for a manual run of entry rt.entry of rt.job, as trigger
// does for a job; a Source that cannot (no EntryTriggerer) refuses it.
func (h *Handler) triggerEntry(ctx context.Context, rt route, by string) (fleet.TriggerReply, string, error) {
	et, ok := h.cfg.Source.(EntryTriggerer)
	if !ok {
		return fleet.TriggerReply{}, "", fmt.Errorf("%w: the status page's source cannot run one entry (web.EntryTriggerer)", fleet.ErrNotSupported)
	}
	return h.waitRun(ctx, func(ctx context.Context, wait bool) (fleet.TriggerReply, error) {
		return et.TriggerEntry(ctx, rt.job, fleet.TriggerEntryRequest{ID: rt.entry, By: by, Wait: wait})
	})
}

// waitRun asks for a manual run with ask and waits up to TriggerWait for it to
// end.
func (h *Handler) waitRun(ctx context.Context, ask func(ctx context.Context, wait bool) (fleet.TriggerReply, error)) (fleet.TriggerReply, string, error) {
	if h.cfg.TriggerWait < 0 {
		r, err := ask(ctx, false)
		return r, goesOn(r), err
	}
	wctx, cancel := context.WithTimeout(ctx, h.cfg.TriggerWait)
	defer cancel()
	r, err := ask(wctx, true)
	if err != nil && (r.State == fleet.StateAccepted || r.State == fleet.StateBuffered) && ctx.Err() == nil && wctx.Err() != nil {
		return r, goesOn(r), nil // the run goes on past the wait
	}
	return r, "finished", err
}

// goesOn is the done message of a trigger answered r that has not finished.
func goesOn(r fleet.TriggerReply) string {
	if r.State == fleet.StateBuffered {
		return "buffered"
	}
	return "started"
}

// readAction reads the body: a form, or JSON (Content-Type: application/json).
func readAction(w http.ResponseWriter, r *http.Request) (actionInput, error) {
	var in actionInput
	r.Body = http.MaxBytesReader(w, r.Body, maxActionBody)
	ct, _, _ := mime.ParseMediaType(r.Header.Get("Content-Type"))
	if ct == "application/json" {
		dec := json.NewDecoder(r.Body)
		dec.DisallowUnknownFields()
		if err := dec.Decode(&in); err != nil {
			return in, fmt.Errorf("%w: JSON body: %w", errBadInput, err)
		}
		return in, nil
	}
	if err := r.ParseForm(); err != nil {
		var tooBig *http.MaxBytesError
		if errors.As(err, &tooBig) {
			return in, fmt.Errorf("%w: body over %d bytes", errBadInput, maxActionBody)
		}
		return in, fmt.Errorf("%w: form: %w", errBadInput, err)
	}
	in.Reason, in.For = r.PostForm.Get("reason"), r.PostForm.Get("for")
	if s := r.PostForm.Get("rev"); s != "" {
		rev, err := strconv.ParseUint(s, 10, 64)
		if err != nil {
			return in, fmt.Errorf("%w: rev=%q: an entry's revision, a number", errBadInput, s)
		}
		in.Rev = rev
	}
	return in, nil
}

// pauseRequest checks a pause's fields before the fleet is asked.
func pauseRequest(in actionInput, by string) (fleet.PauseRequest, error) {
	reason := strings.TrimSpace(in.Reason)
	switch {
	case reason == "":
		return fleet.PauseRequest{}, fmt.Errorf("%w: a pause needs a reason", errBadInput)
	case len(reason) > maxText:
		return fleet.PauseRequest{}, fmt.Errorf("%w: reason of %d bytes: at most %d", errBadInput, len(reason), maxText)
	}
	p := fleet.PauseRequest{Reason: reason, By: by}
	if s := strings.TrimSpace(in.For); s != "" {
		d, err := time.ParseDuration(s)
		if err != nil || d <= 0 {
			return p, fmt.Errorf("%w: for=%q: a positive duration such as 30m or 2h, or empty to pause until resumed", errBadInput, s)
		}
		p.For = d.String()
	}
	return p, nil
}
