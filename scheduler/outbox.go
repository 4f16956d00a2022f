package scheduler

import (
	"context"
	"errors"
	"math/rand/v2"
	"sync"
	"time"

	"github.com/anarchon/anarchon/backend"
)

// The outbox keeps the writes that complete a slot whose first try failed: a
// settle, or the records a store without Settler gets beside it. It sends them
// again until stored, oldest first per job, with a growing delay. It retries while
// the scheduler runs and while Stop drains it. A write is given up past its history
// TTL, when the backend refuses it as invalid, or when MaxPendingRecords wait
// already. Each is logged and reported.

// MaxPendingRecords bounds the records one scheduler keeps to write again. Past it,
// a record whose write fails is dropped (and reported), so that a store down for a
// long time cannot grow the process without bound.
const MaxPendingRecords = 10000

// outboxMaxDelay caps the delay between two tries of one job's oldest record.
const outboxMaxDelay = 5 * time.Second

// outboxDelay is the delay before the try after attempt failed ones: doubling
// from 100ms up to outboxMaxDelay, the upper half of it at random.
func outboxDelay(attempt int) time.Duration {
	d := min(100*time.Millisecond<<min(attempt, 6), outboxMaxDelay)
	return d/2 + rand.N(d/2)
}

// outboxWorkers bounds how many jobs' records are written again at once.
const outboxWorkers = 16

// pendingWrite is one record to write again. write is repeat-safe.
type pendingWrite struct {
	j     *job
	slot  time.Time
	op    string
	write func(ctx context.Context) error
	// until is when the record stops being worth writing (zero: never).
	until time.Time
}

type outbox struct {
	mu      sync.Mutex
	queues  map[string][]*pendingWrite // job → records, oldest first
	working map[string]bool            // job → its worker runs
	n       int
	workers sync.WaitGroup
	sem     chan struct{}
	ctx     context.Context // ends the workers; cancelled by drain
	cancel  context.CancelFunc
	idle    chan struct{} // closed and replaced when the last record is written
}

func (o *outbox) init() {
	o.queues = map[string][]*pendingWrite{}
	o.working = map[string]bool{}
	o.sem = make(chan struct{}, outboxWorkers)
	o.ctx, o.cancel = context.WithCancel(context.Background())
	o.idle = make(chan struct{})
}

// complete writes a record that completes a slot: once now, and again from the
// outbox until stored when that fails; at once to the outbox when records of the
// job wait there already.
func (s *Scheduler) complete(j *job, slot time.Time, op string, until time.Time, write func(ctx context.Context) error) {
	if s.out.waiting(j.name) {
		// Behind the job's records that wait: in their order, and without a try
		// that the store is not answering.
		s.later(j, slot, op, until, write)
		return
	}
	ctx, cancel := s.writeCtx()
	err := write(ctx)
	cancel()
	if err == nil {
		return
	}
	s.backendError(j, slot, opOf(err, op), err)
	if permanent(err) {
		s.log.Error("record not stored: the backend refuses it", j.logAttr(), "slot", slot, "op", op, "err", err)
		return
	}
	s.later(j, slot, op, until, write)
}

// later leaves a write to the outbox, for a caller whose own tries just failed.
func (s *Scheduler) later(j *job, slot time.Time, op string, until time.Time, write func(ctx context.Context) error) {
	s.out.add(s, &pendingWrite{j: j, slot: slot, op: op, write: write, until: until})
}

// failedOp names the call that failed in a write of more than one call, for the
// backend error reported.
type failedOp struct {
	op  string
	err error
}

func (e *failedOp) Error() string { return e.err.Error() }
func (e *failedOp) Unwrap() error { return e.err }

// opOf is the call err names, or op.
func opOf(err error, op string) string {
	var f *failedOp
	if errors.As(err, &f) {
		return f.op
	}
	return op
}

// permanent reports whether a failed write would fail the same way again.
func permanent(err error) bool {
	return errors.Is(err, backend.ErrInvalidClaim) || errors.Is(err, ErrInvalidJobName)
}

