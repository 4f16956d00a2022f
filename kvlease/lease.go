package kvlease

import (
	"context"
	"errors"
	"fmt"
	"time"

	"github.com/anarchon/anarchon/backend"
	"github.com/anarchon/anarchon/backend/machine"
	"github.com/anarchon/anarchon/internal/natsutil"
)

var (
	_ backend.Settler = (*Store)(nil)
	_ backend.Retrier = (*Store)(nil)
)

// holding is a holder's call in progress: its slot, token and what it read or
// remembers of the two keys.
type holding struct {
	s      *Store
	b      *bucket
	key    backend.RunKey
	k      runKeys
	h      held
	cached bool // h is remembered, not read
	v      view // the reading, when not cached
}

func (s *Store) holding(ctx context.Context, key backend.RunKey) (*holding, context.Context, context.CancelFunc, error) {
	if err := backend.ValidateRunName(key.Job); err != nil {
		return nil, nil, nil, err
	}
	ctx, cancel := s.callContext(ctx)
	b, err := s.bucketFor(ctx)
	if err != nil {
		cancel()
		return nil, nil, nil, err
	}
	k := keysFor(key.Job, key.Slot)
	h, cached := s.mem.recall(k, key.Token)
	return &holding{s: s, b: b, key: key, k: k, h: h, cached: cached}, ctx, cancel, nil
}

// current is the run as the holder sees it at now: remembered on the first try,
// else read (the records a reading finds left to write are written first).
func (c *holding) current(ctx context.Context, try int, now time.Time) (machine.Run, bool, error) {
	if c.cached && try == 0 {
		c.v = view{slot: c.key.Slot, run: entry{rev: c.h.runRev, put: true}, lease: entry{rev: c.h.leaseRev}}
		return c.h.run, false, nil
	}
	v, _, err := c.s.readView(ctx, c.b, c.key.Job, c.key.Slot, false)
	if err != nil {
		return machine.Run{}, false, err
	}
	c.v = v
	cur, _ := v.runOf(c.key.Token, now)
	c.h = held{runRev: v.run.rev, run: cur}
	if v.lv != nil && v.lv.Token == c.key.Token {
		c.h.leaseRev, c.h.lease = v.lease.rev, *v.lv
	}
	return cur, c.s.writePending(ctx, c.key.Job, v), nil
}

// Settle ends the attempt of st.Key as machine.Settle decides. It returns once its
// record is written to the store's RecordWriter. It writes the run record (with the
// record) by compare-and-set, then the record. Then, without waiting, it clears the
// record from the run record and purges the lease key. A lost race reads and
// decides again.
func (s *Store) Settle(ctx context.Context, st backend.Settlement) error {
	return s.end(ctx, st.Key, st.Retention, func(cur machine.Run, now time.Time) machine.Decision {
		return machine.Settle(cur, st, now)
	})
}

// end ends key's attempt as decide decides (Settle's body).
func (s *Store) end(ctx context.Context, key backend.RunKey, keep backend.Retention, decide func(machine.Run, time.Time) machine.Decision) error {
	c, ctx, cancel, err := s.holding(ctx, key)
	if err != nil {
		return err
	}
	defer cancel()
	for try := 0; try < maxTries; try++ {
		if err := backoff(ctx, try); err != nil {
			return err
		}
		now, err := s.now(ctx, c.b)
		if err != nil {
			return err
		}
		cur, written, err := c.current(ctx, try, now)
		if err != nil {
			return err
		}
		d := decide(cur, now)
		if d.Err != nil || !d.Write {
			s.clearPending(c.b, key.Job, c.v, written)
			if d.Err != nil {
				s.mem.forget(c.k, key.Token)
			}
			return d.Err
		}
		rec := runRecord{job: key.Job, run: d.Run, recs: d.Records, keep: keep}
		rev, err := s.putRun(ctx, c.b, rec, c.v.run.rev)
		if errors.Is(err, errConflict) {
			continue
		}
		if err != nil {
			return fmt.Errorf("kvlease: settle %s: %w", describe(key.Job, key.Slot), err)
		}
		s.mem.forget(c.k, key.Token)
		if d.Run.Phase == machine.Finished {
			if err := s.records(ctx, c.b, rec, rev); err != nil {
				return err
			}
			return c.endLease(ctx, d.Run, now)
		}
		// A retry or a hand-over: a backup may take the run over at once, so
		// the lease key goes before Settle returns, beside the record's write.
		ended := make(chan error, 1)
		go func() { ended <- c.endLease(ctx, d.Run, now) }()
		err = s.records(ctx, c.b, rec, rev)
		return errors.Join(err, <-ended)
	}
	return fmt.Errorf("kvlease: settle %s: %w", describe(key.Job, key.Slot), ErrContention)
}

// endLease purges the holder's lease key once run holds no live lease. The purge
// carries a finished run for the watchers. It is not waited for (the key's TTL
// ends it anyway), but a hand-over and a retry wait, so backups take over at once.
func (c *holding) endLease(ctx context.Context, run machine.Run, now time.Time) error {
	if run.Live(now) {
		return nil
	}
	if run.Phase == machine.Running || run.Phase == machine.Retrying {
		return c.s.endLease(ctx, c.b, c.k, c.key.Token, c.h.leaseRev)
	}
	if c.h.leaseRev == 0 {
		return nil // no lease key of this token was read: it ended already
	}
	var fin *machine.Run
	if run.Phase == machine.Finished {
		fin = &run
	}
	c.s.purgeNoWait(c.b, c.k.lease, c.h.leaseRev, fin)
	return nil
}

