package fleet

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"maps"
	"slices"
	"strconv"
	"strings"
	"sync"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/micro"

	"github.com/anarchon/anarchon/backend"
	"github.com/anarchon/anarchon/internal/backendutil"
	"github.com/anarchon/anarchon/scheduler"
)

// Service is one replica's fleet endpoints: a NATS micro service named ServiceName.
// Create it with Serve and stop it with Stop.
type Service struct {
	nc   *nats.Conn
	s    *scheduler.Scheduler
	log  *slog.Logger
	jobs []string // the jobs served (follow's, once Serve returned)
	cfg  *config
	// dropCheck removes the registration check Serve added (AddJobCheck).
	dropCheck func()
	subj      subjects
	svc       micro.Service // the fleet-wide endpoints, and $SRV
	pauser    bool
	// The per-job endpoints: their subscriptions by job, the handler of each
	// subject (both under routesMu), the queues their messages wait in (reads
	// and controls apart), their workers.
	routesMu sync.RWMutex
	subs     map[string][]*nats.Subscription
	routes   map[string]handler
	reads    chan *nats.Msg
	controls chan *nats.Msg
	// A job's entry requests arrive with the controls; its reads are handed to
	// the read workers through entryReads, routed by readRoutes.
	entryReads chan *nats.Msg
	readRoutes map[string]handler
	quit       chan struct{}
	workers    sync.WaitGroup
	// halt ends follow, which closes followed once it subscribes no more:
	// Stop waits for it before it unsubscribes.
	halt     chan struct{}
	followed chan struct{}
	reg      *registry // nil WithoutRegistry
	// reqCtx makes the context a request is served with (WithRequestContext).
	reqCtx func(context.Context, nats.Header) context.Context

	// ctx bounds the calls handlers make; cancelled when Stop gives up waiting.
	ctx    context.Context
	cancel context.CancelFunc

	mu       sync.Mutex
	stopped  bool
	inflight sync.WaitGroup
}

// Serve registers the fleet endpoints of s on nc: a NATS micro service named
// ServiceName, version Version, in micro's queue group. The jobs served are the
// ones s declares (s.Jobs()): those registered or removed after Serve are served
// or unsubscribed within moments, and the registry says so. Serve returns once
// the server has every subscription and the registry's bucket is ready (bounded by ctx, or DefaultSetupTimeout when ctx has no
// deadline), so a request sent afterwards reaches this replica. Serve may be called before or after s.Start; until s.Start
// (and after s.Stop) a trigger is refused at once with 503 (ErrUnavailable). The
// caller keeps ownership of nc and s: stop the service with Stop before stopping
// the scheduler.
//
// Serve refuses, with an error matching ErrSubjectsOverlap that names both
// subjects, a replica whose backend (a SubjectLister, such as the jetstream and
// kvlease backends) listens on subjects that overlap the fleet's own or the
// registry's: a job stream on a fleet subject would answer its requests.
func Serve(ctx context.Context, nc *nats.Conn, s *scheduler.Scheduler, opts ...Option) (*Service, error) {
	if nc == nil {
		return nil, fmt.Errorf("%w: nil connection", ErrInvalidOption)
	}
	if s == nil {
		return nil, fmt.Errorf("%w: nil scheduler", ErrInvalidOption)
	}
	c, err := newConfig(roleService, opts)
	if err != nil {
		return nil, err
	}
	log := c.log
	if log == nil {
		log = slog.New(slog.DiscardHandler)
	}
	_, pauser := s.Backend().(backend.Pauser)
	changed := s.JobsChanged() // before the jobs are read: no change is missed
	var jobs []string
	for _, j := range s.Jobs() {
		jobs = append(jobs, j.Job)
	}
	if err := checkSubjects(subjects(c.prefix), c, s.Backend(), jobs); err != nil {
		return nil, err
	}
	f := &Service{nc: nc, s: s, log: log.With("instance", s.Instance()), jobs: jobs, cfg: c, subj: subjects(c.prefix), pauser: pauser,
		routes: map[string]handler{}, subs: map[string][]*nats.Subscription{}, reads: make(chan *nats.Msg, requestQueue), controls: make(chan *nats.Msg, requestQueue),
		entryReads: make(chan *nats.Msg, requestQueue), readRoutes: map[string]handler{},
		quit: make(chan struct{}), halt: make(chan struct{}), followed: make(chan struct{}), reqCtx: c.reqCtx}
	f.ctx, f.cancel = context.WithCancel(context.Background())

	svc, err := micro.AddService(nc, micro.Config{
		Name:        ServiceName,
		Version:     Version,
		Description: "anarchon scheduled jobs: trigger, pause, resume, history, active, jobs, schedule entries, calendars",
		Metadata: map[string]string{"instance": s.Instance(), "prefix": c.prefix, "backend": s.Backend().Name(),
			"jobs": strconv.Itoa(len(jobs))},
		ErrorHandler: func(_ micro.Service, e *micro.NATSError) {
			f.log.Warn("fleet endpoint error", "subject", e.Subject, "err", e.Description)
		},
	})
	if err != nil {
		f.cancel()
		return nil, fmt.Errorf("fleet: add the micro service: %w", err)
	}
	f.svc = svc
	for range readWorkers {
		f.workers.Add(1)
		go f.work(f.reads, f.entryReads)
	}
	for range controlWorkers {
		f.workers.Add(1)
		go f.work(f.controls, nil)
	}
	if err := f.addEndpoints(); err != nil {
		f.abort()
		return nil, err
	}
	fctx, cancel := backendutil.CallContext(ctx, DefaultSetupTimeout)
	defer cancel()
	if err := nc.FlushWithContext(fctx); err != nil {
		f.abort()
		return nil, fmt.Errorf("fleet: flush the subscriptions: %w", err)
	}
	if !c.noRegistry {
		if f.reg, err = startRegistry(fctx, nc, s, c, f.log); err != nil {
			f.abort()
			return nil, err
		}
	}
	// A job registered from now on is refused at its registration when its
	// subjects would overlap the fleet's, as Serve refuses one declared before.
	f.dropCheck = s.AddJobCheck(func(job string) error {
		return checkSubjects(f.subj, c, s.Backend(), []string{job})
	})
	go f.follow(changed)
	return f, nil
}

