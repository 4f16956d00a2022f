package fleet

import (
	"fmt"
	"maps"
	"slices"
	"strings"
	"time"

	"github.com/anarchon/anarchon/scheduler"
)

// Fleet is what Client.Jobs found: every replica that answered and, by job, which
// replicas declare it and whether they agree.
type Fleet struct {
	// Replicas are the answers, by instance.
	Replicas []Replica `json:"replicas"`
	// Jobs are the jobs declared on at least one replica, by name.
	Jobs []JobSummary `json:"jobs"`
	// Warnings are fleet-wide disagreements (library versions, instance names),
	// answers that could not be read, and registered replicas that did not answer.
	Warnings []string `json:"warnings,omitempty"`
	// Registered are the fleet's registry entries (Client.Registry): what each live
	// replica declares, answering or not.
	Registered []Registration `json:"registered,omitempty"`
	// Unreadable says which registry entries this version could not read (an
	// entry of a newer format: upgrade the reader).
	Unreadable []string `json:"unreadable,omitempty"`
}

// JobSummary is one job across the replicas that declare it.
type JobSummary struct {
	Name string `json:"name"`
	// Schedule is the schedule when every replica declares the same; otherwise
	// empty, and Schedules says who declares which.
	Schedule  string              `json:"schedule"`
	Schedules map[string][]string `json:"schedules,omitempty"`
	// ScheduleText is Schedule in words (scheduler.DescribeSchedule: "at 09:00 on
	// MON-FRI (Europe/Athens)"), as the anarchon command and the status page show
	// it; empty when the replicas differ.
	ScheduleText string `json:"schedule_text,omitempty"`
	// Replicas are the instances that declare the job.
	Replicas []string `json:"replicas"`
	// Pause is the pause in force as the first replica that sees one shows it;
	// PausedOn lists the replicas that see it.
	Pause    *PauseInfo `json:"pause,omitempty"`
	PausedOn []string   `json:"paused_on,omitempty"`
	// State is JobPaused when some replica sees a pause, JobEnded when every
	// replica says the job has no slot left or one says its run limit was
	// reached (the limit is counted fleet-wide), else JobActive.
	State string `json:"state"`
	// MaxRuns is the run limit as the first replica (by instance) declares it
	// (replicas that differ are reported as a job conflict); LimitReached says
	// a replica was told it is reached.
	MaxRuns      int  `json:"max_runs,omitempty"`
	LimitReached bool `json:"limit_reached,omitempty"`
	// Next is the earliest next slot the replicas report.
	Next time.Time `json:"next,omitzero"`
	// LastRun, LastSuccess, LastFailure, Running and RunningMore are as the first replica (by
	// instance) whose reads succeeded shows them (see JobState): every replica reads
	// the same backend, so they differ only by when each read. ViewFrom names that
	// replica; absent when no replica could read them.
	LastRun     *Run        `json:"last_run,omitempty"`
	LastSuccess *Run        `json:"last_success,omitempty"`
	LastFailure *Run        `json:"last_failure,omitempty"`
	Running     []ActiveRun `json:"running,omitempty"`
	RunningMore int         `json:"running_more,omitempty"`
	ViewFrom    string      `json:"view_from,omitempty"`
	// EntriesOnly says the job has no schedule of its own: Next is its
	// entries' earliest next slot, and the last runs are the newest that any
	// replica knows of its entries (each knows the runs it ran).
	EntriesOnly bool `json:"entries_only,omitempty"`
	// Entries sums up the job's schedule entries: the counts as the first
	// replica (by instance) sees them, the failing entries of every replica.
	Entries *EntriesState `json:"entries,omitempty"`
	// Warnings say how the replicas disagree: schedules, pause views, or replicas
	// that do not declare the job.
	Warnings []string `json:"warnings,omitempty"`
}

// Agree reports whether the replicas that declare the job agree on it.
func (j JobSummary) Agree() bool { return len(j.Warnings) == 0 }

