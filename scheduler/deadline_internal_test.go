package scheduler

import (
	"testing"
	"time"

	"github.com/stretchr/testify/assert"

	"github.com/anarchon/anarchon/backend"
)

// A deadline record is a judgement, not an attempt: wherever it sorts among a
// slot's records, what reads a slot's fate from the history passes it over.
func TestDeadlineRecordsAreNotAttempts(t *testing.T) {
	t0 := time.Date(2030, 1, 1, 9, 0, 0, 0, time.UTC)
	slot1, slot2, slot3 := t0, t0.Add(time.Minute), t0.Add(2*time.Minute)
	judged := func(slot time.Time) RunRecord {
		return RunRecord{Job: "job", Slot: slot, Token: backend.DeadlineToken(slot), Instance: "B", Attempt: 1, Status: StatusDeadline, Error: "not ended ok"}
	}
	failed := func(slot time.Time) RunRecord {
		return RunRecord{Job: "job", Slot: slot, Token: "t" + slot.String(), Instance: "A", Attempt: 1, Status: StatusError, Error: "boom", StartedAt: slot}
	}
	// Newest first, each judgement before its slot's attempt.
	recs := []RunRecord{judged(slot3), judged(slot2), failed(slot2), judged(slot1), failed(slot1)}

	streak, _ := failedStreak(recs)
	assert.Equal(t, 2, streak, "slots 2 and 1 failed; slot 3, judged only, was not started")

	bySlot := newestRecords(recs)
	assert.NotContains(t, bySlot, slot3.UnixMilli(), "a slot judged but never started has no record of its fate: backfill runs it")
	assert.Equal(t, StatusError, bySlot[slot2.UnixMilli()][0].Status)

	assert.Equal(t, slot2, newest(recs, slot3), "the newest slot a replica recorded")
}
