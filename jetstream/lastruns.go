package jetstream

import (
	"context"
	"fmt"
	"sync"

	"github.com/anarchon/anarchon/backend"
)

// lastRunsParallel bounds the jobs LastRuns reads at once.
const lastRunsParallel = 32

var _ backend.LastRunsReader = (*Backend)(nil)

// LastRuns returns the newest run, success and failure of each job in jobs (an
// empty entry for a job with no run or no stream). It reads them from each job's
// recent history (backend.LastRunsDepth runs), with every job's reads in flight at
// once, up to 32 at a time.
//
// Cost: the layout keeps each job in its own stream, and a direct get reads one
// stream. So a job costs History's requests: one stream state request and one
// batched read (two when its last runs hold more than one claim and one result
// each). They go on the connection at the same time as the other jobs'. The wall
// time of LastRuns is therefore about the slowest job's two round trips, not the
// sum.
func (b *Backend) LastRuns(ctx context.Context, jobs []string) (map[string]backend.LastRuns, error) {
	ctx, cancel := b.callContext(ctx)
	defer cancel()
	out := make(map[string]backend.LastRuns, len(jobs))
	var (
		mu    sync.Mutex
		first error
		wg    sync.WaitGroup
		sem   = make(chan struct{}, lastRunsParallel)
	)
	for _, job := range jobs {
		if err := backend.ValidateRunName(job); err != nil {
			return nil, fmt.Errorf("jetstream: last runs: %w", err)
		}
		wg.Go(func() {
			select {
			case sem <- struct{}{}:
			case <-ctx.Done():
				mu.Lock()
				first = cmpErr(first, ctx.Err())
				mu.Unlock()
				return
			}
			defer func() { <-sem }()
			recs, err := b.History(ctx, job, backend.LastRunsDepth)
			mu.Lock()
			defer mu.Unlock()
			if err != nil {
				first = cmpErr(first, fmt.Errorf("jetstream: last runs of %q: %w", job, err))
				return
			}
			out[job] = backend.SummarizeRuns(job, recs)
		})
	}
	wg.Wait()
	return out, first // with an error, the jobs read are in out
}

func cmpErr(have, err error) error {
	if have != nil {
		return have
	}
	return err
}
