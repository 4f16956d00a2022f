package fleet

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"maps"
	"slices"
	"strconv"
	"strings"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"
	"github.com/nats-io/nats.go/micro"

	"github.com/anarchon/anarchon/internal/backendutil"
)

// An endpoint is a request's subject and the job it is about; job is empty on
// the fleet's own subjects.
type endpoint struct {
	subject string
	job     string
}

// Client asks a fleet's replicas over NATS: the Go side of the protocol the
// anarchon command uses. It holds no subscription between calls and is safe for
// concurrent use.
type Client struct {
	nc      *nats.Conn
	subj    subjects
	timeout time.Duration
	window  time.Duration
	bucket  string
	js      jetstream.JetStream // the registry's reads
	headers func(context.Context, nats.Header)
}

// NewClient returns a client on nc (WithPrefix, WithTimeout, WithGatherWindow,
// WithRegistryBucket, WithRequestHeaders).
// The caller keeps ownership of nc. A connection whose inbox prefix
// (nats.CustomInboxPrefix) does not begin with _INBOX is refused: replicas answer
// on inboxes only.
func NewClient(nc *nats.Conn, opts ...Option) (*Client, error) {
	if nc == nil {
		return nil, fmt.Errorf("%w: nil connection", ErrInvalidOption)
	}
	c, err := newConfig(roleClient, opts)
	if err != nil {
		return nil, err
	}
	if p := nc.Opts.InboxPrefix; p != "" {
		if err := checkInboxPrefix(p); err != nil {
			return nil, err
		}
	}
	js, err := jetstream.New(nc)
	if err != nil {
		return nil, fmt.Errorf("fleet: %w", err)
	}
	return &Client{nc: nc, subj: subjects(c.prefix), timeout: c.timeout, window: c.window, bucket: c.bucket, js: js,
		headers: c.headers}, nil
}

// Subject returns the subject of a per-job endpoint ("trigger", "pause", "resume",
// "history", "active", "events", in either case) of job under the client's
// prefix: <prefix>.<VERB>.<JobToken(job)>. A job's schedule entries are at its
// "entries" subject followed by the operation: .LIST, .GET, .ADD, .UPDATE,
// .REMOVE, .TRIGGER.
func (c *Client) Subject(verb, job string) string { return c.subj.job(strings.ToUpper(verb), job) }

// Trigger runs job now on one replica that declares it (a manual run). It returns
// the accepted reply, or the buffered one when the job's run in progress keeps it
// waiting (a buffer overlap policy); with in.Wait it waits for the finished one,
// and when ctx ends first it returns the accepted or buffered reply with an
// error: the run goes on.
func (c *Client) Trigger(ctx context.Context, job string, in TriggerRequest) (TriggerReply, error) {
	in.V = versioned(in.V)
	return c.trigger(ctx, endpoint{c.subj.job(verbTrigger, job), job}, fmt.Sprintf("trigger %q", job), in, in.Wait)
}

// TriggerEntry runs schedule entry in.ID of job now, with its payload, on one
// replica that declares the job (a manual run of the entry, in its history), as
// Trigger runs a job: accepted, or buffered, then finished with in.Wait. An
// entry the replicas do not store is an error matching ErrEntryNotFound.
func (c *Client) TriggerEntry(ctx context.Context, job string, in TriggerEntryRequest) (TriggerReply, error) {
	in.V = versioned(in.V)
	return c.trigger(ctx, endpoint{c.subj.entry(opTrigger, job), job}, fmt.Sprintf("trigger entry %q of %q", in.ID, job), in, in.Wait)
}

// trigger sends a trigger request in to at and reads its replies: one, or with
// wait until the finished one. what names it in errors.
func (c *Client) trigger(ctx context.Context, at endpoint, what string, in any, wait bool) (TriggerReply, error) {
	ctx, cancel := backendutil.CallContext(ctx, c.timeout)
	defer cancel()
	data, err := json.Marshal(in)
	if err != nil {
		return TriggerReply{}, err
	}
	// Its own inbox: a trigger that waits gets two replies.
	sub, err := c.nc.SubscribeSync(c.nc.NewInbox())
	if err != nil {
		return TriggerReply{}, fmt.Errorf("fleet: %s: %w", what, err)
	}
	defer func() { _ = sub.Unsubscribe() }()
	if err := c.nc.PublishMsg(c.message(ctx, at.subject, sub.Subject, data)); err != nil {
		return TriggerReply{}, fmt.Errorf("fleet: %s: %w", what, err)
	}
	var out TriggerReply
	for {
		m, err := sub.NextMsgWithContext(ctx)
		if err != nil {
			err = c.callError(ctx, at, err)
			switch out.State {
			case StateAccepted:
				return out, fmt.Errorf("fleet: %s accepted by %s, not finished yet (the run goes on): %w", what, out.Instance, err)
			case StateBuffered:
				return out, fmt.Errorf("fleet: %s buffered by %s behind the run in progress, not started yet (it runs once that run ends): %w", what, out.Instance, err)
			}
			return out, err
		}
		if err := parseReply(at.subject, m, &out); err != nil {
			return out, err
		}
		if !wait || out.State == StateFinished {
			return out, nil
		}
	}
}

