package backend

import (
	"cmp"
	"slices"
)

// BuildHistory merges a job's claim records and stored results into run records,
// newest first (by slot, then attempt), at most limit of them (all when limit <= 0).
//
// A claim and a result belong to the same attempt when their tokens match. A claim
// with no result is reported as running; a result whose claim was not kept (or was
// never recorded, like a skipped slot) is reported from the result alone. Backends
// that build History with it get new record fields for free.
func BuildHistory(job string, claims []ClaimRecord, results []StoredResult, limit int) []RunRecord {
	byToken := make(map[string]int, len(claims))
	out := make([]RunRecord, 0, len(claims)+len(results))
	for _, c := range claims {
		if _, ok := byToken[c.Token]; ok && c.Token != "" {
			continue // the same claim stored twice (a retried write): keep the first
		}
		byToken[c.Token] = len(out)
		out = append(out, RunRecord{
			Job:         job,
			Slot:        c.Slot,
			Instance:    c.Instance,
			Token:       c.Token,
			Attempt:     max(c.Attempt, 1),
			Manual:      c.Manual,
			RequestedBy: c.RequestedBy,
			Backfill:    c.Backfill,
			Status:      StatusRunning,
			ClaimedAt:   c.At,
		})
	}
	for _, r := range results {
		i, ok := byToken[r.Token]
		if !ok || r.Token == "" {
			i = len(out)
			if r.Token != "" {
				byToken[r.Token] = i
			}
			out = append(out, RunRecord{Job: job, Slot: r.Slot, Token: r.Token})
		} else if out[i].Status.Finished() && (!r.Status.Finished() || r.Status == StatusLost) {
			// A final result already arrived: never step back to running, and a
			// backup's "lost" note never hides what the holder itself recorded.
			continue
		}
		rec := &out[i]
		if r.Instance != "" {
			rec.Instance = r.Instance
		}
		if r.Attempt > 0 {
			rec.Attempt = r.Attempt
		}
		rec.Attempt = max(rec.Attempt, 1)
		rec.Manual = rec.Manual || r.Manual
		if r.RequestedBy != "" {
			rec.RequestedBy = r.RequestedBy
		}
		rec.Backfill = rec.Backfill || r.Backfill
		rec.Status = r.Status
		rec.StartedAt = r.StartedAt
		rec.FinishedAt = r.FinishedAt
		rec.Error = r.Error
		rec.Fence = r.Fence
		if !r.StartedAt.IsZero() && !r.FinishedAt.IsZero() {
			rec.Duration = r.FinishedAt.Sub(r.StartedAt)
		}
	}
	newestFirst := func(a, b RunRecord) int {
		if c := b.Slot.Compare(a.Slot); c != 0 {
			return c
		}
		if c := cmp.Compare(b.Attempt, a.Attempt); c != 0 {
			return c
		}
		return b.ClaimedAt.Compare(a.ClaimedAt)
	}
	// Stores read oldest first: when the records are strictly in that order (no
	// two compare equal), the stable sort is their reverse, which costs no compares
	// and no moves of these large records beyond one pass.
	if oldestFirst(out, newestFirst) {
		slices.Reverse(out)
	} else {
		slices.SortStableFunc(out, newestFirst)
	}
	if limit > 0 && len(out) > limit {
		out = out[:limit]
	}
	return out
}

// oldestFirst reports whether every record of runs sorts strictly after the next
// one by cmp: runs reversed is then what a stable sort by cmp gives.
func oldestFirst(runs []RunRecord, cmp func(a, b RunRecord) int) bool {
	for i := 1; i < len(runs); i++ {
		if cmp(runs[i-1], runs[i]) <= 0 {
			return false
		}
	}
	return true
}
