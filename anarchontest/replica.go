package anarchontest

import (
	"context"
	"fmt"
	"log/slog"
	"sync"
	"time"

	"github.com/anarchon/anarchon/scheduler"
)

// A Replica is one place of the fleet: a host that runs one scheduler at a
// time, under one instance name. Its host's faults (Partition, Skew,
// LoseAnswers) outlast a restart; its process's (Kill, Freeze) end with it.
type Replica struct {
	f    *Fleet
	name string

	mu          sync.Mutex
	partitioned bool
	cut         chan struct{} // closed when the replica is partitioned
	skew        time.Duration
	losses      []loss
	proc        *proc // the process running now, or the last one
}

// Name is the replica's instance name.
func (r *Replica) Name() string { return r.name }

// String returns the replica's name.
func (r *Replica) String() string { return r.name }

// Scheduler is the scheduler of the replica's current process (after Restart,
// the new one).
func (r *Replica) Scheduler() *scheduler.Scheduler { return r.current().sched }

// Up reports whether the replica's process runs: started, not stopped, not
// killed.
func (r *Replica) Up() bool {
	p := r.current()
	return !p.dead() && !p.isStopped()
}

func (r *Replica) current() *proc {
	r.mu.Lock()
	defer r.mu.Unlock()
	return r.proc
}

// Kill crashes the replica's process. From then on its store calls hang until
// their deadline and fail with ErrKilled, its watches end, its handlers'
// contexts are cancelled with ErrKilled as their cause, and it reports no
// event and logs nothing. It never stops gracefully: its runs are taken over
// once their leases expire. Restart starts a fresh process in its place.
func (r *Replica) Kill() {
	r.current().kill()
}

// Freeze stops the replica's process for d of the fleet's time, as a SIGSTOP
// or a long pause of a virtual machine does. Its clock stands still, its
// timers do not fire, it sends no store call and reads no answer, and no
// handler starts or is seen to return. When it thaws its clock jumps to the
// present and what waited goes on at once. Its handlers' own code cannot be
// stopped: it runs on, and the scheduler sees it return after the thaw. A
// second Freeze during one ends at the later of the two ends.
func (r *Replica) Freeze(d time.Duration) {
	r.current().freeze(d)
}

// Partition cuts the replica off from the store until Heal: each of its store
// calls fails at once with ErrPartitioned, and its watches end.
func (r *Replica) Partition() {
	r.mu.Lock()
	defer r.mu.Unlock()
	if !r.partitioned {
		r.partitioned = true
		close(r.cut)
	}
}

// Heal ends the replica's partition.
func (r *Replica) Heal() {
	r.mu.Lock()
	defer r.mu.Unlock()
	if r.partitioned {
		r.partitioned = false
		r.cut = make(chan struct{})
	}
}

// Skew sets the replica's clock to the fleet's time plus d (d may be
// negative). Lease times are judged by the store's clock, which is the
// fleet's; slot lateness by each replica's own. Skew within the scheduler's
// MaxClockSkew (scheduler.DefaultMaxClockSkew unless the config sets it)
// still runs every slot once.
func (r *Replica) Skew(d time.Duration) {
	r.mu.Lock()
	defer r.mu.Unlock()
	r.skew = d
}

// LoseAnswers loses the answers of the replica's next n store calls of ops,
// or of its next n writes (Op.Write) when ops is empty: the store applies
// each call, and the call then fails with ErrAnswerLost. A watch whose answer
// is lost fails as it starts: a running watch is not cut, and the order waits
// for the replica's next watch. Orders add up, the older served first.
func (r *Replica) LoseAnswers(n int, ops ...Op) {
	if n <= 0 {
		return
	}
	r.mu.Lock()
	defer r.mu.Unlock()
	r.losses = append(r.losses, loss{n: n, ops: append([]Op(nil), ops...)})
}

// Stop stops the replica's process gracefully (scheduler.Stop with ctx): its
// handlers have until ctx ends to finish, and the runs they leave unfinished
// are handed over for backups to take over at once. A killed process is
// reaped instead; a stopped one is left as it is.
func (r *Replica) Stop(ctx context.Context) error {
	return r.current().stop(ctx)
}

// Restart stops the replica's process as Stop does, with ctx, and starts a
// fresh one in its place: a new scheduler under the replica's name, with the
// fleet's Setup. A replica cut off from the store cannot start, nor one whose
// answer to Init or PrepareJob is lost (LoseAnswers): Restart returns why, and
// the replica stays down until a later Restart.
func (r *Replica) Restart(ctx context.Context) error {
	if err := r.Stop(ctx); err != nil {
		return err
	}
	return r.start(ctx)
}

func (r *Replica) isPartitioned() bool {
	r.mu.Lock()
	defer r.mu.Unlock()
	return r.partitioned
}

// cutCh returns a channel closed when the replica is partitioned; false
// while it is.
func (r *Replica) cutCh() (<-chan struct{}, bool) {
	r.mu.Lock()
	defer r.mu.Unlock()
	return r.cut, !r.partitioned
}

func (r *Replica) skewNow() time.Duration {
	r.mu.Lock()
	defer r.mu.Unlock()
	return r.skew
}