// Backfill runs job's slots in [in.From, in.To) that never ran on one replica
// that declares it (scheduler.Scheduler.Backfill). It returns the accepted reply;
// with in.Wait it waits for the finished one, with every slot (its parts joined),
// and when ctx ends first it returns the accepted reply with an error: the
// backfill goes on.
func (c *Client) Backfill(ctx context.Context, job string, in BackfillRequest) (BackfillReply, error) {
	subject := c.subj.job(verbBackfill, job)
	ctx, cancel := backendutil.CallContext(ctx, c.timeout)
	defer cancel()
	in.V = versioned(in.V)
	data, err := json.Marshal(in)
	if err != nil {
		return BackfillReply{}, err
	}
	// Its own inbox: a backfill that waits gets several replies.
	sub, err := c.nc.SubscribeSync(c.nc.NewInbox())
	if err != nil {
		return BackfillReply{}, fmt.Errorf("fleet: backfill %q: %w", job, err)
	}
	defer func() { _ = sub.Unsubscribe() }()
	if err := c.nc.PublishMsg(c.message(ctx, subject, sub.Subject, data)); err != nil {
		return BackfillReply{}, fmt.Errorf("fleet: backfill %q: %w", job, err)
	}
	var out BackfillReply
	var slots []BackfillSlot
	part := 0
	for {
		m, err := sub.NextMsgWithContext(ctx)
		if err != nil {
			err = c.callError(ctx, endpoint{subject, job}, err)
			if out.State != "" {
				return out, fmt.Errorf("fleet: backfill %q accepted by %s, not finished yet (the backfill goes on): %w", job, out.Instance, err)
			}
			return out, err
		}
		var r BackfillReply
		if err := parseReply(subject, m, &r); err != nil {
			return out, err
		}
		if r.State != StateFinished {
			out = r
			if !in.Wait {
				return out, nil
			}
			continue
		}
		part++
		if max(r.Part, 1) != part {
			return out, fmt.Errorf("%w: backfill %q: part %d of the finished reply after part %d", ErrBadReply, job, r.Part, part-1)
		}
		slots = append(slots, r.Slots...)
		out, out.Slots = r, slots
		if part >= max(r.Parts, 1) {
			out.Part, out.Parts = 0, 0
			return out, nil
		}
	}
}

// message is the message of a request, with the headers WithRequestHeaders adds.
func (c *Client) message(ctx context.Context, subject, reply string, data []byte) *nats.Msg {
	m := &nats.Msg{Subject: subject, Reply: reply, Data: data}
	if c.headers != nil {
		h := nats.Header{}
		c.headers(ctx, h)
		if len(h) > 0 {
			m.Header = h
		}
	}
	return m
}

// Pause pauses job on every replica (stored once, by one replica that declares it).
func (c *Client) Pause(ctx context.Context, job string, in PauseRequest) (PauseReply, error) {
	var out PauseReply
	in.V = versioned(in.V)
	return out, c.request(ctx, endpoint{c.subj.job(verbPause, job), job}, in, &out)
}

// PauseAll pauses every job of the fleet.
func (c *Client) PauseAll(ctx context.Context, in PauseRequest) (PauseReply, error) {
	var out PauseReply
	in.V = versioned(in.V)
	return out, c.request(ctx, endpoint{subject: c.subj.fleet(verbPauseAll)}, in, &out)
}

// Resume removes job's own pause (not the all-jobs pause: see ResumeReply).
func (c *Client) Resume(ctx context.Context, job string, in ResumeRequest) (ResumeReply, error) {
	var out ResumeReply
	in.V = versioned(in.V)
	return out, c.request(ctx, endpoint{c.subj.job(verbResume, job), job}, in, &out)
}

// ResumeAll removes the all-jobs pause.
func (c *Client) ResumeAll(ctx context.Context, in ResumeRequest) (ResumeReply, error) {
	var out ResumeReply
	in.V = versioned(in.V)
	return out, c.request(ctx, endpoint{subject: c.subj.fleet(verbResumeAll)}, in, &out)
}