func (f *Service) abort() {
	_ = f.svc.Stop()
	f.unsubscribe()
	close(f.quit)
	f.workers.Wait()
	f.cancel()
}

func (f *Service) unsubscribe() {
	f.routesMu.Lock()
	defer f.routesMu.Unlock()
	for _, subs := range f.subs {
		for _, sub := range subs {
			_ = sub.Unsubscribe()
		}
	}
}

// addEndpoints registers the fleet-wide endpoints on the micro service, then
// subscribes seven per job.
func (f *Service) addEndpoints() error {
	add := func(name, subject string, h handler, opts ...micro.EndpointOpt) error {
		opts = append(opts, micro.WithEndpointSubject(subject))
		mh := func(r micro.Request) { h(microRequest{r}) }
		if err := f.svc.AddEndpoint(name, micro.HandlerFunc(mh), opts...); err != nil {
			return fmt.Errorf("fleet: endpoint %s on %s: %w", name, subject, err)
		}
		return nil
	}
	// Every replica answers jobs (a scatter-gather); one replica stores a fleet-wide
	// pause or resume, as it is stored once for every replica.
	if err := add("jobs", f.subj.fleet(verbJobs), f.handle(f.jobsReply), micro.WithEndpointQueueGroupDisabled()); err != nil {
		return err
	}
	if err := add("pauseall", f.subj.fleet(verbPauseAll), f.handle(f.pauseAll)); err != nil {
		return err
	}
	if err := add("resumeall", f.subj.fleet(verbResumeAll), f.handle(f.resumeAll)); err != nil {
		return err
	}
	// Calendars are stored once for every replica: one replica answers.
	for _, e := range []struct {
		name, op string
		fn       func(context.Context, []byte) (any, error)
	}{
		{"calendars", opList, f.calendars}, {"calendar", opGet, f.calendar},
		{"putcalendar", opPut, f.putCalendar}, {"deletecalendar", opDelete, f.deleteCalendar},
	} {
		if err := add(e.name, f.subj.calendar(e.op), f.handle(e.fn)); err != nil {
			return err
		}
	}
	for _, j := range f.jobs {
		if err := f.serveJob(j); err != nil {
			return err
		}
	}
	return nil
}

