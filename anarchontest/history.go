package anarchontest

import (
	"context"
	"fmt"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/anarchon/anarchon/scheduler"
)

// History returns every record of the job's runs in the shared store, newest
// first, the attempts running now included: what Scheduler.History returns on
// any replica, read past every fault.
func (f *Fleet) History(ctx context.Context, job string) ([]scheduler.RunRecord, error) {
	return f.reader.History(ctx, job, 0)
}

// EntryHistory is History of the runs of the job's schedule entry id.
func (f *Fleet) EntryHistory(ctx context.Context, job, id string) ([]scheduler.RunRecord, error) {
	return f.reader.EntryHistory(ctx, job, id, 0)
}

// RunsOf returns the records of one slot of the job, oldest attempt first.
func (f *Fleet) RunsOf(ctx context.Context, job string, slot time.Time) ([]scheduler.RunRecord, error) {
	recs, err := f.History(ctx, job)
	if err != nil {
		return nil, err
	}
	var out []scheduler.RunRecord
	for _, r := range slices.Backward(recs) {
		if r.Slot.Equal(slot) {
			out = append(out, r)
		}
	}
	return out, nil
}

// Holder returns the replica whose attempt holds the live lease of the job's
// slot in the store, or nil if none does. A killed replica holds its leases
// until they expire.
func (f *Fleet) Holder(job string, slot time.Time) *Replica {
	active, err := f.mem.Runs().Active(context.Background(), job)
	if err != nil {
		return nil
	}
	for _, a := range active {
		if a.Slot.Equal(slot) && a.Live && !a.Buffered {
			return f.Named(a.Instance)
		}
	}
	return nil
}

// AssertRanOnce checks that each of the job's slots ran to completion once:
// exactly one of its attempts ended ok, and none is still running. Earlier
// attempts may have been lost, superseded or failed and retried. With no
// slots given it checks every slot the history holds a finished attempt of:
// not a slot whose first attempt still runs, nor one recorded skipped, late,
// missed, paused or limit (none ran). It reports each slot that did not run
// once, with its records, and returns whether all did.
func (f *Fleet) AssertRanOnce(t testing.TB, job string, slots ...time.Time) bool {
	t.Helper()
	recs, err := f.History(t.Context(), job)
	if err != nil {
		t.Errorf("anarchontest: history of %q: %v", job, err)
		return false
	}
	bySlot := map[int64][]scheduler.RunRecord{}
	counted := map[int64]bool{}
	var attempted []time.Time // slots with a finished attempt
	for _, r := range slices.Backward(recs) {
		if r.Status.Judgement() {
			continue
		}
		k := r.Slot.UnixNano()
		if !counted[k] && r.Status.Finished() && !r.Status.NotRun() {
			counted[k] = true
			attempted = append(attempted, r.Slot)
		}
		bySlot[k] = append(bySlot[k], r)
	}
	if len(slots) == 0 {
		slices.SortFunc(attempted, time.Time.Compare)
		slots = attempted
	}
	ok := true
	for _, slot := range slots {
		rs := bySlot[slot.UnixNano()]
		oks, running := 0, 0
		for _, r := range rs {
			switch r.Status {
			case scheduler.StatusOK:
				oks++
			case scheduler.StatusRunning:
				running++
			}
		}
		if oks != 1 || running != 0 {
			ok = false
			t.Errorf("anarchontest: job %q slot %s: %d attempts ended ok and %d still run, want 1 and 0; its records:\n%s",
				job, slot.Format(time.RFC3339Nano), oks, running, Describe(rs))
		}
	}
	return ok
}

// Describe returns records one a line, as a failed assertion shows them:
// slot, attempt, status, instance and error.
func Describe(recs []scheduler.RunRecord) string {
	if len(recs) == 0 {
		return "\t(none)"
	}
	var b strings.Builder
	for i, r := range recs {
		if i > 0 {
			b.WriteByte('\n')
		}
		fmt.Fprintf(&b, "\t%s attempt %d %s on %s", r.Slot.Format(time.RFC3339Nano), r.Attempt, r.Status, r.Instance)
		if r.Error != "" {
			fmt.Fprintf(&b, ": %s", r.Error)
		}
	}
	return b.String()
}