// History returns job's recent runs across the fleet, newest first (limit: see
// HistoryRequest), read from every part of the reply: a reply whose parts did not
// all arrive before ctx ended (or the client's timeout) is an error that says so.
func (c *Client) History(ctx context.Context, job string, limit int) (HistoryReply, error) {
	return c.HistoryOf(ctx, job, HistoryRequest{Limit: limit})
}

// HistoryOf is History as in asks it: one entry's runs (in.Entry), those of some
// statuses (in.Status) or since a time (in.Since), filtered by the replica.
func (c *Client) HistoryOf(ctx context.Context, job string, in HistoryRequest) (HistoryReply, error) {
	in.V = versioned(in.V)
	out, err := gatherParts(ctx, c, endpoint{c.subj.job(verbHistory, job), job}, in,
		func(r *HistoryReply) (int, int, *[]Run) { return r.Part, r.Parts, &r.Runs })
	out.Part = 0
	return out, err
}

// gatherParts sends one request and joins the items of every part of its reply:
// the last part's reply, with the items of them all (never nil) where parts
// points. A reply whose parts did not all arrive is an error.
func gatherParts[R, T any](ctx context.Context, c *Client, at endpoint, req any, parts func(*R) (int, int, *[]T)) (R, error) {
	var out R
	all := []T{}
	err := c.requestParts(ctx, at, req, func(subject string, m *nats.Msg) (int, int, error) {
		var r R
		if err := parseReply(subject, m, &r); err != nil {
			return 0, 0, err
		}
		part, n, items := parts(&r)
		all = append(all, *items...)
		out = r
		return part, n, nil
	})
	if err != nil {
		var zero R
		return zero, err
	}
	_, _, items := parts(&out)
	*items = all
	return out, nil
}

// requestParts sends one request and reads the parts of its reply, in order,
// handing each to part, which returns the part's number and the number of parts.
func (c *Client) requestParts(ctx context.Context, at endpoint, in any, part func(string, *nats.Msg) (int, int, error)) error {
	subject := at.subject
	ctx, cancel := backendutil.CallContext(ctx, c.timeout)
	defer cancel()
	data, err := json.Marshal(in)
	if err != nil {
		return err
	}
	sub, err := c.nc.SubscribeSync(c.nc.NewInbox())
	if err != nil {
		return fmt.Errorf("fleet: %s: %w", subject, err)
	}
	defer func() { _ = sub.Unsubscribe() }()
	if err := c.nc.PublishMsg(c.message(ctx, subject, sub.Subject, data)); err != nil {
		return fmt.Errorf("fleet: %s: %w", subject, err)
	}
	got, parts := 0, 1
	for got < parts {
		m, err := sub.NextMsgWithContext(ctx)
		if err != nil {
			err = c.callError(ctx, at, err)
			if got > 0 {
				return fmt.Errorf("fleet: %s: %d of the %d parts of the reply arrived: %w", subject, got, parts, err)
			}
			return err
		}
		n, of, err := part(subject, m)
		if err != nil {
			return err
		}
		of = max(of, 1) // a reply in one message may leave its parts out
		switch {
		case got > 0 && of != parts:
			return fmt.Errorf("%w on %s: part %d says %d parts, part 1 said %d", ErrBadReply, subject, max(n, 1), of, parts)
		case max(n, 1) != got+1:
			return fmt.Errorf("%w on %s: part %d of %d arrived after part %d", ErrBadReply, subject, n, of, got)
		}
		got, parts = got+1, of
	}
	return nil
}

