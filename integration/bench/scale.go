package main

import (
	"context"
	"fmt"
	"io/fs"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"time"

	natsjs "github.com/nats-io/nats.go/jetstream"

	"github.com/anarchon/anarchon/jetstream"
	"github.com/anarchon/anarchon/scheduler"
)

// scaleRow is one line of section 3.
type scaleRow struct {
	jobs       int
	skipped    string
	prepare    time.Duration
	rssDelta   int64
	heapDelta  int64
	goroutines int
	storeBytes int64
	ready      time.Duration // restart: embedded.Start on the same store until it returned
	firstClaim time.Duration // restart: from Start until a claim on a new connection won
	err        string
}

// measureScale is section 3, for each job count: PrepareJob of every job on one
// backend (the stream layout: one stream per job), what the server then holds,
// and how long the server takes to come back on the same store.
func measureScale(ctx context.Context, cfg config, budget time.Time) *scaleResult {
	res := &scaleResult{}
	if len(cfg.scale) == 0 {
		return res
	}
	// The server's own price of a stream, as the baseline of PrepareJob.
	res.rawN = min(100, slices.Max(cfg.scale))
	per, err := rawCreate(ctx, res.rawN)
	if err != nil {
		res.rawErr = err.Error()
	}
	res.rawCreate = per
	for _, n := range cfg.scale {
		// Creating a stream costs what the baseline says; the claims, the restart
		// and the rest cost about a tenth more (measured): take twice the baseline.
		need := time.Duration(n) * 2 * max(per, time.Millisecond)
		if time.Now().Add(need).After(budget) {
			res.rows = append(res.rows, scaleRow{jobs: n, skipped: fmt.Sprintf("skipped: would not fit the time budget (about %v needed)", need.Round(time.Second))})
			continue
		}
		row, err := scaleOnce(ctx, n)
		if err != nil {
			row.err = err.Error()
		}
		res.rows = append(res.rows, row)
		if ctx.Err() != nil {
			break
		}
	}
	return res
}

type scaleResult struct {
	rows      []scaleRow
	rawN      int
	rawCreate time.Duration // per stream
	rawErr    string
}

// rawCreate creates n file streams like a job's (duplicate window, per-message TTL,
// per-subject limit) with plain CreateStream calls, and returns the time per stream.
func rawCreate(ctx context.Context, n int) (time.Duration, error) {
	srv, err := startServer(ctx, "")
	if err != nil {
		return 0, err
	}
	defer srv.Shutdown()
	c, err := dial(srv, "scale-raw")
	if err != nil {
		return 0, err
	}
	defer c.nc.Close()
	t0 := time.Now()
	for i := range n {
		if _, err := c.js.CreateStream(ctx, natsjs.StreamConfig{
			Name: fmt.Sprintf("RAW_%d", i), Subjects: []string{fmt.Sprintf("raw.%d.>", i)}, Storage: natsjs.FileStorage,
			Duplicates: 10 * time.Minute, AllowMsgTTL: true, MaxMsgsPerSubject: scheduler.DefaultHistorySize,
		}); err != nil {
			return 0, err
		}
	}
	return time.Since(t0) / time.Duration(n), nil
}

