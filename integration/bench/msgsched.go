package main

import (
	"context"
	"fmt"
	"strings"
	"time"

	"github.com/nats-io/nats.go"
	natsjs "github.com/nats-io/nats.go/jetstream"
)

// schedStream is the stream of section 8: every schedule and every fire.
const schedStream = "BENCH_SCHED"

// runMsgSchedules is section 8: the larger fleet's jobs as NATS's own message
// schedules (ADR-51) on one stream of a fresh server, each a 6-field cron on the
// job's interval with its own target subject, and one consumer that takes every
// fire: the substrate's own limit for the same slots, measured like section 6.
// A fire's slot is its Nats-Schedule-Next header less the interval.
func runMsgSchedules(ctx context.Context, cfg config, f fleet) (*loadResult, error) {
	sec := int(f.interval / time.Second)
	if f.interval%time.Second != 0 || sec < 1 || 60%sec != 0 {
		return nil, fmt.Errorf("the interval %v is no cron step: whole seconds that divide a minute", f.interval)
	}
	srv, err := startServer(ctx, "")
	if err != nil {
		return nil, err
	}
	defer cfg.phase("server shut down", srv.Shutdown)
	c, err := dial(srv, "schedules")
	if err != nil {
		return nil, err
	}
	defer c.nc.Close()
	if _, err := c.js.CreateStream(ctx, natsjs.StreamConfig{
		Name: schedStream, Subjects: []string{"sched.>"}, Storage: natsjs.FileStorage,
		AllowMsgSchedules: true, MaxAge: time.Hour,
	}); err != nil {
		return nil, fmt.Errorf("create the schedules' stream: %w", err)
	}

	names := jobNames("load", f.jobs)
	slots := int(f.window / f.interval)
	t := newTally(names, slots, f.interval)
	res := &loadResult{name: "NATS message schedules (server-side)", jobs: f.jobs, duration: f.window, interval: f.interval, instances: 1}
	cons, err := c.js.OrderedConsumer(ctx, schedStream, natsjs.OrderedConsumerConfig{
		FilterSubjects: []string{"sched.fire.>"}, DeliverPolicy: natsjs.DeliverNewPolicy,
	})
	if err != nil {
		return nil, err
	}
	cc, err := cons.Consume(func(m natsjs.Msg) {
		now := time.Now()
		name := strings.TrimPrefix(m.Subject(), "sched.fire.")
		next, err := time.Parse(time.RFC3339Nano, m.Headers().Get(natsjs.ScheduleNextHeader))
		slot := now.Truncate(f.interval)
		if err == nil {
			slot = next.Add(-f.interval)
		}
		t.record(name, slot, now)
	})
	if err != nil {
		return nil, err
	}
	defer cc.Stop()

	t0 := time.Now()
	rss0 := rssBytes()
	cron := fmt.Sprintf("*/%d * * * * *", sec)
	acks := make([]natsjs.PubAckFuture, 0, len(names))
	for _, name := range names {
		msg := nats.NewMsg("sched.s." + name)
		msg.Data = []byte(name)
		a, err := c.js.PublishMsgAsync(msg, natsjs.WithScheduleCron(cron), natsjs.WithScheduleTarget("sched.fire."+name))
		if err != nil {
			return nil, fmt.Errorf("schedule %s: %w", name, err)
		}
		acks = append(acks, a)
	}
	for _, a := range acks {
		select {
		case <-a.Ok():
		case err := <-a.Err():
			return nil, fmt.Errorf("schedule %s: %w", a.Msg().Subject, err)
		case <-ctx.Done():
			return nil, ctx.Err()
		}
	}
	res.startup = time.Since(t0)
	res.rssStarted = rssBytes() - rss0
	cfg.logf("%d schedules stored in %v", len(names), res.startup.Round(time.Millisecond))
	if err := res.observe(ctx, srv, []*nats.Conn{c.nc}, t, f.span); err != nil {
		return nil, err
	}
	if n := t.other.Load(); n > 0 {
		res.notes = append(res.notes, fmt.Sprintf("%d fires of unknown subjects", n))
	}
	return res, nil
}