// Jobs asks every replica what it declares: one request on <prefix>.JOBS, whose
// answers are collected for the gather window (or until ctx ends, if sooner), and
// summarised by job. The registry is read meanwhile: once every replica in it has
// answered, Jobs returns without waiting for the rest of the window (a replica
// served WithoutRegistry is then listed only if it answered by that time). With no
// replica up it returns ErrNoReplica at once.
//
// A replica's answer may come in parts (Replica.Part): a replica is listed once
// every part has arrived. Parts still coming when the window ends are waited for
// as long as they keep coming (no gap longer than the window) and ctx lasts; a
// replica whose parts did not all arrive is not listed, and a warning says so.
func (c *Client) Jobs(ctx context.Context) (*Fleet, error) {
	subject := c.subj.fleet(verbJobs)
	msgs := make(chan *nats.Msg, 1024)
	sub, err := c.nc.ChanSubscribe(c.nc.NewInbox(), msgs)
	if err != nil {
		return nil, fmt.Errorf("fleet: jobs: %w", err)
	}
	defer func() { _ = sub.Unsubscribe() }()
	type registry struct {
		regs []Registration
		bad  []error
		err  error
	}
	regc := make(chan registry, 1)
	go func() {
		regs, bad, err := c.Registry(ctx)
		regc <- registry{regs, bad, err}
	}()
	data, err := json.Marshal(JobsRequest{V: RequestVersion})
	if err != nil {
		return nil, err
	}
	if err := c.nc.PublishMsg(c.message(ctx, subject, sub.Subject, data)); err != nil {
		return nil, fmt.Errorf("fleet: jobs: %w", err)
	}
	timer := time.NewTimer(c.window)
	defer timer.Stop()
	var warnings []string
	var reg *registry
	g := newGathering()
	complete := func() bool { // every registered replica answered in full
		if reg == nil || reg.err != nil || len(reg.regs) == 0 || g.pending() > 0 {
			return false
		}
		for _, r := range reg.regs {
			if !g.answered[r.Instance] {
				return false
			}
		}
		return true
	}
	late := false // the window ended: waiting for the parts still coming
gather:
	for !complete() {
		select {
		case r := <-regc:
			reg = &r
			regc = nil
		case m := <-msgs:
			if m == nil {
				break gather
			}
			if isNoResponders(m) {
				return nil, fmt.Errorf("%w: nothing serves %s", ErrNoReplica, subject)
			}
			var r Replica
			if err := parseReply(subject, m, &r); err != nil {
				warnings = append(warnings, oneLine(err.Error()))
				continue
			}
			if err := g.add(r); err != nil {
				warnings = append(warnings, oneLine(err.Error()))
			}
			if late && !timer.Stop() {
				<-timer.C
			}
			if late {
				timer.Reset(c.window)
			}
		case <-timer.C:
			if late || g.pending() == 0 {
				break gather
			}
			late = true
			timer.Reset(c.window)
		case <-ctx.Done():
			if len(g.done) == 0 && g.pending() == 0 {
				return nil, c.callError(ctx, endpoint{subject: subject}, ctx.Err())
			}
			break gather // the caller's deadline cut it short
		}
	}
	warnings = append(warnings, g.incomplete(c.window)...)
	if len(g.done) == 0 && len(warnings) == 0 {
		return nil, fmt.Errorf("%w: none answered on %s within %v", ErrNoReplica, subject, c.window)
	}
	f := summarize(g.done)
	f.Warnings = append(warnings, f.Warnings...)
	if reg == nil {
		r := <-regc // the registry read ends with ctx at the latest
		reg = &r
	}
	c.addRegistry(f, reg.regs, reg.bad, reg.err)
	return f, nil
}

// gathering collects the replicas' answers to one jobs request, part by part.
type gathering struct {
	parts    map[string]*Replica // answers still coming, by service id
	got      map[string]int      // their parts so far
	done     []Replica           // answers complete
	answered map[string]bool     // instances whose answer is complete
}

func newGathering() *gathering {
	return &gathering{parts: map[string]*Replica{}, got: map[string]int{}, answered: map[string]bool{}}
}

// pending is how many answers have parts still to come.
func (g *gathering) pending() int { return len(g.parts) }

// add takes one message of a replica's answer.
func (g *gathering) add(r Replica) error {
	key := r.ServiceID
	if key == "" {
		key = "instance " + r.Instance
	}
	part, parts := max(r.Part, 1), max(r.Parts, 1)
	have := g.parts[key]
	switch {
	case have == nil && part != 1:
		return fmt.Errorf("%w: replica %q: part %d of its jobs answer without part 1", ErrBadReply, r.Instance, part)
	case have != nil && (part != g.got[key]+1 || parts != have.Parts):
		err := fmt.Errorf("%w: replica %q: part %d of %d of its jobs answer after part %d of %d", ErrBadReply, r.Instance, part, parts, g.got[key], have.Parts)
		delete(g.parts, key)
		delete(g.got, key)
		return err
	case have == nil:
		r.Parts = parts
		have = &r
		g.parts[key] = have
	default:
		have.Jobs = append(have.Jobs, r.Jobs...)
	}
	g.got[key] = part
	if part < parts {
		return nil
	}
	delete(g.parts, key)
	delete(g.got, key)
	have.Part = 0
	if have.Jobs == nil {
		have.Jobs = []JobState{}
	}
	g.done = append(g.done, *have)
	g.answered[have.Instance] = true
	return nil
}