// start starts a fresh process on the replica.
func (r *Replica) start(ctx context.Context) error {
	f := r.f
	p := &proc{r: r, reaped: make(chan struct{})}
	p.killCtx, p.killCause = context.WithCancelCause(context.Background())
	p.fr.init()
	cfg := f.cfg.Scheduler
	cfg.Backend = &view{p: p, mem: f.mem}
	cfg.Instance = r.name
	cfg.Clock = procClock{p: p}
	user := cfg.OnEvent
	cfg.OnEvent = func(e scheduler.Event) {
		if p.dead() {
			return // a dead process reports nothing
		}
		f.events.add(e)
		if user != nil {
			user(e)
		}
	}
	cfg.Middleware = append([]scheduler.Middleware{p.handlers}, cfg.Middleware...)
	if cfg.Logger != nil {
		cfg.Logger = slog.New(quietWhenDead{p: p, h: cfg.Logger.Handler()})
	}
	s, err := scheduler.New(cfg)
	if err != nil {
		return fmt.Errorf("anarchontest: replica %s: %w", r.name, err)
	}
	if err := f.cfg.Setup(s); err != nil {
		return fmt.Errorf("anarchontest: replica %s: setup: %w", r.name, err)
	}
	p.sched = s
	r.mu.Lock()
	r.proc = p
	r.mu.Unlock()
	if err := s.Start(ctx); err != nil {
		p.setStopped()
		return fmt.Errorf("anarchontest: replica %s: %w", r.name, err)
	}
	return nil
}

// proc is one process of a replica: one scheduler, from its start to its
// stop or its death.
type proc struct {
	r     *Replica
	sched *scheduler.Scheduler
	fr    freezer

	// killCtx is cancelled, with ErrKilled, when the process is killed.
	killCtx   context.Context
	killCause context.CancelCauseFunc
	// reaped is closed once a killed process is reaped: its hanging calls
	// return.
	reaped   chan struct{}
	reapOnce sync.Once

	mu      sync.Mutex
	stopped bool
}

func (p *proc) dead() bool { return p.killCtx.Err() != nil }

func (p *proc) kill() {
	if !p.isStopped() {
		p.killCause(ErrKilled)
	}
}

func (p *proc) isStopped() bool {
	p.mu.Lock()
	defer p.mu.Unlock()
	return p.stopped
}

// setStopped marks the process stopped; false if it was already.
func (p *proc) setStopped() bool {
	p.mu.Lock()
	defer p.mu.Unlock()
	was := p.stopped
	p.stopped = true
	return !was
}

// hang waits as a call to a dead process does: until the caller gives up, or
// the process is reaped.
func (p *proc) hang(ctx context.Context) {
	select {
	case <-ctx.Done():
	case <-p.reaped:
	}
}

// stop stops the process: gracefully when it runs, by reaping when it was
// killed.
func (p *proc) stop(ctx context.Context) error {
	if p.dead() {
		p.reap()
		return nil
	}
	if !p.setStopped() {
		return nil
	}
	p.thaw()
	if err := p.sched.Stop(ctx); err != nil {
		return fmt.Errorf("anarchontest: replica %s: %w", p.r.name, err)
	}
	return nil
}

// reap ends what is left of a killed process: its hanging calls fail at
// once, and its scheduler is stopped with no time to finish anything.
func (p *proc) reap() {
	if !p.setStopped() {
		return
	}
	p.reapOnce.Do(func() { close(p.reaped) })
	p.thaw()
	// A deadline long past: a dead process has no time left to write anything.
	ctx, cancel := context.WithDeadline(context.Background(), time.Now().Add(-time.Minute))
	defer cancel()
	_ = p.sched.Stop(ctx) // what it did not store is lost with it
}

// handlers is the process's outermost middleware: a killed process cancels
// its handlers, and a frozen one starts none and sees none return.
func (p *proc) handlers(next scheduler.Handler) scheduler.Handler {
	return func(ctx context.Context, run scheduler.Run) error {
		p.waitThaw()
		if p.dead() {
			return context.Cause(p.killCtx)
		}
		ctx, cancel := context.WithCancelCause(ctx)
		defer cancel(nil)
		defer context.AfterFunc(p.killCtx, func() { cancel(context.Cause(p.killCtx)) })()
		err := next(ctx, run)
		p.waitThaw()
		return err
	}
}

// quietWhenDead is a log handler that drops what a killed process logs.
type quietWhenDead struct {
	p *proc
	h slog.Handler
}

func (q quietWhenDead) Enabled(ctx context.Context, l slog.Level) bool {
	return !q.p.dead() && q.h.Enabled(ctx, l)
}

func (q quietWhenDead) Handle(ctx context.Context, rec slog.Record) error {
	if q.p.dead() {
		return nil
	}
	return q.h.Handle(ctx, rec)
}

func (q quietWhenDead) WithAttrs(as []slog.Attr) slog.Handler {
	return quietWhenDead{p: q.p, h: q.h.WithAttrs(as)}
}

func (q quietWhenDead) WithGroup(name string) slog.Handler {
	return quietWhenDead{p: q.p, h: q.h.WithGroup(name)}
}
