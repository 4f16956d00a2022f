package fleet

import (
	"bytes"
	"context"
	"encoding/json"
	"slices"
	"strconv"
	"strings"
	"sync"
	"time"
	"unicode/utf8"

	"github.com/anarchon/anarchon/backend"
	"github.com/anarchon/anarchon/internal/backendutil"
	"github.com/anarchon/anarchon/internal/natsutil"
	"github.com/anarchon/anarchon/scheduler"
)

// handle runs fn for each request and answers with its reply, or with an error
// reply carrying the micro error headers.
func (f *Service) handle(fn func(ctx context.Context, data []byte) (any, error)) handler {
	return func(req request) {
		if f.ignored(req) {
			return
		}
		if !f.begin() {
			f.fail(req, &replyError{code: CodeUnavailable, msg: "the fleet service is stopping"})
			return
		}
		defer f.inflight.Done()
		out, err := fn(withUser(f.requestContext(req), f.requestUser(req)), req.Data())
		if err != nil {
			f.fail(req, err)
			return
		}
		if p, ok := out.(parted); ok {
			f.respondParts(req, p)
			return
		}
		f.respond(req, out)
	}
}

// requestContext is the context req is served with: the service's, with what
// WithRequestContext makes of req's headers.
func (f *Service) requestContext(req request) (ctx context.Context) {
	if f.reqCtx == nil {
		return f.ctx
	}
	defer func() {
		if r := recover(); r != nil {
			f.log.Error("fleet: WithRequestContext panicked; the request is served without it", "subject", req.Subject(), "panic", r)
			ctx = f.ctx
		}
	}()
	if ctx = f.reqCtx(f.ctx, req.Header()); ctx == nil {
		return f.ctx
	}
	return ctx
}

// respondParts answers req with p's parts, in order.
func (f *Service) respondParts(req request, p parted) {
	if req.Reply() == "" {
		return
	}
	msgs, err := p.messages(f.budget())
	if err != nil {
		f.fail(req, err)
		return
	}
	for _, data := range msgs {
		if err := req.Respond(data); err != nil {
			f.log.Warn("fleet reply failed", "subject", req.Subject(), "parts", len(msgs), "err", err)
			return
		}
	}
}

// respond answers req with out as JSON (a request without a reply subject wants
// no answer).
func (f *Service) respond(req request, out any) {
	if req.Reply() == "" {
		return
	}
	data, err := json.Marshal(out)
	if err == nil {
		err = req.Respond(data)
	}
	if err != nil {
		f.log.Warn("fleet reply failed", "subject", req.Subject(), "err", err)
	}
}

// fail answers req with err: the code and one-line text in the micro error headers,
// and the same as JSON in the body.
func (f *Service) fail(req request, err error) {
	code, desc := replyFor(err)
	if code == CodeInternal {
		f.log.Warn("fleet request failed", "subject", req.Subject(), "err", err)
	} else {
		f.log.Debug("fleet request refused", "subject", req.Subject(), "code", code, "err", desc)
	}
	if req.Reply() == "" {
		return
	}
	body, _ := json.Marshal(ErrorBody{Code: code, Error: desc, Instance: f.s.Instance()})
	if err := req.Error(strconv.Itoa(code), desc, body); err != nil {
		f.log.Warn("fleet error reply failed", "subject", req.Subject(), "err", err)
	}
}

// ignored drops, without an answer, a message that JetStream sent rather than a
// client (natsutil.JetStreamOrigin): a consumer whose deliver subject is one of
// ours, or a request whose reply subject is, would otherwise have the server send
// stored messages here as requests. It also drops a request whose reply subject is
// no inbox (replyAddress): answering it would publish where the requester names.
func (f *Service) ignored(req request) bool {
	if why := natsutil.JetStreamOrigin(req.Reply(), req.Header()); why != "" {
		f.log.Debug("fleet ignored a message JetStream sent", "subject", req.Subject(), "reply", req.Reply(), "why", why)
		return true
	}
	if err := f.replyAddress(req.Reply()); err != nil {
		f.log.Debug("fleet ignored a request", "subject", req.Subject(), "err", err)
		return true
	}
	return false
}