// incomplete warns about the answers whose parts did not all arrive.
func (g *gathering) incomplete(window time.Duration) []string {
	var out []string
	for _, key := range slices.Sorted(maps.Keys(g.parts)) {
		r := g.parts[key]
		out = append(out, fmt.Sprintf("replica %q sent %d of the %d parts of its jobs answer (no part for %v, or the deadline): it is not listed; ask again",
			r.Instance, g.got[key], r.Parts, window))
	}
	return out
}

// isNoResponders reports whether m is the server's status that nothing is
// subscribed to the request's subject.
func isNoResponders(m *nats.Msg) bool {
	return len(m.Data) == 0 && m.Header.Get("Status") == "503"
}

// addRegistry adds the registry's entries to f: the replicas registered that did
// not answer are warned about, entries this version cannot read are listed in
// f.Unreadable.
func (c *Client) addRegistry(f *Fleet, regs []Registration, bad []error, err error) {
	if err != nil {
		f.Warnings = append(f.Warnings, oneLine("registry not read: "+err.Error()))
		return
	}
	f.Registered = regs
	answered := map[string]bool{}
	for _, r := range f.Replicas {
		answered[r.Instance] = true
	}
	for _, r := range regs {
		if !answered[r.Instance] {
			f.Warnings = append(f.Warnings, fmt.Sprintf("replica %q is registered (entry written %s) but did not answer within %v",
				r.Instance, r.At.Format(time.RFC3339), c.window))
		}
	}
	for _, err := range bad {
		f.Unreadable = append(f.Unreadable, oneLine(err.Error()))
	}
}

// versioned is a request's format: v, or RequestVersion when the caller left it
// zero.
func versioned(v int) int {
	if v == 0 {
		return RequestVersion
	}
	return v
}

// request sends one request to at and decodes its one reply into out.
func (c *Client) request(ctx context.Context, at endpoint, in, out any) error {
	ctx, cancel := backendutil.CallContext(ctx, c.timeout)
	defer cancel()
	data, err := json.Marshal(in)
	if err != nil {
		return err
	}
	m, err := c.nc.RequestMsgWithContext(ctx, c.message(ctx, at.subject, "", data))
	if err != nil {
		return c.callError(ctx, at, err)
	}
	return parseReply(at.subject, m, out)
}

// callError explains a request to at that got no reply. No responders on a
// job's subject is a *NoReplicaError that says who is up.
func (c *Client) callError(ctx context.Context, at endpoint, err error) error {
	switch {
	case errors.Is(err, nats.ErrNoResponders) && at.job != "":
		return c.noDeclarer(ctx, at.subject, at.job)
	case errors.Is(err, nats.ErrNoResponders):
		return fmt.Errorf("%w: none is up (no responders on %s)", ErrNoReplica, at.subject)
	case ctx.Err() != nil:
		return fmt.Errorf("fleet: no answer on %s: %w", at.subject, context.Cause(ctx))
	}
	return fmt.Errorf("fleet: %s: %w", at.subject, err)
}

// noDeclarer is the error of a request about job that nothing answered on
// subject: it asks the fleet who is up (Jobs, within ctx). A replica that
// answers and declares job after all (one that just started serving) leaves the
// error unchecked: who is up says nothing then.
func (c *Client) noDeclarer(ctx context.Context, subject, job string) error {
	e := &NoReplicaError{Subject: subject, Job: job}
	f, err := c.Jobs(ctx)
	switch {
	case errors.Is(err, ErrNoReplica):
		e.Checked = true
		return e
	case err != nil || len(f.Replicas) == 0:
		return e
	}
	for _, j := range f.Jobs {
		if j.Name == job {
			return e
		}
	}
	e.Checked = true
	for _, r := range f.Replicas {
		e.Up = append(e.Up, r.Instance)
	}
	slices.Sort(e.Up)
	e.Up = slices.Compact(e.Up)
	return e
}

// parseReply decodes a reply: an error reply (the micro error headers) becomes a
// *ServiceError.
func parseReply(subject string, m *nats.Msg, out any) error {
	if code := m.Header.Get(micro.ErrorCodeHeader); code != "" {
		n, err := strconv.Atoi(code)
		if err != nil {
			n = CodeInternal
		}
		e := &ServiceError{Subject: subject, Code: n, Description: m.Header.Get(micro.ErrorHeader)}
		var body ErrorBody
		if json.Unmarshal(m.Data, &body) == nil {
			e.Instance = body.Instance
		}
		return e
	}
	if err := json.Unmarshal(m.Data, out); err != nil {
		return fmt.Errorf("%w on %s: %w", ErrBadReply, subject, err)
	}
	return nil
}
