package scheduler

import (
	"cmp"
	"context"
	"errors"
	"maps"
	"slices"
	"strings"
	"sync"
	"time"

	"github.com/anarchon/anarchon/backend"
)

// EntryStateCounts counts schedule entries that this instance follows, by
// state.
type EntryStateCounts struct {
	// Active entries have a next slot here.
	Active int
	// Paused entries run no slot (EntrySpec.Paused).
	Paused int
	// Ended entries have no slot left: an instant or end past, a run limit
	// reached, or their job ended or removed here.
	Ended int
}

// Total is how many entries are counted.
func (c EntryStateCounts) Total() int { return c.Active + c.Paused + c.Ended }

// EntryStates returns, by job, how many of its schedule entries this instance
// follows in each state. It reads this instance's view only, in memory.
func (s *Scheduler) EntryStates() map[string]EntryStateCounts {
	es := s.entries
	es.mu.Lock()
	defer es.mu.Unlock()
	out := map[string]EntryStateCounts{}
	for k, st := range es.byKey {
		c := out[k.job]
		switch {
		case st.e.Paused:
			c.Paused++
		case st.next.IsZero():
			c.Ended++
		default:
			c.Active++
		}
		out[k.job] = c
	}
	return out
}

// MaxSummaryFailing bounds the failing entries an EntriesSummary names, and
// maxFailingChecked how many it reads from the history to check them.
const (
	MaxSummaryFailing = 20
	maxFailingChecked = 100
)

// EntriesSummary is a job's schedule entries taken together, as the row of a job
// of entries shows them.
type EntriesSummary struct {
	Job string
	// EntryStateCounts counts the entries this instance follows.
	EntryStateCounts
	// Next is the earliest next slot of the entries here; zero when none has one.
	Next time.Time
	// Last holds the newest run, success and failure of any of the entries that
	// this instance ran, or read in their history, since it started; each with
	// Job and Entry set. The other instances know the runs they ran: a fleet
	// view takes the newest of all.
	Last LastRuns
	// Failing are the entries whose newest run that ended failed, by ID: those
	// this instance saw fail since it started, each checked in the shared
	// history as the summary is made. An entry that ran well since elsewhere is
	// not one. At most MaxSummaryFailing; FailingMore counts the others.
	Failing     []string
	FailingMore int
	// Unchecked says the history could not be read to check them (or not every
	// one: the newest maxFailingChecked are): Failing may name an entry that
	// ran well since on another instance.
	Unchecked bool
}

// entrySeen is what an instance saw of the runs of the entries of one job.
type entrySeen struct {
	last LastRuns
	// failing maps the entries whose newest run seen here failed to that run.
	failing map[string]*RunRecord
}

// seenRuns keeps entrySeen by job.
type seenRuns struct {
	mu    sync.Mutex
	byJob map[string]*entrySeen
}

func (r *seenRuns) of(job string) *entrySeen {
	if r.byJob == nil {
		r.byJob = map[string]*entrySeen{}
	}
	e := r.byJob[job]
	if e == nil {
		e = &entrySeen{failing: map[string]*RunRecord{}}
		r.byJob[job] = e
	}
	return e
}

// note takes one run of an entry of job: started (running) or ended.
func (r *seenRuns) note(rec RunRecord) {
	if rec.Entry == "" {
		return
	}
	r.mu.Lock()
	defer r.mu.Unlock()
	e := r.of(rec.Job)
	keep := func(have **RunRecord) {
		if *have == nil || newerRun(&rec, *have) {
			c := rec
			*have = &c
		}
	}
	if !rec.StartedAt.IsZero() {
		keep(&e.last.Run)
	}
	switch {
	case rec.Status == StatusOK:
		keep(&e.last.Success)
		if f := e.failing[rec.Entry]; f != nil && !newerRun(f, &rec) {
			delete(e.failing, rec.Entry)
		}
	case rec.Status.Failed():
		keep(&e.last.Failure)
		if f := e.failing[rec.Entry]; f == nil || newerRun(&rec, f) {
			c := rec
			e.failing[rec.Entry] = &c
		}
	}
}

// noteLast takes what a read of an entry's last runs found.
func (r *seenRuns) noteLast(l LastRuns) {
	for _, rec := range []*RunRecord{l.Run, l.Success, l.Failure} {
		if rec != nil {
			r.note(*rec)
		}
	}
}

// newerRun reports whether a is a later run than b: a later slot, or a later
// attempt of the same slot, or one that ended later.
func newerRun(a, b *RunRecord) bool {
	if c := a.Slot.Compare(b.Slot); c != 0 {
		return c > 0
	}
	if a.Attempt != b.Attempt {
		return a.Attempt > b.Attempt
	}
	return a.FinishedAt.After(b.FinishedAt)
}