// decode reads a request body into v: one JSON object of the request format
// RequestVersion ("v") with only the fields of v. An empty body, a body without
// "v" and one of a newer format are refused with what to send instead.
func decode(data []byte, v any) error {
	if len(bytes.TrimSpace(data)) == 0 {
		return badRequest("an empty body is not a request: send a JSON object with \"v\":%d", RequestVersion)
	}
	var head struct {
		V *json.RawMessage `json:"v"`
	}
	if err := json.Unmarshal(data, &head); err != nil {
		return badRequest("invalid JSON: %v", err)
	}
	var version int
	switch {
	case head.V == nil:
		return badRequest("the request has no \"v\": send \"v\":%d (the request format, fleet.RequestVersion)", RequestVersion)
	case json.Unmarshal(*head.V, &version) != nil:
		return badRequest("\"v\" is %s, not a number: send \"v\":%d", oneLine(string(*head.V)), RequestVersion)
	case version > RequestVersion:
		return badRequest("request format %d is newer than this replica's (%d, fleet %s): upgrade the replica, or send \"v\":%d",
			version, RequestVersion, Version, RequestVersion)
	case version < 1:
		return badRequest("request format %d does not exist: send \"v\":%d", version, RequestVersion)
	}
	dec := json.NewDecoder(bytes.NewReader(data))
	dec.DisallowUnknownFields()
	if err := dec.Decode(v); err != nil { // one value: json.Unmarshal checked it
		return badRequest("invalid JSON: %v", err)
	}
	return nil
}

// checkText refuses text the scheduler would refuse, before anything changes.
func checkText(field, s string) error {
	if !utf8.ValidString(s) || len(s) > scheduler.MaxPauseText {
		return badRequest("%s must be valid UTF-8 of at most %d bytes", field, scheduler.MaxPauseText)
	}
	return nil
}

// viewBudget bounds the backend reads of one jobs reply, so that a replica answers
// within the client's gather window (DefaultGatherWindow) even when its backend is
// slow: the jobs whose reads did not finish say so in ViewError.
const viewBudget = 300 * time.Millisecond

func (f *Service) jobsReply(ctx context.Context, data []byte) (any, error) {
	var in JobsRequest
	if err := decode(data, &in); err != nil {
		return nil, err
	}
	infos := f.s.Jobs()
	r := Replica{
		Instance: f.s.Instance(), Version: Version, Backend: f.s.Backend().Name(),
		PauseSupported: f.pauser, ServiceID: f.svc.Info().ID,
	}
	r.Entries, r.OrphanedEntries = f.s.EntryCounts()
	ctx, cancel := context.WithTimeout(ctx, viewBudget)
	defer cancel()
	// The jobs with entries are summed up in one pass, beside the last runs.
	states := f.s.EntryStates()
	var withEntries []string
	for _, j := range infos {
		if states[j.Job].Total() > 0 || j.EntriesOnly {
			withEntries = append(withEntries, j.Job)
		}
	}
	sums := make(chan map[string]scheduler.EntriesSummary, 1)
	go func() {
		sum, err := f.s.EntriesSummaries(ctx, withEntries...)
		if err != nil {
			f.log.Debug("fleet jobs: the failing entries not all checked", "err", err)
		}
		sums <- sum
	}()
	last, lastErr := f.s.LastRuns(ctx)
	summaries := <-sums
	jobs := make([]JobState, len(infos))
	next := make(chan int, len(infos))
	for i := range infos {
		next <- i
	}
	close(next)
	var wg sync.WaitGroup
	for range min(viewConcurrency, len(infos)) {
		wg.Go(func() {
			for i := range next {
				jobs[i] = f.jobState(ctx, infos[i], last, lastErr, summaries)
			}
		})
	}
	wg.Wait()
	items, err := marshalEach(jobs)
	if err != nil {
		return nil, err
	}
	return parted{items: items, field: "jobs", envelope: func(part, parts int) any {
		r := r
		r.Part, r.Parts = part, parts
		return replicaPart{Replica: r}
	}}, nil
}

