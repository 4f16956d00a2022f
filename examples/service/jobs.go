package main

import (
	"context"
	"fmt"
	"log/slog"
	"math/rand/v2"
	"time"

	"github.com/anarchon/anarchon/scheduler"
)

// register declares the service's jobs. Every replica declares the same ones; the
// scheduler makes each slot run on one of them.
func register(s *scheduler.Scheduler, c config, log *slog.Logger) error {
	// tick: short work every interval. Jitter spreads the replicas' claims over the
	// first fifth of the interval; a run that hangs is cancelled after half of it.
	err := s.Every("tick", c.interval, func(ctx context.Context, run scheduler.Run) error {
		return work(ctx, c.interval/20+rand.N(c.interval/20))
	}, scheduler.WithJitter(c.interval/5), scheduler.WithTimeout(c.interval/2))
	if err != nil {
		return err
	}

	// report: a cron job read in a named zone (UTC unless the job says otherwise,
	// never the host's zone, so replicas on differently configured hosts agree). A
	// slot may start up to 5 s late; past that it is recorded as late. (The default,
	// a minute, would make a replica that starts run every slot of the last minute.)
	err = s.Cron("report", c.cron, func(ctx context.Context, run scheduler.Run) error {
		log.InfoContext(ctx, "report", "instance", run.Instance, "local_slot", run.Slot.In(c.zone).Format("2006-01-02 15:04:05 MST"))
		return work(ctx, 10*time.Millisecond)
	}, scheduler.WithLocation(c.zone), scheduler.WithMaxLate(5*time.Second))
	if err != nil {
		return err
	}

	// flaky: fails on every third slot. The decision depends on the slot only, so it
	// is the same on whichever replica runs it, and the errors are easy to find in
	// the history and in anarchon_runs_total{status="error"}.
	err = s.Every("flaky", c.interval, func(ctx context.Context, run scheduler.Run) error {
		if n := slotNumber(run.Slot, c.interval); n%3 == 0 {
			return fmt.Errorf("slot %d is a multiple of 3: failing on purpose", n)
		}
		return work(ctx, c.interval/20)
	})
	if err != nil {
		return err
	}

	// retried: every 6 intervals, a slot whose first two attempts fail; the third
	// succeeds. Each retry is stored: any replica may run it, also when the replica
	// that failed is gone.
	// -retried-run makes every attempt work that long first, so that an attempt
	// can be caught mid-run.
	err = s.Every("retried", 6*c.interval, func(ctx context.Context, run scheduler.Run) error {
		if err := work(ctx, c.retriedRun); err != nil {
			return err
		}
		if run.Attempt < 3 {
			return fmt.Errorf("attempt %d fails on purpose", run.Attempt)
		}
		return work(ctx, c.interval/20)
	}, scheduler.WithRetry(scheduler.RetryPolicy{Attempts: 3, Backoff: c.interval}))
	if err != nil {
		return err
	}

	// compact: a run lasts 2.5 intervals and overlap is forbidden, so the two slots
	// that fall inside a run are skipped (and recorded as skipped). The run holds a
	// lease; if its replica stops, the lease is released and another replica takes
	// the run over (attempt 2).
	err = s.Every("compact", c.interval, func(ctx context.Context, run scheduler.Run) error {
		// run.Token and run.Fence are the fencing token: pass them to whatever the job
		// writes to, so a replaced holder's late writes can be refused.
		return work(ctx, 5*c.interval/2)
	}, scheduler.WithOverlap(scheduler.OverlapSkip))
	if err != nil {
		return err
	}

	// refresh: every 4 intervals, a run that would last 6; the next slot asks it to
	// end (on whichever replica runs it) and starts once it has, so the newest
	// refresh always wins. The replaced run is recorded cancelled, naming who asked.
	err = s.Every("refresh", 4*c.interval, func(ctx context.Context, run scheduler.Run) error {
		return work(ctx, 6*c.interval)
	}, scheduler.WithOverlap(scheduler.OverlapCancelOther))
	if err != nil {
		return err
	}

	// digest: every 2 intervals, a run that lasts 3. The slot due while a run goes
	// on is stored buffered and runs once that run ended, on whichever replica
	// claims it first; a slot due while one is buffered already is skipped.
	err = s.Every("digest", 2*c.interval, func(ctx context.Context, run scheduler.Run) error {
		return work(ctx, 3*c.interval)
	}, scheduler.WithOverlap(scheduler.OverlapBufferOne))
	if err != nil {
		return err
	}

	// warmup: runs five slots across the fleet and then ends: every later slot is
	// recorded limit. The count is in the store, so restarting every replica does
	// not run it again.
	err = s.Every("warmup", c.interval, func(ctx context.Context, run scheduler.Run) error {
		return work(ctx, c.interval/20)
	}, scheduler.WithMaxRuns(5))
	if err != nil {
		return err
	}

	// tenants: no schedule of its own; its schedule entries (one per tenant, added
	// at runtime with AddEntry, `anarchon schedule add`, or -seed-entries) are
	// stored in the backend and run by whichever replica claims each slot. The run
	// says which entry it is and carries the entry's payload.
	err = s.Declare("tenants", func(ctx context.Context, run scheduler.Run) error {
		log.DebugContext(ctx, "tenant run", "entry", run.Entry, "payload", string(run.Payload))
		return work(ctx, c.tenantRun)
	}, scheduler.WithMaxLate(5*time.Second), scheduler.WithJitter(time.Second))
	if err != nil {
		return err
	}

	// -extra-jobs: more jobs by name; a name is only a name (one called history
	// is just a job, and does not reach the fleet's history requests).
	for _, name := range c.extra {
		if err := s.Every(name, c.interval, func(ctx context.Context, run scheduler.Run) error {
			return work(ctx, c.interval/20)
		}); err != nil {
			return err
		}
	}
	return nil
}

// slotNumber is the slot's index since the Unix epoch: Every slots are multiples of
// the interval.
func slotNumber(slot time.Time, interval time.Duration) int64 {
	return slot.UnixMilli() / interval.Milliseconds()
}

// work stands for a job's real work: it takes d, or returns early with the reason
// when ctx ends (timeout, stop, lost lease).
func work(ctx context.Context, d time.Duration) error {
	t := time.NewTimer(d)
	defer t.Stop()
	select {
	case <-t.C:
		return nil
	case <-ctx.Done():
		return context.Cause(ctx)
	}
}
