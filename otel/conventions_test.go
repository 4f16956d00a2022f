package otel_test

import (
	"bytes"
	"context"
	"encoding/json"
	"log/slog"
	"sync"
	"testing"
	"testing/synctest"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	"go.opentelemetry.io/otel/codes"
	sdktrace "go.opentelemetry.io/otel/sdk/trace"

	"github.com/anarchon/anarchon/backend/memory"
	anotel "github.com/anarchon/anarchon/otel"
	"github.com/anarchon/anarchon/scheduler"
)

// A run of a schedule entry names its entry, a backfilled run says so, and the
// attempt's number is on every span.
func TestEntryAndBackfillAttributes(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		tp, sr := recorder(t)
		s := newScheduler(t, memory.New(), "A", tp)
		require.NoError(t, s.Every("tenants", 24*time.Hour, func(context.Context, scheduler.Run) error { return nil }))
		time.Sleep(time.Hour) // 01:00: no own slot due until tomorrow
		require.NoError(t, s.Start(t.Context()))
		defer s.Stop(t.Context())
		require.NoError(t, s.EntriesLoaded(t.Context()))
		_, err := s.AddEntry(t.Context(), "tenants", "acme", scheduler.EntrySpec{Every: time.Minute, Payload: []byte("acme")})
		require.NoError(t, err)
		time.Sleep(90 * time.Second) // the entry's slot at 01:01 ran
		_, err = s.Backfill(t.Context(), "tenants", time.Now().Add(-2*time.Hour), time.Now().Add(-time.Hour))
		require.NoError(t, err)
		time.Sleep(time.Second)
		synctest.Wait()

		var entry, backfill sdktrace.ReadOnlySpan
		for _, sp := range runSpans(sr) {
			a := attrs(sp)
			if _, ok := a[anotel.AttrEntry]; ok && entry == nil {
				entry = sp
			}
			if _, ok := a[anotel.AttrBackfill]; ok {
				backfill = sp
			}
		}
		require.NotNil(t, entry, "a span of the entry's run")
		a := attrs(entry)
		assert.Equal(t, "acme", a[anotel.AttrEntry].AsString())
		assert.Equal(t, "tenants", a[anotel.AttrJob].AsString())
		assert.Equal(t, "anarchon.run tenants", entry.Name(), "the span's name is the job's: no series of names per entry")
		assert.Equal(t, int64(1), a[anotel.AttrAttempt].AsInt64())
		assert.NotContains(t, a, anotel.AttrBackfill)

		require.NotNil(t, backfill, "a span of the backfilled slot")
		b := attrs(backfill)
		assert.True(t, b[anotel.AttrBackfill].AsBool())
		assert.Equal(t, "2000-01-01T00:00:00.000Z", b[anotel.AttrSlot].AsString(), "the day's slot before Start, backfilled")
		assert.NotContains(t, b, anotel.AttrEntry)
	})
}

// A run a later slot cancels (OverlapCancelOther) ends outcome cancelled
// without an error status or error.type: the policy's normal ending.
func TestCancelledByALaterSlotIsNoFailure(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		tp, sr := recorder(t)
		s := newScheduler(t, memory.New(), "A", tp)
		first := time.Now().Add(10 * time.Minute)
		require.NoError(t, s.Every("refresh", 10*time.Minute, func(ctx context.Context, run scheduler.Run) error {
			if run.Slot.Equal(first) {
				<-ctx.Done()
				return ctx.Err()
			}
			return nil
		}, scheduler.WithOverlap(scheduler.OverlapCancelOther), scheduler.WithLease(3*time.Second),
			scheduler.WithStartAt(first)))
		require.NoError(t, s.Start(t.Context()))
		time.Sleep(21 * time.Minute) // the slot at +20m cancelled the one at +10m, and ran
		require.NoError(t, s.Stop(t.Context()))

		spans := runSpans(sr)
		require.Len(t, spans, 2)
		cancelled, next := attrs(spans[0]), attrs(spans[1])
		assert.Equal(t, anotel.OutcomeCancelled, cancelled[anotel.AttrOutcome].AsString())
		assert.NotContains(t, cancelled, anotel.AttrErrorType)
		assert.Equal(t, codes.Unset, spans[0].Status().Code, "no error status")
		assert.Empty(t, spans[0].Events(), "no exception recorded")
		assert.Equal(t, anotel.OutcomeOK, next[anotel.AttrOutcome].AsString())
	})
}

// The run's context reaches slog: a handler's log line made with it through
// LogHandler carries the run span's trace and span IDs; a line without a
// context, or with one without a span, carries none.
func TestLogHandlerCorrelatesTheRunsLogs(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		tp, sr := recorder(t)
		var mu sync.Mutex
		var buf bytes.Buffer
		logger := slog.New(anotel.LogHandler(slog.NewJSONHandler(&lockedWriter{&mu, &buf}, nil))).With("service", "billing")
		s := newScheduler(t, memory.New(), "A", tp)
		require.NoError(t, s.Every("invoice", 24*time.Hour, func(ctx context.Context, run scheduler.Run) error {
			logger.InfoContext(ctx, "invoicing", "attempt", run.Attempt)
			logger.WithGroup("db").InfoContext(ctx, "query")
			logger.Info("no context")
			logger.InfoContext(context.Background(), "no span")
			return nil
		}))
		time.Sleep(time.Hour)
		require.NoError(t, s.Start(t.Context()))
		defer s.Stop(t.Context())
		_, err := s.RunNow(t.Context(), "invoice")
		require.NoError(t, err)

		spans := runSpans(sr)
		require.Len(t, spans, 1)
		sc := spans[0].SpanContext()
		mu.Lock()
		defer mu.Unlock()
		var lines []map[string]any
		dec := json.NewDecoder(&buf)
		for dec.More() {
			var l map[string]any
			require.NoError(t, dec.Decode(&l))
			lines = append(lines, l)
		}
		require.Len(t, lines, 4)
		assert.Equal(t, "invoicing", lines[0]["msg"])
		assert.Equal(t, sc.TraceID().String(), lines[0][anotel.LogTraceID])
		assert.Equal(t, sc.SpanID().String(), lines[0][anotel.LogSpanID])
		assert.Equal(t, "billing", lines[0]["service"], "the logger's own attributes stay")
		group, _ := lines[1]["db"].(map[string]any)
		assert.Equal(t, sc.TraceID().String(), group[anotel.LogTraceID], "in the open group")
		for _, l := range lines[2:] {
			assert.NotContains(t, l, anotel.LogTraceID, "%v", l["msg"])
		}
	})
}

type lockedWriter struct {
	mu *sync.Mutex
	w  *bytes.Buffer
}

func (l *lockedWriter) Write(p []byte) (int, error) {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.w.Write(p)
}