// replicaPart is the envelope of one message of a jobs answer: the replica
// without its jobs, which parted adds.
type replicaPart struct {
	Replica
	Jobs []JobState `json:"jobs,omitempty"`
}

// viewConcurrency bounds the reads of unfinished runs one jobs reply has in flight
// (one per job): a hundred jobs take a few round trips, not a hundred.
const viewConcurrency = 16

// jobState is the replica's view of one job: its pause and next slot, its last
// runs (from one LastRuns read for every job: batched when the backend can), its
// entries summed up (sums, of the jobs with entries) and one read of its
// unfinished runs.
func (f *Service) jobState(ctx context.Context, j scheduler.JobInfo, last map[string]scheduler.LastRuns, lastErr error,
	sums map[string]scheduler.EntriesSummary) JobState {
	st := JobState{Name: j.Job, Schedule: j.Schedule, State: JobActive, Next: j.Next, MaxRuns: j.MaxRuns, LimitReached: j.LimitReached}
	if p, ok := f.s.Paused(j.Job); ok {
		st.State, st.Pause = JobPaused, pauseInfo(p)
	} else if j.Next.IsZero() && !j.EntriesOnly {
		st.State = JobEnded
	}
	st.EntriesOnly = j.EntriesOnly
	l, read := last[j.Job]
	if sum, ok := sums[j.Job]; ok {
		st.Entries = &EntriesState{Active: sum.Active, Paused: sum.Paused, Ended: sum.Ended,
			Failing: sum.Failing, FailingMore: sum.FailingMore, Unchecked: sum.Unchecked}
		if j.EntriesOnly {
			if st.Pause == nil {
				st.Next = sum.Next
			}
			// Its own runs (RunNow) and its entries': the newest of each kind.
			l.Run, l.Success, l.Failure = newestOf(l.Run, sum.Last.Run), newestOf(l.Success, sum.Last.Success), newestOf(l.Failure, sum.Last.Failure)
			read = read || l.Run != nil
		}
	}
	if lastErr != nil && !read { // the other jobs' last runs were read
		st.ViewError = shortText("last runs: " + lastErr.Error())
		return st
	}
	st.LastRun, st.LastSuccess, st.LastFailure = runPtr(l.Run), runPtr(l.Success), runPtr(l.Failure)
	active, err := f.s.Active(ctx, j.Job)
	if err != nil {
		st.ViewError = shortText("active: " + err.Error())
		return st
	}
	for i, a := range active {
		if i == MaxViewRunning {
			st.RunningMore = len(active) - MaxViewRunning
			break
		}
		st.Running = append(st.Running, activeRunOf(j.Job, a))
	}
	return st
}

// newestOf is the later run of a and b (either may be nil).
func newestOf(a, b *scheduler.RunRecord) *scheduler.RunRecord {
	switch {
	case a == nil:
		return b
	case b == nil:
		return a
	case b.Slot.After(a.Slot), b.Slot.Equal(a.Slot) && b.StartedAt.After(a.StartedAt):
		return b
	}
	return a
}

// runPtr is r as the jobs view shows it: its error cut at MaxViewError.
func runPtr(r *scheduler.RunRecord) *Run {
	if r == nil {
		return nil
	}
	run := runOf(*r, MaxViewError)
	return &run
}

func (f *Service) active(job string) func(context.Context, []byte) (any, error) {
	return func(ctx context.Context, data []byte) (any, error) {
		var in ActiveRequest
		if err := decode(data, &in); err != nil {
			return nil, err
		}
		runs, err := f.s.Active(ctx, job)
		if err != nil {
			return nil, err
		}
		active := make([]ActiveRun, 0, len(runs))
		for _, a := range runs {
			active = append(active, activeRunOf(job, a))
		}
		items, err := marshalEach(active)
		if err != nil {
			return nil, err
		}
		out := ActiveReply{Job: job, Instance: f.s.Instance()}
		return parted{items: items, field: "runs", envelope: func(part, parts int) any {
			out := out
			out.Part, out.Parts = part, parts
			return struct {
				ActiveReply
				Runs []ActiveRun `json:"runs,omitempty"`
			}{ActiveReply: out}
		}}, nil
	}
}