func summarize(replicas []Replica) *Fleet {
	replicas = slices.Clone(replicas)
	slices.SortStableFunc(replicas, func(a, b Replica) int { return strings.Compare(a.Instance, b.Instance) })
	f := &Fleet{Replicas: replicas, Jobs: []JobSummary{}}
	if f.Replicas == nil {
		f.Replicas = []Replica{}
	}
	versions := map[string][]string{}
	names := map[string]int{}
	byJob := map[string]*JobSummary{}
	goesOn := map[string]bool{} // a replica says the job has slots left
	for _, r := range replicas {
		versions[r.Version] = append(versions[r.Version], r.Instance)
		names[r.Instance]++
		for _, j := range r.Jobs {
			s := byJob[j.Name]
			if s == nil {
				s = &JobSummary{Name: j.Name, Schedules: map[string][]string{}, State: JobActive, MaxRuns: j.MaxRuns}
				byJob[j.Name] = s
			}
			s.LimitReached = s.LimitReached || j.LimitReached
			if !j.Next.IsZero() && (s.Next.IsZero() || j.Next.Before(s.Next)) {
				s.Next = j.Next
			}
			if s.ViewFrom == "" && j.ViewError == "" {
				s.LastRun, s.LastSuccess, s.LastFailure, s.Running, s.RunningMore = j.LastRun, j.LastSuccess, j.LastFailure, j.Running, j.RunningMore
				s.ViewFrom = r.Instance
			} else if j.EntriesOnly && j.ViewError == "" {
				s.LastRun, s.LastSuccess, s.LastFailure = newerOf(s.LastRun, j.LastRun), newerOf(s.LastSuccess, j.LastSuccess), newerOf(s.LastFailure, j.LastFailure)
			}
			s.EntriesOnly = s.EntriesOnly || j.EntriesOnly
			s.Entries = mergeEntries(s.Entries, j.Entries)
			s.Replicas = append(s.Replicas, r.Instance)
			s.Schedules[j.Schedule] = append(s.Schedules[j.Schedule], r.Instance)
			if j.Pause != nil {
				if s.Pause == nil {
					s.Pause = j.Pause
				}
				s.State = JobPaused
				s.PausedOn = append(s.PausedOn, r.Instance)
			}
			if j.State != JobEnded {
				goesOn[j.Name] = true
			}
		}
	}
	if len(versions) > 1 {
		f.Warnings = append(f.Warnings, "replicas run different library versions: "+groups(versions))
	}
	for _, name := range slices.Sorted(maps.Keys(names)) {
		if names[name] > 1 {
			f.Warnings = append(f.Warnings, fmt.Sprintf("%d replicas answer as instance %q: give each replica its own name", names[name], name))
		}
	}
	for _, name := range slices.Sorted(maps.Keys(byJob)) {
		s := byJob[name]
		if s.State == JobActive && (!goesOn[name] || s.LimitReached) {
			s.State = JobEnded
		}
		if len(s.Schedules) == 1 {
			for sched := range s.Schedules {
				s.Schedule, s.ScheduleText = sched, scheduler.DescribeSchedule(sched)
			}
			s.Schedules = nil
		} else {
			s.Warnings = append(s.Warnings, "replicas disagree on the schedule: "+groups(s.Schedules))
		}
		if n := len(s.PausedOn); n > 0 && n < len(s.Replicas) {
			s.Warnings = append(s.Warnings, fmt.Sprintf("paused on %s but not on %s (a pause reaches every replica within a second; ask again)",
				strings.Join(s.PausedOn, ", "), strings.Join(without(s.Replicas, s.PausedOn), ", ")))
		}
		if s.ViewFrom == "" {
			s.Warnings = append(s.Warnings, "no replica could read its runs: "+viewErrors(replicas, name))
		}
		if missing := without(slices.Sorted(maps.Keys(names)), s.Replicas); len(missing) > 0 {
			s.Warnings = append(s.Warnings, "not declared on "+strings.Join(missing, ", "))
		}
		f.Jobs = append(f.Jobs, *s)
	}
	return f
}

// newerOf is the later run of a and b (either may be nil).
func newerOf(a, b *Run) *Run {
	switch {
	case a == nil:
		return b
	case b == nil:
		return a
	case b.Slot.After(a.Slot), b.Slot.Equal(a.Slot) && b.StartedAt.After(a.StartedAt):
		return b
	}
	return a
}

// mergeEntries adds a replica's view of a job's entries to the summary's: the
// first replica's counts, and the failing entries of all (each replica checked
// those it saw fail).
func mergeEntries(have, next *EntriesState) *EntriesState {
	switch {
	case next == nil:
		return have
	case have == nil:
		c := *next
		c.Failing = slices.Clone(next.Failing)
		return &c
	}
	for _, id := range next.Failing {
		if !slices.Contains(have.Failing, id) {
			have.Failing = append(have.Failing, id)
		}
	}
	slices.Sort(have.Failing)
	have.FailingMore = max(have.FailingMore, next.FailingMore)
	have.Unchecked = have.Unchecked || next.Unchecked
	return have
}

func viewErrors(replicas []Replica, job string) string {
	var parts []string
	for _, r := range replicas {
		for _, j := range r.Jobs {
			if j.Name == job && j.ViewError != "" {
				parts = append(parts, r.Instance+": "+j.ViewError)
			}
		}
	}
	return strings.Join(parts, "; ")
}

// groups writes "a (x, y); b (z)" in key order.
func groups(m map[string][]string) string {
	var parts []string
	for _, k := range slices.Sorted(maps.Keys(m)) {
		label := k
		if label == "" {
			label = "(none)"
		}
		parts = append(parts, fmt.Sprintf("%s (%s)", label, strings.Join(m[k], ", ")))
	}
	return strings.Join(parts, "; ")
}

func without(all, drop []string) []string {
	var out []string
	for _, x := range all {
		if !slices.Contains(drop, x) {
			out = append(out, x)
		}
	}
	return out
}
