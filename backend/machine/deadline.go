package machine

import (
	"cmp"
	"fmt"
	"slices"
	"strconv"
	"time"

	"github.com/anarchon/anarchon/backend"
)

// Deadline judges the deadline due of the slot at slot from the slot's history
// records (any order; records of other slots are ignored): missed, with what the
// slot had come to, when it has not ended ok by due.
//
// A slot is not judged (false) when it ended ok by due (by the finishing
// instance's clock), when it was judged already (a StatusDeadline record), when
// it was decided paused (catch-up may run it once the pause ends, late by the
// operator's choice), and when its newest record decided it not to run on
// purpose: past the run limit. Every other state misses the deadline: nothing recorded (not
// started), running, failed (its retry may be pending), ended ok after due,
// late, missed, skipped, cancelled, lost. Manual runs are off the schedule and do
// not count.
func Deadline(recs []backend.RunRecord, slot, due time.Time) (why string, missed bool) {
	var mine []backend.RunRecord
	for _, r := range recs {
		if !r.Slot.Equal(slot) || r.Manual {
			continue
		}
		switch {
		case r.Status == backend.StatusDeadline, r.Status == backend.StatusPaused, r.Status == backend.StatusExcluded:
			return "", false // judged already; paused: its later run, if any, is the operator's; excluded: never due
		case r.Status == backend.StatusOK && !r.FinishedAt.IsZero() && !r.FinishedAt.After(due):
			return "", false
		}
		mine = append(mine, r)
	}
	if len(mine) == 0 {
		return "not started", true
	}
	last := slices.MaxFunc(mine, func(a, b backend.RunRecord) int {
		if c := cmp.Compare(a.Attempt, b.Attempt); c != 0 {
			return c
		}
		return cmp.Compare(finalRank(a), finalRank(b)) // a final record after its running one
	})
	on := ""
	if last.Instance != "" {
		on = " on " + last.Instance
	}
	attempt := " (attempt " + strconv.Itoa(max(last.Attempt, 1)) + ")"
	switch last.Status {
	case backend.StatusPaused, backend.StatusLimit:
		return "", false
	case backend.StatusRunning:
		return "still running" + on + attempt, true
	case backend.StatusOK:
		return fmt.Sprintf("ended ok%s%s at %s, after its deadline", on, attempt, last.FinishedAt.UTC().Format(time.RFC3339Nano)), true
	}
	why = "decided " + string(last.Status)
	if !last.Status.NotRun() {
		why = "ended " + string(last.Status) + on + attempt
	}
	if last.Error != "" {
		why += ": " + last.Error
	}
	return why, true
}

func finalRank(r backend.RunRecord) int {
	if r.Status.Finished() {
		return 1
	}
	return 0
}