func (o *outbox) add(s *Scheduler, w *pendingWrite) {
	o.mu.Lock()
	if o.n >= MaxPendingRecords {
		n := o.n
		o.mu.Unlock()
		s.log.Error("record dropped: too many records wait to be written again", w.j.logAttr(), "slot", w.slot, "op", w.op, "pending", n)
		s.emit(Event{Kind: EventBackendError, Job: w.j.name, Slot: w.slot, Op: w.op,
			Err: errors.New("scheduler: record dropped: MaxPendingRecords records wait to be written again")})
		return
	}
	o.n++
	o.queues[w.j.name] = append(o.queues[w.j.name], w)
	start := !o.working[w.j.name]
	o.working[w.j.name] = true
	o.mu.Unlock()
	if start {
		o.workers.Add(1)
		go o.work(s, w.j.name)
	}
}

// work writes one job's records, oldest first, until none is left or the outbox is
// closed.
func (o *outbox) work(s *Scheduler, job string) {
	defer o.workers.Done()
	for attempt := 0; ; {
		o.mu.Lock()
		q := o.queues[job]
		if len(q) == 0 {
			delete(o.queues, job)
			delete(o.working, job) // under the lock that add looks at it under
			o.mu.Unlock()
			return
		}
		w := q[0]
		o.mu.Unlock()

		if !w.until.IsZero() && s.clock.Now().After(w.until) {
			s.log.Warn("record given up: past its history retention", "job", job, "slot", w.slot, "op", w.op)
			o.pop(job)
			attempt = 0
			continue
		}
		select {
		case o.sem <- struct{}{}:
		case <-o.ctx.Done():
			o.quit(job)
			return
		}
		ctx, cancel := s.callCtx(o.ctx)
		err := w.write(ctx)
		cancel()
		<-o.sem
		switch {
		case err == nil:
			o.pop(job)
			attempt = 0
			continue
		case o.ctx.Err() != nil:
			o.quit(job)
			return
		case permanent(err):
			s.log.Error("record not stored: the backend refuses it", "job", job, "slot", w.slot, "op", w.op, "err", err)
			o.pop(job)
			attempt = 0
			continue
		}
		s.backendError(w.j, w.slot, opOf(err, w.op), err)
		d := outboxDelay(attempt)
		attempt++
		t := s.clock.NewTimer(d)
		select {
		case <-t.C():
		case <-o.ctx.Done():
			t.Stop()
			o.quit(job)
			return
		}
	}
}

// quit notes that job's worker stopped with records left (the outbox closed).
func (o *outbox) quit(job string) {
	o.mu.Lock()
	delete(o.working, job)
	o.mu.Unlock()
}

// waiting reports whether records of job wait to be written again.
func (o *outbox) waiting(job string) bool {
	o.mu.Lock()
	defer o.mu.Unlock()
	return len(o.queues[job]) > 0
}

// pop removes job's oldest record, written or given up.
func (o *outbox) pop(job string) {
	o.mu.Lock()
	defer o.mu.Unlock()
	q := o.queues[job]
	if len(q) == 0 {
		return
	}
	q[0] = nil
	o.queues[job] = q[1:]
	o.n--
	if o.n == 0 {
		close(o.idle)
		o.idle = make(chan struct{})
	}
}

// pending returns how many records wait, and a channel closed once none does.
func (o *outbox) pending() (int, <-chan struct{}) {
	o.mu.Lock()
	defer o.mu.Unlock()
	return o.n, o.idle
}

// drain waits until every record is written or ctx ends, then stops the workers.
// It returns how many records were left unwritten.
func (o *outbox) drain(ctx context.Context) int {
	if n, idle := o.pending(); n > 0 {
		select {
		case <-idle:
		case <-ctx.Done():
		}
	}
	o.cancel()
	o.workers.Wait()
	n, _ := o.pending()
	return n
}
