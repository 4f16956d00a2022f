package main

import (
	"context"
	"errors"
	"fmt"
	"math/rand/v2"
	"strings"
	"sync/atomic"
	"time"

	"github.com/anarchon/anarchon/embedded"
	"github.com/anarchon/anarchon/scheduler"
)

// takeoverLease is the lease of the takeover section's job.
const takeoverLease = 2 * time.Second

type takeoverTrial struct {
	holder, backup string
	killAfter      time.Duration // handler start → kill
	delay          time.Duration // kill → a backup's handler started the same slot
	attempt        int
	zombie         time.Duration // kill → the killed holder's handler context ended
	zombieCause    string
	err            string
}

type handlerStart struct {
	instance string
	slot     time.Time
	attempt  int
	at       time.Time
}

// measureTakeover is section 4: three instances on kvlease leases of 2s, the holder
// of a slot is killed mid-run by closing its NATS connection (no Stop, no release),
// and the time until a backup's handler starts the same slot is measured.
func measureTakeover(ctx context.Context, cfg config) ([]takeoverTrial, error) {
	srv, err := startServer(ctx, "")
	if err != nil {
		return nil, err
	}
	defer srv.Shutdown()
	var trials []takeoverTrial
	for i := range cfg.trials {
		tr, err := takeoverOnce(ctx, srv, i)
		if err != nil {
			tr.err = err.Error()
		}
		trials = append(trials, tr)
		if ctx.Err() != nil {
			return trials, ctx.Err()
		}
	}
	return trials, nil
}

func takeoverOnce(ctx context.Context, srv *embedded.Server, trial int) (takeoverTrial, error) {
	var tr takeoverTrial
	job := fmt.Sprintf("takeover-%d", trial)
	var armed atomic.Bool
	var victim atomic.Int64 // the blocked slot, Unix ms
	started := make(chan handlerStart, 1)
	backup := make(chan handlerStart, 4)
	ended := make(chan error, 1)
	handler := func(ctx context.Context, run scheduler.Run) error {
		now := time.Now()
		if run.Attempt > 1 {
			if run.Slot.UnixMilli() == victim.Load() {
				select {
				case backup <- handlerStart{instance: run.Instance, slot: run.Slot, attempt: run.Attempt, at: now}:
				default:
				}
			}
			return nil
		}
		if !armed.CompareAndSwap(true, false) {
			return nil // every other slot: a short run
		}
		victim.Store(run.Slot.UnixMilli())
		started <- handlerStart{instance: run.Instance, slot: run.Slot, attempt: run.Attempt, at: now}
		<-ctx.Done() // a long run, until the scheduler takes it away
		ended <- context.Cause(ctx)
		return ctx.Err()
	}

	var ins []*anarchonInstance
	defer func() {
		_ = stopAll(ins, 5*time.Second)
		for _, in := range ins {
			in.close()
		}
	}()
	for i := range instances {
		in, err := newInstance(ctx, srv, fmt.Sprintf("takeover%d-%c", trial, 'a'+i), true, false, nil)
		if err != nil {
			return tr, err
		}
		ins = append(ins, in)
		if err := in.s.Every(job, time.Second, handler, scheduler.WithLease(takeoverLease)); err != nil {
			return tr, err
		}
	}
	if err := startAll(ctx, ins); err != nil {
		return tr, err
	}
	armed.Store(true)

	var st handlerStart
	select {
	case st = <-started:
	case <-time.After(10 * time.Second):
		return tr, errors.New("no handler started within 10s")
	case <-ctx.Done():
		return tr, ctx.Err()
	}
	tr.holder = st.instance
	var holder *anarchonInstance
	for _, in := range ins {
		if in.s.Instance() == st.instance {
			holder = in
		}
	}
	if holder == nil {
		return tr, fmt.Errorf("unknown holder %q", st.instance)
	}
	// Mid-run, at a random point of the heartbeat cycle (every lease/3).
	tr.killAfter = takeoverLease/2 + rand.N(takeoverLease/3)
	if err := waitUntil(ctx, st.at.Add(tr.killAfter)); err != nil {
		return tr, err
	}
	killed := time.Now()
	holder.c.nc.Close() // the process "dies": no Stop, no release, no more heartbeats

	timeout := time.After(3*takeoverLease + 5*time.Second)
	for tr.backup == "" || tr.zombieCause == "" {
		select {
		case b := <-backup:
			tr.backup, tr.attempt, tr.delay = b.instance, b.attempt, b.at.Sub(killed)
		case cause := <-ended:
			tr.zombie, tr.zombieCause = time.Since(killed), fmt.Sprint(cause)
		case <-timeout:
			if tr.backup == "" {
				return tr, fmt.Errorf("no backup took slot %s over within %v of the kill", st.slot.Format(time.TimeOnly), 3*takeoverLease+5*time.Second)
			}
			tr.zombieCause = "still running when the trial ended"
		case <-ctx.Done():
			return tr, ctx.Err()
		}
	}
	return tr, nil
}

func takeoverMarkdown(trials []takeoverTrial, noLeases bool) string {
	if noLeases {
		return "n/a (no lease store): run without -leases=false to measure it.\n"
	}
	var b strings.Builder
	fmt.Fprintf(&b, "Lease %s (heartbeat every %s). The holder is killed mid-run by closing its NATS connection: no Stop, no release. "+
		"A backup can only start once the server expires the lease key: %s after the last heartbeat, so %s to %s after the kill, "+
		"plus the expiry marker reaching the backup's watch and its takeover claim.\n\n",
		dur(takeoverLease), dur(takeoverLease/3), dur(takeoverLease), dur(takeoverLease-takeoverLease/3), dur(takeoverLease))
	t := newTable("trial", "holder killed", "killed after", "kill → backup handler started", "backup (attempt)", "kill → killed holder's handler cancelled")
	var delays durations
	for i, tr := range trials {
		if tr.err != "" && tr.backup == "" {
			t.add(fmt.Sprint(i+1), tr.holder, dur(tr.killAfter), "failed: "+truncate(tr.err, 200), "", "")
			continue
		}
		delays = append(delays, tr.delay)
		zombie := tr.zombieCause
		if tr.zombie > 0 {
			zombie = fmt.Sprintf("%s (%s)", dur(tr.zombie), truncate(tr.zombieCause, 80))
		}
		t.add(fmt.Sprint(i+1), tr.holder, dur(tr.killAfter), dur(tr.delay), fmt.Sprintf("%s (%d)", tr.backup, tr.attempt), zombie)
	}
	b.WriteString(t.String())
	if len(delays) > 0 {
		fmt.Fprintf(&b, "\nTakeover delay: min %s, max %s over %d trials.\n", dur(slicesMin(delays)), dur(delays.max()), len(delays))
	}
	return b.String()
}

func slicesMin(d durations) time.Duration {
	m := d[0]
	for _, v := range d[1:] {
		m = min(m, v)
	}
	return m
}