// serveJob subscribes the nine endpoints of job.
func (f *Service) serveJob(job string) error {
	for _, e := range []struct {
		verb  string
		queue chan *nats.Msg
		h     handler
	}{
		{verbTrigger, f.controls, f.trigger(job)},
		{verbBackfill, f.controls, f.backfill(job)},
		{verbPause, f.controls, f.handle(f.pause(job))},
		{verbResume, f.controls, f.handle(f.resume(job))},
		{verbHistory, f.reads, f.handle(f.history(job))},
		{verbActive, f.reads, f.handle(f.active(job))},
		{verbPreview, f.reads, f.handle(f.preview(job))},
		{verbWhy, f.reads, f.handle(f.why(job))},
	} {
		subject := f.subj.job(e.verb, job)
		if err := f.subscribeJob(job, subject, e.queue, e.h); err != nil {
			return fmt.Errorf("fleet: subscribe %s: %w", subject, err)
		}
	}
	subject := f.subj.job(verbEntries, job) + ".*"
	reads := map[string]handler{opList: f.handle(f.entries(job)), opGet: f.handle(f.entry(job))}
	changes := map[string]handler{opAdd: f.handle(f.addEntry(job)), opUpdate: f.handle(f.updateEntry(job)),
		opRemove: f.handle(f.removeEntry(job)), opTrigger: f.triggerEntry(job)}
	f.routesMu.Lock()
	f.readRoutes[subject] = f.byOp(reads, nil)
	f.routesMu.Unlock()
	if err := f.subscribeJob(job, subject, f.controls, f.byOp(changes, reads)); err != nil {
		return fmt.Errorf("fleet: subscribe %s: %w", subject, err)
	}
	return nil
}

// unserveJob drains the subscriptions of job's endpoints: a request the server
// sent before it had the unsubscription still arrives, and is answered 503
// (ErrUnavailable: ask again, to reach a replica that declares it), never
// dropped unanswered.
func (f *Service) unserveJob(job string) {
	f.routesMu.Lock()
	subs := f.subs[job]
	delete(f.subs, job)
	for _, sub := range subs {
		delete(f.routes, sub.Subject)
		delete(f.readRoutes, sub.Subject)
	}
	f.routesMu.Unlock()
	for _, sub := range subs {
		if err := sub.Drain(); err != nil {
			_ = sub.Unsubscribe()
		}
	}
}

// follow serves the jobs the scheduler registers after Serve and stops serving
// the ones it removes, until the service stops.
func (f *Service) follow(changed <-chan struct{}) {
	defer close(f.followed)
	for {
		select {
		case <-f.halt:
			return
		case <-changed:
		}
		changed = f.s.JobsChanged()
		f.syncJobs()
	}
}

// syncJobs makes the served jobs the scheduler's.
func (f *Service) syncJobs() {
	infos := f.s.Jobs()
	declared := make(map[string]bool, len(infos))
	for _, j := range infos {
		declared[j.Job] = true
	}
	served := make(map[string]bool, len(f.jobs))
	kept := f.jobs[:0]
	for _, job := range f.jobs {
		if declared[job] {
			served[job] = true
			kept = append(kept, job)
			continue
		}
		f.unserveJob(job)
		f.log.Info("fleet endpoints of a removed job unsubscribed", "job", job)
	}
	f.jobs = kept
	for _, j := range infos {
		job := j.Job
		if served[job] {
			continue
		}
		select {
		case <-f.halt: // stopping: Stop unsubscribes what is served
			return
		default:
		}
		// AddJobCheck refuses an overlapping job at its registration; this
		// catches one registered while Serve was starting.
		err := checkSubjects(f.subj, f.cfg, f.s.Backend(), []string{job})
		if err == nil {
			err = f.serveJob(job)
		}
		if err != nil {
			f.unserveJob(job)
			f.log.Error("job registered after Serve not served", "job", job, "err", err)
			f.s.Report(scheduler.Event{Kind: scheduler.EventBackendError, Job: job, Op: "fleet_serve", Err: err})
			continue
		}
		f.jobs = append(f.jobs, job)
		f.log.Info("fleet endpoints of a job registered after Serve subscribed", "job", job)
	}
	if f.reg != nil {
		f.reg.redeclare(infos)
	}
}