// EntriesSummary sums up the schedule entries of job, declared here: their
// counts by state and earliest next slot (this instance's view), their newest
// runs as this instance knows them, and the failing ones, checked in the shared
// history (within ctx). With an error reading it, the summary is returned with
// Unchecked set.
func (s *Scheduler) EntriesSummary(ctx context.Context, job string) (EntriesSummary, error) {
	if _, err := s.declared(job); err != nil {
		return EntriesSummary{}, err
	}
	out, err := s.EntriesSummaries(ctx, job)
	return out[job], err
}

// EntriesSummaries is EntriesSummary of each job named, in one pass over the
// entries followed and one read of the history for them all. A job not declared
// here is left out, with an error matching ErrJobNotFound beside the others.
func (s *Scheduler) EntriesSummaries(ctx context.Context, jobs ...string) (map[string]EntriesSummary, error) {
	out := make(map[string]EntriesSummary, len(jobs))
	var undeclared error
	declared := jobs[:0:0]
	for _, job := range jobs {
		if _, err := s.declared(job); err != nil {
			undeclared = cmp.Or(undeclared, err)
			continue
		}
		out[job] = EntriesSummary{Job: job}
		declared = append(declared, job)
	}
	jobs = declared
	acc := make(map[string]*EntriesSummary, len(jobs))
	for _, job := range jobs {
		acc[job] = &EntriesSummary{Job: job}
	}
	s.entries.mu.Lock()
	for k, st := range s.entries.byKey {
		sum := acc[k.job]
		if sum == nil {
			continue
		}
		switch {
		case st.e.Paused:
			sum.Paused++
		case st.next.IsZero():
			sum.Ended++
		default:
			sum.Active++
		}
		if !st.next.IsZero() && (sum.Next.IsZero() || st.next.Before(sum.Next)) {
			sum.Next = st.next
		}
	}
	for job, sum := range acc {
		out[job] = *sum
	}

	// The entries seen failing, newest failure first, each job's at most
	// maxFailingChecked of them read from the history.
	candidates := map[string][]string{}
	var check []entryKey
	s.seen.mu.Lock() // after s.entries.mu, never before
	for _, job := range jobs {
		seen := s.seen.of(job)
		sum := out[job]
		sum.Last = LastRuns{Job: job, Run: copyRun(seen.last.Run), Success: copyRun(seen.last.Success), Failure: copyRun(seen.last.Failure)}
		out[job] = sum
		for id := range seen.failing {
			if _, ok := s.entries.byKey[entryKey{job, id}]; !ok {
				delete(seen.failing, id) // removed, or its job removed here
			}
		}
		ids := slices.Collect(maps.Keys(seen.failing))
		slices.SortFunc(ids, func(a, b string) int {
			switch {
			case newerRun(seen.failing[a], seen.failing[b]):
				return -1
			case newerRun(seen.failing[b], seen.failing[a]):
				return 1
			}
			return strings.Compare(a, b)
		})
		candidates[job] = ids
		for _, id := range ids[:min(len(ids), maxFailingChecked)] {
			check = append(check, entryKey{job, id})
		}
	}
	s.seen.mu.Unlock()
	s.entries.mu.Unlock()

	var (
		last map[string]LastRuns
		err  error
	)
	if len(check) > 0 {
		names := make([]string, len(check))
		for i, k := range check {
			names[i] = backend.EntryRunName(k.job, k.id)
		}
		last, err = s.lastRunsOf(ctx, names)
	}
	for _, job := range jobs {
		ids := candidates[job]
		checked := ids[:min(len(ids), maxFailingChecked)]
		failing := slices.Clone(ids[len(checked):])
		for _, id := range checked {
			l, read := last[backend.EntryRunName(job, id)]
			if !read {
				failing = append(failing, id)
				continue
			}
			for _, r := range []*RunRecord{l.Run, l.Success, l.Failure} {
				if r != nil {
					r.Job, r.Entry = job, id
				}
			}
			s.seen.noteLast(l)
			if l.Failure != nil && (l.Success == nil || newerRun(l.Failure, l.Success)) {
				failing = append(failing, id)
			}
		}
		slices.Sort(failing)
		sum := out[job]
		sum.Failing = failing[:min(len(failing), MaxSummaryFailing)]
		sum.FailingMore = len(failing) - len(sum.Failing)
		sum.Unchecked = len(ids) > len(checked) || err != nil && len(checked) > 0
		out[job] = sum
	}
	return out, errors.Join(undeclared, err)
}

func copyRun(r *RunRecord) *RunRecord {
	if r == nil {
		return nil
	}
	c := *r
	return &c
}