// Finish is Settle with status alone (the seed's RunStore call).
func (s *Store) Finish(ctx context.Context, key backend.RunKey, status backend.Status) error {
	return s.end(ctx, key, backend.Retention{}, func(cur machine.Run, now time.Time) machine.Decision {
		return machine.Finish(cur, key, status, now)
	})
}

// Retry is Settle of a failed attempt that stores its retry (backend.Retrier).
func (s *Store) Retry(ctx context.Context, key backend.RunKey, delay, within time.Duration) error {
	return s.end(ctx, key, backend.Retention{}, func(cur machine.Run, now time.Time) machine.Decision {
		return machine.Retry(cur, key, delay, within, now)
	})
}

// Heartbeat extends token's lease to lease (rounded up to whole seconds) from now
// by the server's clock, as machine.Heartbeat decides: a compare-and-set of the
// lease key carrying a new TTL. The server judges expiry: an expired lease key's
// last revision is its marker, so the write loses. While the run is long,
// heartbeats also refresh the run record's TTL.
func (s *Store) Heartbeat(ctx context.Context, key backend.RunKey, lease time.Duration) error {
	if lease < backend.MinLease {
		return fmt.Errorf("%w: kvlease: heartbeat lease %v is below %v", backend.ErrInvalidClaim, lease, backend.MinLease)
	}
	lease = natsutil.TTL(lease)
	c, ctx, cancel, err := s.holding(ctx, key)
	if err != nil {
		return err
	}
	defer cancel()
	for try := 0; try < maxTries; try++ {
		if err := backoff(ctx, try); err != nil {
			return err
		}
		now, err := s.now(ctx, c.b)
		if err != nil {
			return err
		}
		cur, written, err := c.current(ctx, try, now)
		if err != nil {
			return err
		}
		s.clearPending(c.b, key.Job, c.v, written)
		if c.cached && try == 0 && !cur.Live(now) {
			continue // remembered as ended: the server judges
		}
		d := machine.Heartbeat(cur, key, lease, now)
		if !d.Write {
			s.mem.forget(c.k, key.Token)
			return d.Err
		}
		lv := c.h.lease
		lv.LeaseMS = lease.Milliseconds()
		rev, err := s.put(ctx, c.b, write{key: c.k.lease, value: lv, expect: c.h.leaseRev, ttl: lease})
		if errors.Is(err, errConflict) {
			continue // expired, taken over, or a cancel request written: read
		}
		if err != nil {
			return fmt.Errorf("kvlease: heartbeat %s: %w", describe(key.Job, key.Slot), err)
		}
		c.h.leaseRev, c.h.lease, c.h.run = rev, lv, d.Run
		s.refreshRun(ctx, c, now)
		s.mem.remember(c.k, key.Token, c.h)
		return d.Err
	}
	return fmt.Errorf("kvlease: heartbeat %s: %w", describe(key.Job, key.Slot), ErrContention)
}

// refreshRun rewrites the run record unchanged once half its TTL has passed, so a
// run longer than its keep keeps its record. Best effort: a lost race means the
// run is no longer the holder's anyway.
func (s *Store) refreshRun(ctx context.Context, c *holding, now time.Time) {
	ttl := runTTL(c.h.run, false, now)
	if c.h.runWritten.IsZero() {
		c.h.runWritten = time.Now()
	}
	if ttl == 0 || time.Since(c.h.runWritten) < ttl/2 {
		return
	}
	rev, err := s.putRun(ctx, c.b, runRecord{job: c.key.Job, run: c.h.run}, c.h.runRev)
	if err != nil {
		c.h.runRev = 0
		return
	}
	c.h.runRev, c.h.runWritten = rev, time.Now()
}

// Release ends token's live lease at once, as machine.Release decides, by
// purging the lease key at its revision: the run stays unfinished, and the next
// claim takes it over. Releasing a lease token does not hold is not an error.
func (s *Store) Release(ctx context.Context, key backend.RunKey) error {
	c, ctx, cancel, err := s.holding(ctx, key)
	if err != nil {
		return err
	}
	defer cancel()
	defer s.mem.forget(c.k, key.Token)
	now, err := s.now(ctx, c.b)
	if err != nil {
		return err
	}
	cur, written, err := c.current(ctx, 0, now)
	if err != nil {
		return err
	}
	s.clearPending(c.b, key.Job, c.v, written)
	if d := machine.Release(cur, key, now); !d.Write {
		return nil
	}
	if err := s.endLease(ctx, c.b, c.k, key.Token, c.h.leaseRev); err != nil {
		return fmt.Errorf("kvlease: release %s: %w", describe(key.Job, key.Slot), err)
	}
	return nil
}

// endLease purges the lease key if token holds it, trying revision rev first when
// it is known.
func (s *Store) endLease(ctx context.Context, b *bucket, k runKeys, token string, rev uint64) error {
	for try := 0; try < maxTries; try++ {
		if err := backoff(ctx, try); err != nil {
			return err
		}
		if rev == 0 {
			e, err := s.read(ctx, b, k.lease)
			if err != nil {
				return err
			}
			lv, err := decodeLease(e)
			if err != nil || lv == nil || lv.Token != token {
				return err
			}
			rev = e.rev
		}
		err := s.purge(ctx, b, k.lease, rev)
		if !errors.Is(err, errConflict) {
			return err
		}
		rev = 0
	}
	return ErrContention
}