// Stop stops answering (the endpoints' subscriptions are drained, and the server has
// the unsubscriptions when Stop returns, so a later request goes to another replica)
// and waits for the requests being handled, including triggered runs, until ctx ends; then it cancels
// the handlers' backend calls and returns ctx's error. A triggered run belongs to
// the scheduler: it goes on until it ends or the scheduler's Stop cancels it, so
// stop the service first, then the scheduler. A second Stop returns nil.
// stopWriteTimeout bounds each write of Stop: a server that is gone must not
// hold the stop of the scheduler that follows.
const stopWriteTimeout = time.Second

func (f *Service) Stop(ctx context.Context) error {
	f.mu.Lock()
	if f.stopped {
		f.mu.Unlock()
		return nil
	}
	f.stopped = true
	f.mu.Unlock()
	f.dropCheck()
	// No job is subscribed once Stop has begun to unsubscribe.
	close(f.halt)
	<-f.followed
	err := f.svc.Stop()
	f.unsubscribe()
	if f.reg != nil {
		err = errors.Join(err, f.reg.stop(ctx))
	}
	// Once the server has the unsubscriptions, a request sent after Stop returns
	// goes to another replica (or gets no-responders), never to this one.
	fctx, cancel := context.WithTimeout(ctx, stopWriteTimeout)
	defer cancel()
	if ferr := f.nc.FlushWithContext(fctx); ferr != nil && !errors.Is(ferr, nats.ErrConnectionClosed) {
		err = errors.Join(err, fmt.Errorf("fleet: stop: flush the unsubscriptions: %w", ferr))
	}
	close(f.quit) // the workers answer what is still queued (503) and return
	done := make(chan struct{})
	go func() {
		f.workers.Wait()
		// An entry read a control worker handed off after the read workers
		// returned: answered 503 too.
		for drained := false; !drained; {
			select {
			case m := <-f.entryReads:
				f.route(m, f.readRoutes)
			default:
				drained = true
			}
		}
		f.inflight.Wait()
		close(done)
	}()
	select {
	case <-done:
	case <-ctx.Done():
		// The handlers' calls end with f.ctx; a trigger still waiting for its run
		// ends when the run does (at the latest at the scheduler's Stop).
		err = errors.Join(err, fmt.Errorf("fleet: stop: %w", ctx.Err()))
	}
	f.cancel()
	return err
}

// begin counts a request in flight, or reports that the service is stopping.
func (f *Service) begin() bool {
	f.mu.Lock()
	defer f.mu.Unlock()
	if f.stopped {
		return false
	}
	f.inflight.Add(1)
	return true
}

// byOp routes a request on a job's entry subject (<prefix>.ENTRIES.<job>.*) by
// its last token, the op: to ops, or (a read arriving with the controls) to the
// read workers for reads; another op is a bad request.
func (f *Service) byOp(ops, reads map[string]handler) handler {
	known := slices.Sorted(maps.Keys(ops))
	known = append(known, slices.Sorted(maps.Keys(reads))...)
	unknown := f.handle(func(context.Context, []byte) (any, error) {
		return nil, badRequest("no such operation: the last token of the subject is one of %s", strings.Join(known, ", "))
	})
	return func(req request) {
		subject := req.Subject()
		op := subject[strings.LastIndexByte(subject, '.')+1:]
		switch {
		case ops[op] != nil:
			ops[op](req)
		case reads[op] != nil:
			f.handOff(req)
		default:
			unknown(req)
		}
	}
}

// handOff queues an entry read that arrived with the controls for the read
// workers, so that reads never hold a control worker during a backend call.
func (f *Service) handOff(req request) {
	if f.ignored(req) {
		return
	}
	if nr, ok := req.(natsRequest); ok {
		select {
		case f.entryReads <- nr.m:
			return
		default:
		}
	}
	f.fail(req, &replyError{code: CodeUnavailable, msg: "too many reads wait on this replica: ask again"})
}
