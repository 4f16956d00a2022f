package main

import (
	"context"
	"database/sql"
	"fmt"
	"slices"
	"sync"
	"time"

	"github.com/anarchon/anarchon/scheduler"
	"github.com/anarchon/anarchon/sqlbackend"
)

// loadPool is each instance's pool size (SetMaxOpenConns): an unbounded pool opens a
// connection per concurrent claim, hundreds at a slot, more than a server accepts.
const loadPool = 10

// loadResult is what one load run saw.
type loadResult struct {
	due, runs, dups, missed int
	// sameAttempt counts duplicate starts of one attempt number of a slot (two
	// winners: a broken rule); the other duplicates are later attempts, takeovers
	// of a lease that ended before its run was finished (a Finish that timed out).
	sameAttempt int
	lag         []time.Duration
	startup     time.Duration
	events      map[scheduler.EventKind]int
	errSample   map[string]int
}

// load runs jobs jobs every second on 3 schedulers, each on its own pool, for
// seconds seconds (the window opens 2s after Start), and counts what ran.
func load(ctx context.Context, d sqlbackend.Dialect, open func() (*sql.DB, error), jobs, seconds int) (*loadResult, error) {
	type key struct {
		job  string
		slot int64
	}
	var (
		mu       sync.Mutex
		ran      = map[key][]time.Duration{}
		attempts = map[key][]int{}
		res      = &loadResult{events: map[scheduler.EventKind]int{}, errSample: map[string]int{}}
		dbs      []*sql.DB
	)
	defer func() {
		for _, db := range dbs {
			_ = db.Close()
		}
	}()
	var scheds []*scheduler.Scheduler
	for i := range 3 {
		db, err := open()
		if err != nil {
			return nil, err
		}
		dbs = append(dbs, db)
		db.SetMaxOpenConns(loadPool)
		b, err := sqlbackend.New(db, d, sqlbackend.WithTablePrefix(fmt.Sprintf("load%d_", jobs)))
		if err != nil {
			return nil, err
		}
		defer b.Close(context.Background())
		s, err := scheduler.New(scheduler.Config{Backend: b, Instance: fmt.Sprint("i", i), OnEvent: func(e scheduler.Event) {
			mu.Lock()
			res.events[e.Kind]++
			if e.Err != nil && len(res.errSample) < 20 {
				msg := e.Op + ": " + e.Err.Error()
				if len(msg) > 160 {
					msg = msg[:160]
				}
				res.errSample[msg]++
			}
			mu.Unlock()
		}})
		if err != nil {
			return nil, err
		}
		for j := range jobs {
			err := s.Every(fmt.Sprintf("load-%d", j), time.Second, func(_ context.Context, r scheduler.Run) error {
				lag := time.Since(r.Slot)
				mu.Lock()
				k := key{r.Job, r.Slot.UnixMilli()}
				ran[k] = append(ran[k], lag)
				attempts[k] = append(attempts[k], r.Attempt)
				mu.Unlock()
				return nil
			})
			if err != nil {
				return nil, err
			}
		}
		scheds = append(scheds, s)
	}
	t0 := time.Now()
	var wg sync.WaitGroup
	errs := make([]error, len(scheds))
	for i, s := range scheds {
		wg.Go(func() { errs[i] = s.Start(ctx) })
	}
	wg.Wait()
	for _, err := range errs {
		if err != nil {
			return nil, err
		}
	}
	res.startup = time.Since(t0)
	from := time.Now().Add(2 * time.Second).Truncate(time.Second).Add(time.Second)
	to := from.Add(time.Duration(seconds) * time.Second)
	time.Sleep(time.Until(to.Add(3 * time.Second))) // the last slots' runs (max lateness 1s) and their records
	stopCtx, cancel := context.WithTimeout(ctx, 30*time.Second)
	defer cancel()
	for _, s := range scheds {
		_ = s.Stop(stopCtx)
	}
	mu.Lock()
	defer mu.Unlock()
	for j := range jobs {
		for at := from; at.Before(to); at = at.Add(time.Second) {
			res.due++
			k := key{fmt.Sprintf("load-%d", j), at.UnixMilli()}
			lags := ran[k]
			seen := map[int]bool{}
			for _, a := range attempts[k] {
				if seen[a] {
					res.sameAttempt++
				}
				seen[a] = true
			}
			switch {
			case len(lags) == 0:
				res.missed++
			default:
				res.runs += len(lags)
				res.dups += len(lags) - 1
				res.lag = append(res.lag, lags...)
			}
		}
	}
	slices.Sort(res.lag)
	return res, nil
}
