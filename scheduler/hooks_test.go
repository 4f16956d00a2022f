package scheduler_test

import (
	"bytes"
	"errors"
	"log/slog"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"

	"github.com/anarchon/anarchon/backend"
	"github.com/anarchon/anarchon/scheduler"
)

func TestChain(t *testing.T) {
	var got []string
	h := scheduler.Chain(nil, func(e scheduler.Event) { got = append(got, "a:"+e.Job) }, nil,
		func(e scheduler.Event) { panic("b broke") },
		func(e scheduler.Event) { got = append(got, "c:"+e.Job) })
	assert.PanicsWithValue(t, "b broke", func() { h(scheduler.Event{Job: "j"}) }, "the first panic is raised again")
	assert.Equal(t, []string{"a:j", "c:j"}, got, "every hook saw the event, in order")
	for _, empty := range []func(scheduler.Event){scheduler.Chain(), scheduler.Chain(nil, nil)} {
		assert.NotNil(t, empty)
		assert.NotPanics(t, func() { empty(scheduler.Event{}) })
	}
}

func TestLogEvents(t *testing.T) {
	var buf bytes.Buffer
	h := scheduler.LogEvents(slog.New(slog.NewTextHandler(&buf, &slog.HandlerOptions{Level: slog.LevelInfo})))
	slot := time.Date(2026, 11, 30, 9, 0, 0, 0, time.UTC)
	h(scheduler.Event{Kind: scheduler.EventFinished, Job: "report", Instance: "a", Slot: slot, Status: scheduler.StatusError, Err: errors.New("disk full"), Attempt: 1})
	h(scheduler.Event{Kind: scheduler.EventClaimed, Job: "report", Instance: "a", Slot: slot}) // debug: not shown
	h(scheduler.Event{Kind: scheduler.EventLost, Job: "report", Instance: "a", Slot: slot, Outcome: backend.OutcomeDone})
	h(scheduler.Event{Kind: scheduler.EventLate, Job: "report", Instance: "a", Slot: slot})
	h(scheduler.Event{Kind: scheduler.EventLimitReached, Job: "report", Instance: "a", Slot: slot, Outcome: backend.OutcomeLimit})
	lines := strings.Split(strings.TrimSpace(buf.String()), "\n")
	if assert.Len(t, lines, 3, buf.String()) {
		assert.Contains(t, lines[0], "level=INFO", "a failure is the scheduler's own line (Config.Logger)")
		assert.Contains(t, lines[0], `msg="run finished"`)
		assert.Contains(t, lines[0], `err="disk full"`)
		assert.Contains(t, lines[0], "job=report")
		assert.Contains(t, lines[1], "slot late")
		assert.Contains(t, lines[2], "level=INFO")
		assert.Contains(t, lines[2], `msg="run limit reached: the job's loop ended"`)
		assert.Contains(t, lines[2], "outcome=limit")
	}
	assert.NotPanics(t, func() { scheduler.LogEvents(nil)(scheduler.Event{Kind: scheduler.EventFinished}) })
}
