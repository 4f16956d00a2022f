package machine_test

import (
	"testing"
	"time"

	"github.com/stretchr/testify/assert"

	"github.com/anarchon/anarchon/backend"
	"github.com/anarchon/anarchon/backend/machine"
)

func TestDeadline(t *testing.T) {
	slot := time.Date(2030, 1, 1, 9, 0, 0, 0, time.UTC)
	due := slot.Add(30 * time.Minute)
	rec := func(attempt int, status backend.Status, finished time.Time, mod ...func(*backend.RunRecord)) backend.RunRecord {
		r := backend.RunRecord{Job: "job", Slot: slot, Token: "t", Instance: "web-1", Attempt: attempt, Status: status, FinishedAt: finished}
		for _, m := range mod {
			m(&r)
		}
		return r
	}
	other := rec(1, backend.StatusError, due, func(r *backend.RunRecord) { r.Slot = slot.Add(time.Hour) })
	manual := rec(1, backend.StatusOK, slot.Add(time.Minute), func(r *backend.RunRecord) { r.Manual = true })
	judged := rec(1, backend.StatusDeadline, due.Add(time.Second))
	withErr := func(e string) func(*backend.RunRecord) { return func(r *backend.RunRecord) { r.Error = e } }
	for _, c := range []struct {
		name   string
		recs   []backend.RunRecord
		missed bool
		why    string
	}{
		{"nothing recorded", nil, true, "not started"},
		{"other slots and manual runs do not count", []backend.RunRecord{other, manual}, true, "not started"},
		{"ok in time", []backend.RunRecord{rec(1, backend.StatusOK, due)}, false, ""},
		{"ok on a retry in time", []backend.RunRecord{rec(1, backend.StatusError, slot), rec(2, backend.StatusOK, due.Add(-time.Second))}, false, ""},
		{"judged already", []backend.RunRecord{judged, rec(1, backend.StatusRunning, time.Time{})}, false, ""},
		{"ok after the deadline", []backend.RunRecord{rec(1, backend.StatusOK, due.Add(time.Millisecond))}, true, "ended ok on web-1 (attempt 1) at 2030-01-01T09:30:00.001Z, after its deadline"},
		{"running", []backend.RunRecord{rec(1, backend.StatusRunning, time.Time{})}, true, "still running on web-1 (attempt 1)"},
		{"a retry running", []backend.RunRecord{rec(2, backend.StatusRunning, time.Time{}), rec(1, backend.StatusError, slot)}, true, "still running on web-1 (attempt 2)"},
		{"a final record after its running one", []backend.RunRecord{rec(1, backend.StatusRunning, time.Time{}), rec(1, backend.StatusTimeout, due, withErr("too slow"))}, true, "ended timeout on web-1 (attempt 1): too slow"},
		{"failed", []backend.RunRecord{rec(1, backend.StatusError, slot, withErr("boom"))}, true, "ended error on web-1 (attempt 1): boom"},
		{"late", []backend.RunRecord{rec(1, backend.StatusLate, slot, withErr("nobody claimed it"))}, true, "decided late: nobody claimed it"},
		{"missed", []backend.RunRecord{rec(1, backend.StatusMissed, slot)}, true, "decided missed"},
		{"skipped", []backend.RunRecord{rec(1, backend.StatusSkipped, slot)}, true, "decided skipped"},
		{"paused", []backend.RunRecord{rec(1, backend.StatusPaused, slot)}, false, ""},
		{"excluded by a calendar", []backend.RunRecord{rec(1, backend.StatusExcluded, slot)}, false, ""},
		{"past the run limit", []backend.RunRecord{rec(1, backend.StatusLimit, slot)}, false, ""},
		{"paused, then run by catch-up and failed", []backend.RunRecord{rec(1, backend.StatusPaused, slot), rec(2, backend.StatusError, due)}, false, ""},
	} {
		t.Run(c.name, func(t *testing.T) {
			why, missed := machine.Deadline(c.recs, slot, due)
			assert.Equal(t, c.missed, missed)
			assert.Equal(t, c.why, why)
		})
	}
}