// pauseOptions validates a pause request; nothing is stored when it fails.
func pauseOptions(data []byte, now time.Time) (scheduler.PauseOptions, error) {
	var in PauseRequest
	if err := decode(data, &in); err != nil {
		return scheduler.PauseOptions{}, err
	}
	if in.Reason == "" {
		return scheduler.PauseOptions{}, badRequest("a pause needs a reason")
	}
	if err := checkText("reason", in.Reason); err != nil {
		return scheduler.PauseOptions{}, err
	}
	if err := checkText("by", in.By); err != nil {
		return scheduler.PauseOptions{}, err
	}
	opts := scheduler.PauseOptions{Reason: in.Reason, By: in.By, Until: in.Until}
	switch {
	case in.For != "" && !in.Until.IsZero():
		return scheduler.PauseOptions{}, badRequest("give until or for, not both")
	case in.For != "":
		d, err := time.ParseDuration(in.For)
		if err != nil {
			return scheduler.PauseOptions{}, badRequest("for: %v", err)
		}
		if d <= 0 {
			return scheduler.PauseOptions{}, badRequest("for %s is not positive", in.For)
		}
		opts.Until = now.Add(d)
	case !in.Until.IsZero() && !in.Until.After(now):
		return scheduler.PauseOptions{}, badRequest("until %s is in the past (the replica's clock says %s)",
			in.Until.Format(time.RFC3339), now.UTC().Format(time.RFC3339))
	}
	return opts, nil
}

func (f *Service) pause(job string) func(context.Context, []byte) (any, error) {
	return func(ctx context.Context, data []byte) (any, error) {
		return f.storePause(ctx, job, data)
	}
}

func (f *Service) pauseAll(ctx context.Context, data []byte) (any, error) {
	return f.storePause(ctx, "", data)
}

func (f *Service) storePause(ctx context.Context, job string, data []byte) (any, error) {
	now := f.s.Clock().Now()
	opts, err := pauseOptions(data, now)
	if err != nil {
		return nil, err
	}
	if job == "" {
		err = f.s.PauseAll(ctx, opts)
	} else {
		err = f.s.Pause(ctx, job, opts)
	}
	if err != nil {
		return nil, err
	}
	if opts.By == "" {
		opts.By = f.s.Instance() // the scheduler's default
	}
	f.log.Info("fleet pause", "job", job, "reason", opts.Reason, "by", opts.By, "user", userOf(ctx), "until", opts.Until)
	return PauseReply{Instance: f.s.Instance(), Pause: PauseInfo{Job: job, Reason: opts.Reason, By: opts.By, At: now, Until: opts.Until}}, nil
}

func (f *Service) resume(job string) func(context.Context, []byte) (any, error) {
	return func(ctx context.Context, data []byte) (any, error) {
		return f.clearPause(ctx, job, data)
	}
}

func (f *Service) resumeAll(ctx context.Context, data []byte) (any, error) {
	return f.clearPause(ctx, "", data)
}

func (f *Service) clearPause(ctx context.Context, job string, data []byte) (any, error) {
	var in ResumeRequest
	if err := decode(data, &in); err != nil {
		return nil, err
	}
	if err := checkText("by", in.By); err != nil {
		return nil, err
	}
	notPaused := f.notPaused(ctx, job)
	var err error
	if job == "" {
		err = f.s.ResumeAll(ctx)
	} else {
		err = f.s.Resume(ctx, job)
	}
	if err != nil {
		return nil, err
	}
	f.log.Info("fleet resume", "job", job, "by", in.By, "user", userOf(ctx), "not_paused", notPaused)
	out := ResumeReply{Job: job, Instance: f.s.Instance(), NotPaused: notPaused}
	if job != "" {
		if p, ok := f.s.Paused(job); ok && p.Job == "" {
			out.StillPaused = pauseInfo(p)
		}
	}
	return out, nil
}

