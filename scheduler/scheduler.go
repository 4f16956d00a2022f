package scheduler

import (
	"context"
	"log/slog"
	"sync"
	"sync/atomic"
	"time"

	"github.com/anarchon/anarchon/backend"
)

// Handler runs one slot of a job. Its context is cancelled on timeout, when the run
// loses its lease, and on a hard stop; context.Cause tells which.
type Handler func(ctx context.Context, run Run) error

// Run is what a handler is told about the run it executes.
type Run struct {
	Job  string
	Slot time.Time
	// Nominal is the slot before WithSpread moved it: Slot, without a spread
	// and for a manual run.
	Nominal  time.Time
	Instance string
	// Token is unique to this attempt. With Fence it is the fencing token: pass it to
	// systems you write to, so they can refuse a holder that has been replaced.
	Token string
	// Fence grows with every new holder of the same slot (0 without leases).
	Fence   uint64
	Attempt int
	Manual  bool
	// Backfill says the run was asked for by Scheduler.Backfill: a past slot run
	// now.
	Backfill bool
	// Previous is the instance whose attempt this one took over, on a takeover
	// (attempt 2 and on, after a lease expired or was released unfinished); empty
	// otherwise.
	Previous string
	// Entry and Payload are the schedule entry's ID and payload, on a run of an
	// entry (AddEntry); empty otherwise.
	Entry   string
	Payload []byte
}

// Scheduler runs jobs so that each slot runs on exactly one of the instances sharing
// a backend.
type Scheduler struct {
	backend  backend.Backend
	runs     backend.RunStore // nil without leases
	store    slotStore        // what the claim loop asks (store.go)
	instance string
	log      *slog.Logger
	clock    Clock
	onEvent  func(Event)
	callTO   time.Duration
	maxSkew  time.Duration
	// marks bounds the history reads of starting jobs in flight (missed.go).
	marks chan struct{}
	// middleware wraps every job's handler at registration (Config.Middleware).
	middleware []Middleware

	mu   sync.Mutex
	jobs map[string]*job
	// entries are the schedule entries this instance follows.
	entries *entrySet
	// seen is what this instance saw of its entries' runs (EntriesSummary).
	seen  seenRuns
	order []*job
	state int // stateNew, stateStarting, stateStarted, stateStopped
	// jobsChanged is closed at the next registration or removal (JobsChanged).
	jobsChanged chan struct{}
	// checks refuse a registration (AddJobCheck), in the order added.
	checks []*func(job string) error
	inited bool

	loopCtx    context.Context // stops loops, backups and new claims
	stopLoops  context.CancelFunc
	loops      sync.WaitGroup
	handlers   sync.WaitGroup // running slots (claims, handlers, results)
	hardCtx    context.Context
	hardCancel context.CancelCauseFunc

	// writesBy, once Stop has a deadline, bounds the writes after the handlers
	// (Unix nanoseconds; 0: none).
	writesBy atomic.Int64

	pauses pauses // the stored pauses, as the backend's watch last told them
	// calendars are the stored calendars, as the backend's watch last told them.
	calendars calendarView
	out       outbox // records that complete a slot, to write again
	// judged are the slots' deadlines this instance will judge (deadline.go).
	judged judgements
	// turns share out the slots among the members (Config.Turns); nil without.
	turns *turns
	// adopting: the runs being taken over beside a caller (under mu).
	adopting map[adoptKey]bool
}

const (
	stateNew = iota
	// stateStarting: Start prepares the jobs it found; a job registered
	// meanwhile is prepared by its registration.
	stateStarting
	stateStarted
	stateStopped
)

type job struct {
	name     string
	sched    Schedule
	handler  Handler
	cfg      jobConfig
	limits   backend.JobLimits
	interval time.Duration
	// manual counts the manual runs of the job in progress on this instance.
	manual atomic.Int32
	// lastManual is the slot (Unix ms) of this instance's last manual run.
	lastManual atomic.Int64
	// orphanCheck is set while checkOrphan looks at the job's buffered slots.
	orphanCheck atomic.Bool
	// ended is done once the job's run limit was reached (WithMaxRuns): its
	// loop ends; end ends it.
	ended context.Context
	end   context.CancelFunc
	// gone is done once the job was removed from this instance (RemoveJob):
	// its loop, catch-up, claims and stand-bys here end; running slots finish.
	gone   context.Context
	remove context.CancelFunc
	// limitHit is set by the first claim that told this instance the job's
	// run limit was reached.
	limitHit atomic.Bool
	// owedFrom is the oldest slot (Unix ms) this instance gave up claiming, the
	// store unreachable for longer than it remembers a slot; 0: none. The next
	// answer of the store records what it owes (recordOwed).
	owedFrom atomic.Int64
	// entry is set on the run view of a schedule entry (entryJob): name is
	// then the entry's run name.
	entry *entryRef
	// judgedSince is the newest slot (Unix ms) of the job's history at Start:
	// catch-up's slots after it are judged (WithDeadline), earlier ones, and
	// all of a new job's, are not (math.MaxInt64 until Start reads it).
	judgedSince atomic.Int64
	// deadlineDropped says why an entry runs without its job's deadline: it
	// does not fit the entry's schedule (checkDeadline).
	deadlineDropped error
}

// Instance returns this scheduler's instance ID.
func (s *Scheduler) Instance() string { return s.instance }

// Backend returns the scheduler's backend.
func (s *Scheduler) Backend() backend.Backend { return s.backend }

func (s *Scheduler) callCtx(ctx context.Context) (context.Context, context.CancelFunc) {
	if _, ok := ctx.Deadline(); ok {
		return context.WithCancel(ctx)
	}
	return context.WithTimeout(ctx, s.callTO)
}

// Report passes an event found by a plug-in (for example EventJobConflict, from
// fleet's registry, which sees the other replicas' declarations) to Config.OnEvent,
// stamped with this instance and, when e.At is zero, the scheduler's clock.
func (s *Scheduler) Report(e Event) { s.emit(e) }

func (s *Scheduler) emit(e Event) {
	if s.onEvent == nil {
		return
	}
	e.Instance = s.instance
	if job, id, ok := backend.SplitEntryRunName(e.Job); ok {
		e.Job, e.Entry = job, id
	}
	if e.At.IsZero() {
		e.At = s.clock.Now()
	}
	defer func() {
		if r := recover(); r != nil {
			s.log.Error("event hook panicked", "panic", r)
		}
	}()
	s.onEvent(e)
}

func (s *Scheduler) backendError(j *job, slot time.Time, op string, err error) {
	s.log.Warn("backend call failed", j.logAttr(), "slot", slot, "op", op, "err", err)
	s.emit(Event{Kind: EventBackendError, Job: j.name, Slot: slot, Op: op, Err: err})
}
