package kvlease

import (
	"context"
	"fmt"
	"time"

	"github.com/nats-io/nats.go/jetstream"

	"github.com/anarchon/anarchon/scheduler"
)

// watchSlack is how long after a lease's expected end a watch fires even without
// having seen the server's expiry marker (a safety net: the marker normally arrives
// within milliseconds of the expiry).
const watchSlack = time.Second

// WatchRun watches (job, slot)'s two keys and returns a channel closed when a new
// Claim could decide differently: the lease is released, expires (the server's
// marker), changes holder, or the run record changes (finished, taken over). A
// heartbeat by the holder does not close it. When no lease is live at the start the
// channel closes at once. It also closes when ctx is done or the store is closed;
// the watcher is stopped then.
//
// The watch starts first, then the run's two keys are read from the stream leader:
// that reading decides, and the watch acts only on revisions newer than it. (A
// watcher's first values come from a consumer that may be served by a replica a
// little behind the leader, so they alone could show a lease just written as not
// there yet.)
func (s *Store) WatchRun(ctx context.Context, job string, slot time.Time) (<-chan struct{}, error) {
	if err := ctx.Err(); err != nil {
		return nil, err
	}
	if err := scheduler.ValidateJobName(job); err != nil {
		return nil, err
	}
	callCtx, cancel := s.callContext(ctx)
	defer cancel()
	b, err := s.bucketFor(callCtx)
	if err != nil {
		return nil, err
	}
	s.mu.Lock()
	if s.closed {
		s.mu.Unlock()
		return nil, ErrClosed
	}
	s.watchers.Add(1)
	s.mu.Unlock()

	// The watcher lives as long as wctx; its creation is bounded by the store's
	// timeout (or ctx's deadline) through a timer that cancels wctx.
	wctx, wcancel := context.WithCancel(ctx)
	stopOnClose := context.AfterFunc(s.done, wcancel)
	giveUp := time.AfterFunc(time.Until(deadlineOf(callCtx)), wcancel)
	k := keysFor(job, slot)
	w, err := b.kv.WatchFiltered(wctx, []string{k.run, k.lease})
	if !giveUp.Stop() && err == nil {
		stopWatcher(w)
		err = context.DeadlineExceeded
	}
	var base watchBase
	if err == nil {
		if base, err = s.watchBase(callCtx, b, k); err != nil {
			stopWatcher(w)
		}
	}
	if err != nil {
		stopOnClose()
		wcancel()
		s.watchers.Done()
		return nil, fmt.Errorf("kvlease: watch %s: %w", describeRun(job, slot), err)
	}
	out := make(chan struct{})
	go func() {
		defer s.watchers.Done()
		defer close(out)
		defer wcancel()
		defer stopOnClose()
		defer stopWatcher(w)
		if base.lease.rec == nil || base.finished {
			return // no live lease: a claim may decide differently now
		}
		s.watch(wctx, w, k, base)
	}()
	return out, nil
}

// watchBase is the run's state read from the stream leader when a watch starts.
type watchBase struct {
	lease    leaseEntry
	runRev   uint64
	finished bool
}

func (s *Store) watchBase(ctx context.Context, b *bucket, k runKeys) (watchBase, error) {
	run, err := s.readRun(ctx, b, k)
	if err != nil {
		return watchBase{}, err
	}
	ls, err := s.readLease(ctx, b, k)
	if err != nil {
		return watchBase{}, err
	}
	return watchBase{lease: ls, runRev: run.rev, finished: run.rec != nil && run.rec.finished()}, nil
}

func deadlineOf(ctx context.Context) time.Time {
	d, _ := ctx.Deadline()
	return d
}

// watch returns when the watch should fire. base holds a live lease.
func (s *Store) watch(ctx context.Context, w jetstream.KeyWatcher, k runKeys, base watchBase) {
	lease := base.lease
	// Fire a little after the lease's end by the server's clock, in case the expiry
	// marker is missed (a watcher resetting while the marker expired).
	timer := time.NewTimer(s.untilEnd(lease))
	defer timer.Stop()
	for {
		select {
		case <-ctx.Done():
			return
		case <-timer.C:
			return
		case e, ok := <-w.Updates():
			if !ok {
				return
			}
			if e == nil {
				continue // end of the watcher's first values: the base decides
			}
			ent := entryFromKV(e)
			if e.Key() == k.run {
				if ent.rev > base.runRev {
					return // finished, taken over, or refreshed: look again
				}
				continue
			}
			if ent.rev <= lease.rev {
				continue // already known
			}
			next, err := decodeLease(ent)
			if err != nil || next.rec == nil || next.rec.Token != lease.rec.Token {
				return // expired, released, or a new holder
			}
			lease = next // a heartbeat: the same holder, a later end
			timer.Reset(s.untilEnd(lease))
		}
	}
}

// untilEnd is the local wait until a little after lease's end by the server's clock.
func (s *Store) untilEnd(lease leaseEntry) time.Duration {
	return lease.expires().Sub(s.clock.estimate(time.Now())) + watchSlack
}