// notPaused reads the stored pauses before a resume: true when none of job ("":
// the all-jobs pause) is in force by the scheduler's clock, so there is nothing
// to resume. A backend without pauses, or a read that fails, says false: the
// reply then leaves it out.
func (f *Service) notPaused(ctx context.Context, job string) bool {
	p, ok := f.s.Backend().(backend.Pauser)
	if !ok {
		return false
	}
	ctx, cancel := backendutil.CallContext(ctx, DefaultTimeout)
	defer cancel()
	all, err := p.Pauses(ctx)
	if err != nil {
		f.log.Debug("fleet resume: the stored pauses not read", "job", job, "err", err)
		return false
	}
	now := f.s.Clock().Now()
	for _, x := range all {
		if x.Job == job && x.InForce(now) {
			return false
		}
	}
	return true
}

func (f *Service) history(job string) func(context.Context, []byte) (any, error) {
	return func(ctx context.Context, data []byte) (any, error) {
		var in HistoryRequest
		if err := decode(data, &in); err != nil {
			return nil, err
		}
		limit, err := clampLimit("limit", in.Limit, DefaultHistoryLimit, MaxHistoryLimit)
		if err != nil {
			return nil, err
		}
		if in.Entry != "" {
			if err := checkEntryID(in.Entry); err != nil {
				return nil, err
			}
		}
		for _, st := range in.Status {
			if !knownStatus(st) {
				return nil, badRequest("status %q: the statuses are %s", oneLine(string(st)), strings.Join(statusNames(), ", "))
			}
		}
		filtered := len(in.Status) > 0 || !in.Since.IsZero()
		read := limit
		if filtered {
			read = MaxHistoryScan
		}
		var recs []scheduler.RunRecord
		if in.Entry != "" {
			recs, err = f.s.EntryHistory(ctx, job, in.Entry, read)
		} else {
			recs, err = f.s.History(ctx, job, read)
		}
		if err != nil {
			return nil, err
		}
		out := HistoryReply{Job: job, Entry: in.Entry, Instance: f.s.Instance(), Limit: limit}
		if filtered {
			out.Scanned = len(recs)
			recs = filterRuns(recs, in.Status, in.Since)
			out.ScanLimited = out.Scanned >= read && len(recs) < limit &&
				(in.Since.IsZero() || len(recs) == 0 || !recs[len(recs)-1].Slot.Before(in.Since))
			recs = recs[:min(len(recs), limit)]
		}
		runs := make([]Run, 0, len(recs))
		for _, r := range recs {
			runs = append(runs, runOf(r, scheduler.MaxErrorText))
		}
		items, err := marshalEach(runs)
		if err != nil {
			return nil, err
		}
		return parted{items: items, field: "runs", envelope: func(part, parts int) any {
			out := out
			out.Part, out.Parts = part, parts
			return struct {
				HistoryReply
				Runs []Run `json:"runs,omitempty"`
			}{HistoryReply: out}
		}}, nil
	}
}

// filterRuns keeps, in order, the records of the statuses given (any when none)
// whose slot is at or after since (any when zero).
func filterRuns(recs []scheduler.RunRecord, statuses []scheduler.Status, since time.Time) []scheduler.RunRecord {
	out := recs[:0:0]
	for _, r := range recs {
		if (len(statuses) == 0 || slices.Contains(statuses, r.Status)) && (since.IsZero() || !r.Slot.Before(since)) {
			out = append(out, r)
		}
	}
	return out
}

// statuses are the run statuses a history request filters by.
var statuses = []scheduler.Status{scheduler.StatusOK, scheduler.StatusError, scheduler.StatusTimeout,
	scheduler.StatusCancelled, scheduler.StatusSkipped, scheduler.StatusLate, scheduler.StatusMissed, scheduler.StatusPaused,
	scheduler.StatusLost, scheduler.StatusSuperseded, scheduler.StatusLimit, scheduler.StatusDeadline, scheduler.StatusExcluded,
	scheduler.StatusRunning}

func knownStatus(s scheduler.Status) bool { return slices.Contains(statuses, s) }

func statusNames() []string {
	out := make([]string, len(statuses))
	for i, s := range statuses {
		out[i] = string(s)
	}
	return out
}

