package main

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"sync"
	"sync/atomic"
	"time"

	"github.com/anarchon/anarchon/scheduler"
)

// seedEntries adds -seed-entries entries to the tenants job, a few at a time,
// keeping the ones already stored (every replica may be started with the flag).
func seedEntries(ctx context.Context, s *scheduler.Scheduler, c config, log *slog.Logger) error {
	start := time.Now()
	var (
		next, added, kept atomic.Int64
		wg                sync.WaitGroup
		mu                sync.Mutex
		first             error
	)
	for range 64 {
		wg.Go(func() {
			for {
				i := next.Add(1)
				if i > int64(c.seedEntries) || ctx.Err() != nil {
					return
				}
				id := fmt.Sprintf("tenant-%07d", i)
				spec := spreadSpec(c.entryEvery, int(i))
				spec.Payload = fmt.Appendf(nil, `{"tenant":%d}`, i)
				_, err := s.AddEntry(ctx, "tenants", id, spec)
				switch {
				case err == nil:
					added.Add(1)
				case errors.Is(err, scheduler.ErrEntryExists):
					kept.Add(1)
				default:
					mu.Lock()
					if first == nil {
						first = err
					}
					mu.Unlock()
					return
				}
			}
		})
	}
	wg.Wait()
	if first != nil {
		return fmt.Errorf("seed entries: %w", first)
	}
	log.Info("entries seeded", "job", "tenants", "added", added.Load(), "kept", kept.Load(), "took", time.Since(start).Round(time.Millisecond))
	return nil
}

// spreadSpec is entry i's schedule, every d: a cron expression that gives the
// entries different seconds (and minutes) when d is a whole number of seconds
// dividing a minute or of minutes dividing an hour, so that their slots spread
// over the interval instead of all falling on its multiples; else Every d.
func spreadSpec(d time.Duration, i int) scheduler.EntrySpec {
	switch {
	case d%time.Minute == 0 && d > 0 && time.Hour%d == 0:
		k := int(d / time.Minute)
		return scheduler.EntrySpec{Cron: fmt.Sprintf("%d %d/%d * * * *", i%60, (i/60)%k, k)}
	case d%time.Second == 0 && d > 0 && time.Minute%d == 0:
		k := int(d / time.Second)
		return scheduler.EntrySpec{Cron: fmt.Sprintf("%d/%d * * * * *", i%k, k)}
	}
	return scheduler.EntrySpec{Every: d}
}
