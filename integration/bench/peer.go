package main

import (
	"context"
	"errors"
	"fmt"
	"sync"
	"sync/atomic"
	"time"

	"github.com/go-co-op/gocron/v2"
	"github.com/nats-io/nats.go"
	natsjs "github.com/nats-io/nats.go/jetstream"
)

// The peer: go-co-op/gocron v2 with a distributed Locker on a NATS KV bucket, the way
// Go services put gocron on several replicas today: the lock key is the job's name
// (gocron passes nothing else), Lock is kv.Create (fails while the key exists), Unlock
// deletes the key, and the bucket's TTL frees a lock whose holder died.

const (
	peerBucket = "gocron_locks"
	// peerLockTTL is the bucket's TTL: how long a lock outlives a holder that never
	// unlocked it.
	peerLockTTL = 30 * time.Second
)

// kvLocker is a gocron.Locker on a NATS KV bucket.
type kvLocker struct {
	kv       natsjs.KeyValue
	instance string
	stats    *lockStats
}

// lockStats counts the Lock calls that failed, across instances.
type lockStats struct {
	refused atomic.Int64 // Create answered "key exists": another instance holds the lock
	failed  atomic.Int64 // any other error
	mu      sync.Mutex
	sample  string
}

func (l *kvLocker) Lock(ctx context.Context, key string) (gocron.Lock, error) {
	if _, err := l.kv.Create(ctx, key, []byte(l.instance)); err != nil {
		if errors.Is(err, natsjs.ErrKeyExists) {
			l.stats.refused.Add(1)
		} else {
			l.stats.failed.Add(1)
			l.stats.mu.Lock()
			if l.stats.sample == "" {
				l.stats.sample = err.Error()
			}
			l.stats.mu.Unlock()
		}
		return nil, err
	}
	return &kvLock{kv: l.kv, key: key}, nil
}

type kvLock struct {
	kv  natsjs.KeyValue
	key string
}

func (l *kvLock) Unlock(ctx context.Context) error { return l.kv.Delete(ctx, l.key) }

// runPeer is section 5's gocron column: the same jobs (every second, the same names,
// the same handler body), three instances each on its own TCP connection, on a fresh
// embedded server configured like section 2's.
//
// gocron's handler is told no slot, so a run is counted for the second it started
// in (floor): gocron's timers fire at or after the second they were set for, and a
// run later than a whole second would show up as a missed slot next to a duplicate.
func runPeer(ctx context.Context, cfg config) (*loadResult, error) {
	srv, err := startServer(ctx, "")
	if err != nil {
		return nil, err
	}
	defer srv.Shutdown()

	names := jobNames("load", cfg.jobs)
	slots := int(cfg.duration / loadInterval)
	t := newTally(names, slots, loadInterval)
	res := &loadResult{name: "gocron v2.21.2 + NATS KV Locker", jobs: cfg.jobs, duration: cfg.duration}

	stats := &lockStats{}
	var conns []*nats.Conn
	var scheds []gocron.Scheduler
	defer func() {
		for _, s := range scheds {
			_ = s.Shutdown()
		}
		for _, nc := range conns {
			nc.Close()
		}
	}()

	setup := time.Now()
	// Every instance starts its jobs at the same whole second, as gocron's Locker
	// documentation recommends for duration jobs (WithStartAt rounded to the
	// duration), so their timers agree as far as the machine lets them.
	startAt := time.Now().Add(cfg.warmup).Truncate(time.Second).Add(time.Second)
	for i := range instances {
		id := fmt.Sprintf("instance-%c", 'a'+i)
		c, err := dial(srv, "peer-"+id)
		if err != nil {
			return nil, err
		}
		conns = append(conns, c.nc)
		kv, err := c.js.CreateOrUpdateKeyValue(ctx, natsjs.KeyValueConfig{Bucket: peerBucket, TTL: peerLockTTL, Storage: natsjs.FileStorage})
		if err != nil {
			return nil, fmt.Errorf("peer lock bucket: %w", err)
		}
		locker := &kvLocker{kv: kv, instance: id, stats: stats}
		s, err := gocron.NewScheduler(gocron.WithDistributedLocker(locker), gocron.WithStopTimeout(10*time.Second))
		if err != nil {
			return nil, err
		}
		scheds = append(scheds, s)
		for _, name := range names {
			task := gocron.NewTask(func() {
				now := time.Now()
				t.record(name, now.Truncate(loadInterval), now)
			})
			if _, err := s.NewJob(gocron.DurationJob(loadInterval), task,
				gocron.WithName(name), gocron.WithStartAt(gocron.WithStartDateTime(startAt))); err != nil {
				return nil, fmt.Errorf("gocron job %s: %w", name, err)
			}
		}
	}
	for _, s := range scheds {
		s.Start()
	}
	res.startup = time.Since(setup)
	lead := time.Until(startAt) + cfg.warmup // the window opens a warm-up after the first runs
	obsErr := res.observe(ctx, srv, conns, t, span{lead: lead, settle: cfg.warmup})
	res.events = map[string]int64{
		"lock refused (key exists)": stats.refused.Load(),
		"lock error":                stats.failed.Load(),
	}
	stats.mu.Lock()
	res.errSample = stats.sample
	stats.mu.Unlock()
	if obsErr != nil {
		return nil, obsErr
	}
	return res, nil
}

// peerMarkdown is section 5: anarchon's runs and the peer side by side.
func peerMarkdown(anarchon []*loadResult, p *loadResult) string {
	runs := append(append([]*loadResult(nil), anarchon...), p)
	t, row := runColumns("", runs)
	row("slots due", func(l *loadResult) string { return fmt.Sprint(l.slotsDue) })
	row("runs", func(l *loadResult) string { return fmt.Sprint(l.runs) })
	row("runs per slot", func(l *loadResult) string { return fmt.Sprintf("%.3f", float64(l.runs)/float64(max(l.slotsDue, 1))) })
	row("slots run exactly once", func(l *loadResult) string { return fmt.Sprint(l.once) + pctOf(l.once, l.slotsDue) })
	row("duplicates (extra runs)", func(l *loadResult) string { return l.dupLine() })
	row("missed slots", func(l *loadResult) string { return fmt.Sprint(l.missed) + pctOf(l.missed, l.slotsDue) })
	row("slot lag p50 / p99", func(l *loadResult) string {
		if len(l.lag) == 0 {
			return "n/a (nothing ran)"
		}
		return dur(l.lag.pct(50)) + " / " + dur(l.lag.pct(99))
	})
	row("CPU per slot (whole process)", func(l *loadResult) string { return dur(l.cpuPerSlot()) })
	row("client messages per slot (out / in)", func(l *loadResult) string {
		return perOp(l.clientMsgs.out, l.slotsDue) + " / " + perOp(l.clientMsgs.in, l.slotsDue)
	})
	row("process RSS peak", func(l *loadResult) string { return mib(l.rssPeak) })
	row("how the other instances were turned away", func(l *loadResult) string { return l.eventsLine() })
	row("what is left to read afterwards", func(l *loadResult) string {
		if l == p {
			return "nothing: the lock key is deleted after each run"
		}
		return "every run of every slot, from any instance (`History`)"
	})
	return t.String()
}