// acceptRun decodes a request that starts runs into in and checks it (check:
// who asks, an entry's ID), then takes a place among the requests in flight
// (release it with f.inflight.Done). False when it answered the request with why
// not: nothing ran.
func (f *Service) acceptRun(req request, in any, check func() error) bool {
	err := decode(req.Data(), in)
	if err == nil {
		err = check()
	}
	switch {
	case err != nil:
		f.fail(req, err)
	case !f.s.Running():
		f.fail(req, &replyError{code: CodeUnavailable, msg: "the scheduler of this replica is not running (not started yet, or stopped); nothing was run"})
	case !f.begin():
		f.fail(req, &replyError{code: CodeUnavailable, msg: "the fleet service is stopping"})
	default:
		return true
	}
	return false
}

// trigger runs the job on this replica (RunNow, a manual run recorded with who
// asked) and answers accepted once the run has started (OnStart), or the error
// that kept it from starting: nothing ran then. With Wait, it answers again when
// the run has ended.
func (f *Service) trigger(job string) handler {
	return func(req request) {
		if f.ignored(req) {
			return
		}
		var in TriggerRequest
		if !f.acceptRun(req, &in, func() error { return checkText("by", in.By) }) {
			return
		}
		go f.runManual(req, job, "", in.By, in.Wait)
	}
}

// triggerEntry runs one schedule entry of the job on this replica
// (RunEntryNow), answered as trigger is.
func (f *Service) triggerEntry(job string) handler {
	return func(req request) {
		if f.ignored(req) {
			return
		}
		var in TriggerEntryRequest
		check := func() error {
			if err := checkEntryID(in.ID); err != nil {
				return err
			}
			return checkText("by", in.By)
		}
		if !f.acceptRun(req, &in, check) {
			return
		}
		go f.runManual(req, job, in.ID, in.By, in.Wait)
	}
}

// runManual runs job (entry id of it, when id is not "") now, for a trigger
// accepted: it answers accepted (or buffered) when the run starts, the error
// that kept it from starting, and finished when wait asks for it. It releases
// the request's place in flight.
func (f *Service) runManual(req request, job, id, by string, wait bool) {
	defer f.inflight.Done()
	user := f.requestUser(req)
	var accepted TriggerReply
	started := false
	reply := func(state string, run scheduler.Run) {
		started = true
		accepted = TriggerReply{State: state, Job: job, Entry: id, Instance: f.s.Instance(), By: by,
			At: f.s.Clock().Now(), Slot: run.Slot, Token: run.Token}
		f.respond(req, accepted)
		f.log.Info("fleet trigger", "job", job, "entry", id, "by", by, "user", user, "state", state, "token", run.Token)
	}
	onStart := scheduler.OnStart(func(run scheduler.Run) { reply(StateAccepted, run) })
	// Buffered behind the run in progress, it may wait long: the requester is
	// told at once that it is stored and will run.
	onBuffered := scheduler.OnBuffered(func(run scheduler.Run) { reply(StateBuffered, run) })
	// The run is the scheduler's: a requester that gives up does not cancel it.
	ctx := context.WithoutCancel(f.requestContext(req))
	var (
		rec scheduler.RunRecord
		err error
	)
	if id == "" {
		rec, err = f.s.RunNow(ctx, job, scheduler.RequestedBy(by), onBuffered, onStart)
	} else {
		rec, err = f.s.RunEntryNow(ctx, job, id, scheduler.RequestedBy(by), onBuffered, onStart)
	}
	if err != nil {
		if !started || wait {
			f.fail(req, err)
		}
		f.log.Warn("fleet trigger failed", "job", job, "entry", id, "by", by, "started", started, "err", err)
		return
	}
	f.log.Info("fleet triggered run ended", "job", job, "entry", id, "by", by, "status", rec.Status, "token", rec.Token)
	if !wait {
		return
	}
	run := runOf(rec, scheduler.MaxErrorText)
	finished := accepted
	finished.State, finished.Run = StateFinished, &run
	f.respond(req, finished)
}

// maxBackfillError bounds the error text of each slot of a finished backfill
// reply, so that the reply of MaxBackfillSlots slots stays a few parts.
const maxBackfillError = 256

