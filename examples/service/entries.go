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
				_, err := s.AddEntry(ctx, "tenants", id, scheduler.EntrySpec{Every: c.entryEvery, Payload: fmt.Appendf(nil, `{"tenant":%d}`, i)})
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
