package metrics

import (
	"github.com/prometheus/client_golang/prometheus"

	"github.com/anarchon/anarchon/scheduler"
)

// EntryCounter counts schedule entries: a *scheduler.Scheduler is one.
type EntryCounter interface {
	// EntryCounts returns how many entries this instance follows and how many
	// stored entries belong to jobs it does not declare.
	EntryCounts() (followed, orphaned int)
}

// EntryStater counts schedule entries by job and state: a *scheduler.Scheduler
// is one. CountEntries finds it on the EntryCounter it is given.
type EntryStater interface {
	// EntryStates returns, by job, how many of its entries this instance
	// follows in each state.
	EntryStates() map[string]scheduler.EntryStateCounts
}

// Memberer lists the instances a scheduler takes turns with: a
// *scheduler.Scheduler is one.
type Memberer interface {
	Members() []string
}

// CountEntries makes the collectors export entries{state="followed"} and
// entries{state="orphaned"}, read from s at every scrape (added up over every s
// given, for a process with more than one scheduler), and, when s is also an
// EntryStater, job_entries{job_name, state} for state active, paused and ended.
// Failures of entries are counted by job in entry_failed_slots_total; no series
// is kept per entry. A nil s is ignored.
//
// When s is also a Memberer taking turns, turn_members is the number of
// instances it takes turns with.
//
//	m.CountEntries(s) // s: the *scheduler.Scheduler whose OnEvent is m.OnEvent
func (m *Metrics) CountEntries(s EntryCounter) {
	if s == nil {
		return
	}
	m.entryMu.Lock()
	defer m.entryMu.Unlock()
	m.counters = append(m.counters, s)
}

func (m *Metrics) collectEntries(ch chan<- prometheus.Metric) {
	m.entryMu.Lock()
	counters := m.counters
	m.entryMu.Unlock()
	if len(counters) == 0 {
		return
	}
	for _, c := range counters {
		if mc, ok := c.(Memberer); ok {
			if ms := mc.Members(); ms != nil {
				ch <- prometheus.MustNewConstMetric(m.members, prometheus.GaugeValue, float64(len(ms)))
				break
			}
		}
	}
	var followed, orphaned int
	for _, c := range counters {
		f, o := c.EntryCounts()
		followed += f
		orphaned += o
	}
	ch <- prometheus.MustNewConstMetric(m.entries, prometheus.GaugeValue, float64(followed), "followed")
	ch <- prometheus.MustNewConstMetric(m.entries, prometheus.GaugeValue, float64(orphaned), "orphaned")
	byJob := map[string]scheduler.EntryStateCounts{}
	for _, c := range counters {
		st, ok := c.(EntryStater)
		if !ok {
			continue
		}
		for job, n := range st.EntryStates() {
			sum := byJob[job]
			sum.Active, sum.Paused, sum.Ended = sum.Active+n.Active, sum.Paused+n.Paused, sum.Ended+n.Ended
			byJob[job] = sum
		}
	}
	for job, n := range byJob {
		ch <- prometheus.MustNewConstMetric(m.jobEntries, prometheus.GaugeValue, float64(n.Active), job, "active")
		ch <- prometheus.MustNewConstMetric(m.jobEntries, prometheus.GaugeValue, float64(n.Paused), job, "paused")
		ch <- prometheus.MustNewConstMetric(m.jobEntries, prometheus.GaugeValue, float64(n.Ended), job, "ended")
	}
}