// backfill runs the job's slots in a past range on this replica
// (Scheduler.Backfill) and answers accepted once the range is checked and its
// slots sorted (BackfillOnStart), or the error that kept it from starting:
// nothing ran then. With Wait, it answers again when every taken slot has ended,
// with every slot, in parts.
func (f *Service) backfill(job string) handler {
	return func(req request) {
		if f.ignored(req) {
			return
		}
		var in BackfillRequest
		check := func() error {
			switch {
			case in.Entry != "" && in.AllEntries:
				return badRequest("give entry or all_entries, not both")
			case in.Entry != "":
				if err := checkEntryID(in.Entry); err != nil {
					return err
				}
			}
			return checkText("by", in.By)
		}
		if !f.acceptRun(req, &in, check) {
			return
		}
		go func() {
			defer f.inflight.Done()
			var accepted BackfillReply
			started := false
			opts := []scheduler.BackfillOption{scheduler.BackfillOnStart(func(res scheduler.BackfillResult) {
				started = true
				accepted = BackfillReply{State: StateAccepted, Job: job, Entry: res.Entry, AllEntries: res.AllEntries, Instance: f.s.Instance(),
					By: in.By, At: f.s.Clock().Now(), From: res.From, To: res.To, Rerun: res.Rerun, Counts: backfillCounts(res)}
				f.respond(req, accepted)
				f.log.Info("fleet backfill", "job", job, "entry", in.Entry, "all_entries", in.AllEntries, "by", in.By,
					"user", f.requestUser(req), "from", res.From, "to", res.To, "rerun", res.Rerun, "taken", res.Count(scheduler.BackfillPending))
			})}
			if in.Rerun {
				opts = append(opts, scheduler.BackfillRerun())
			}
			if in.Concurrency != 0 {
				opts = append(opts, scheduler.BackfillConcurrency(in.Concurrency))
			}
			switch {
			case in.Entry != "":
				opts = append(opts, scheduler.BackfillEntry(in.Entry))
			case in.AllEntries:
				opts = append(opts, scheduler.BackfillAllEntries())
			}
			// The runs are the scheduler's: a requester that gives up does not end them.
			res, err := f.s.Backfill(context.WithoutCancel(f.requestContext(req)), job, in.From, in.To, opts...)
			if err != nil && !started {
				f.fail(req, err)
				f.log.Warn("fleet backfill refused", "job", job, "by", in.By, "err", err)
				return
			}
			f.log.Info("fleet backfill ended", "job", job, "by", in.By, "ran", res.Count(scheduler.BackfillRan), "err", err)
			if !in.Wait {
				return
			}
			finished := accepted
			finished.State, finished.Counts = StateFinished, backfillCounts(res)
			if err != nil {
				finished.Error = shortText(err.Error())
			}
			slots := make([]BackfillSlot, len(res.Slots))
			for i, s := range res.Slots {
				slots[i] = BackfillSlot{Entry: s.Entry, Slot: s.Slot, Outcome: string(s.Outcome), Status: s.Status, Attempt: s.Attempt,
					Instance: s.Instance, Error: backend.TruncateText(s.Error, maxBackfillError)}
			}
			items, merr := marshalEach(slots)
			if merr != nil {
				f.fail(req, merr)
				return
			}
			f.respondParts(req, parted{items: items, field: "slots", envelope: func(part, parts int) any {
				out := finished
				out.Part, out.Parts = part, parts
				return out
			}})
		}()
	}
}

// backfillCounts is the number of res's slots by outcome.
func backfillCounts(res scheduler.BackfillResult) map[string]int {
	out := map[string]int{}
	for _, s := range res.Slots {
		out[string(s.Outcome)]++
	}
	return out
}

// clampLimit is a request's limit (called name in the error): def when absent,
// at most most; a negative one is a bad request.
func clampLimit(name string, limit, def, most int) (int, error) {
	switch {
	case limit < 0:
		return 0, badRequest("%s %d is negative", name, limit)
	case limit == 0:
		return def, nil
	}
	return min(limit, most), nil
}