func scaleOnce(ctx context.Context, n int) (scaleRow, error) {
	row := scaleRow{jobs: n}
	dir, err := os.MkdirTemp("", "anarchon-bench-scale-")
	if err != nil {
		return row, err
	}
	defer os.RemoveAll(dir)

	before := settledProc()
	srv, err := startServer(ctx, dir)
	if err != nil {
		return row, err
	}
	stopped := false
	defer func() {
		if !stopped {
			srv.Shutdown()
		}
	}()
	c, err := dial(srv, "scale")
	if err != nil {
		return row, err
	}
	b, err := jetstream.New(c.js)
	if err != nil {
		c.nc.Close()
		return row, err
	}
	if err := b.Init(ctx); err != nil {
		c.nc.Close()
		return row, err
	}
	names := jobNames("scale", n)
	t0 := time.Now()
	for _, name := range names {
		if err := b.PrepareJob(ctx, jobLimits(name, time.Minute, scheduler.DefaultHistorySize)); err != nil {
			c.nc.Close()
			return row, fmt.Errorf("prepare %s: %w", name, err)
		}
	}
	row.prepare = time.Since(t0)
	// One claim per job, so the restart has messages (and a duplicate table) to recover.
	slot := time.Now().Truncate(time.Minute)
	for _, name := range names {
		if _, err := b.Claim(ctx, claimInput(name, slot, newToken(), "scale")); err != nil {
			c.nc.Close()
			return row, fmt.Errorf("claim %s: %w", name, err)
		}
	}
	after := settledProc()
	row.rssDelta = after.rss - before.rss
	row.heapDelta = int64(after.heapInuse) - int64(before.heapInuse)
	row.goroutines = after.goroutines - before.goroutines
	c.nc.Close()

	srv.Shutdown()
	stopped = true
	row.storeBytes = dirSize(dir)

	t1 := time.Now()
	srv2, err := startServer(ctx, dir)
	if err != nil {
		return row, fmt.Errorf("restart: %w", err)
	}
	defer srv2.Shutdown()
	row.ready = time.Since(t1)
	c2, err := dial(srv2, "scale-after-restart")
	if err != nil {
		return row, err
	}
	defer c2.nc.Close()
	b2, err := jetstream.New(c2.js)
	if err != nil {
		return row, err
	}
	// The first claim after the restart, on the last job created, for the next
	// minute: it needs the stream recovered and its leader answering.
	cctx, cancel := context.WithTimeout(ctx, time.Minute)
	defer cancel()
	won, err := b2.Claim(cctx, claimInput(names[n-1], slot.Add(time.Minute), newToken(), "scale"))
	if err != nil {
		return row, fmt.Errorf("first claim after restart: %w", err)
	}
	if !won {
		return row, fmt.Errorf("first claim after restart: lost a slot nobody claimed")
	}
	// And the slot claimed before the restart is still known as claimed.
	won, err = b2.Claim(cctx, claimInput(names[0], slot, newToken(), "scale"))
	if err != nil {
		return row, fmt.Errorf("repeat claim after restart: %w", err)
	}
	row.firstClaim = time.Since(t1)
	if won {
		return row, fmt.Errorf("after restart a slot claimed before it was won again: the duplicate table was not recovered")
	}
	return row, nil
}

func dirSize(dir string) int64 {
	var n int64
	_ = filepath.WalkDir(dir, func(_ string, d fs.DirEntry, err error) error {
		if err == nil && !d.IsDir() {
			if info, err := d.Info(); err == nil {
				n += info.Size()
			}
		}
		return nil
	})
	return n
}

func scaleMarkdown(res *scaleResult) string {
	rows := res.rows
	var b strings.Builder
	b.WriteString("One backend prepares every job (one stream per job, file storage), then claims one slot of each. " +
		"Memory is the process (server in-process) after a GC, against before the server started. " +
		"Restart: shut the server down, start it on the same store, connect, claim a new slot (must win) and a slot claimed before the restart (must lose).\n\n")
	t := newTable("jobs", "PrepareJob all", "per job", "RSS Δ", "Go heap Δ (allocated; not all resident)", "goroutines Δ", "store on disk", "restart: server ready", "restart: ready + claims answered")
	for _, r := range rows {
		switch {
		case r.skipped != "":
			t.add(fmt.Sprint(r.jobs), r.skipped, "", "", "", "", "", "", "")
		case r.prepare == 0:
			t.add(fmt.Sprint(r.jobs), "failed: "+truncate(r.err, 200), "", "", "", "", "", "", "")
		default:
			last := dur(r.firstClaim)
			if r.err != "" {
				last = "failed: " + truncate(r.err, 200)
			}
			t.add(fmt.Sprint(r.jobs), dur(r.prepare), dur(r.prepare/time.Duration(r.jobs)), signedMiB(r.rssDelta), signedMiB(r.heapDelta),
				fmt.Sprintf("%+d", r.goroutines), mib(r.storeBytes), dur(r.ready), last)
		}
	}
	b.WriteString(t.String())
	switch {
	case res.rawErr != "":
		fmt.Fprintf(&b, "\nBaseline (plain `CreateStream`) failed: %s\n", truncate(res.rawErr, 200))
	case res.rawN > 0:
		fmt.Fprintf(&b, "\nBaseline on the same machine in the same run: a plain `CreateStream` of a file stream with the same settings takes %s per stream (%d streams): "+
			"PrepareJob's time is the server's, and grows with what the disk does.\n", dur(res.rawCreate), res.rawN)
	}
	return b.String()
}
