package metrics

import "github.com/prometheus/client_golang/prometheus"

// EntryCounter counts schedule entries: a *scheduler.Scheduler is one.
type EntryCounter interface {
	// EntryCounts returns how many entries this instance follows and how many
	// stored entries belong to jobs it does not declare.
	EntryCounts() (followed, orphaned int)
}

// CountEntries makes the collectors export entries{state="followed"} and
// entries{state="orphaned"}, read from s at every scrape (added up over every s
// given, for a process with more than one scheduler). A nil s is ignored.
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
	var followed, orphaned int
	for _, c := range counters {
		f, o := c.EntryCounts()
		followed += f
		orphaned += o
	}
	ch <- prometheus.MustNewConstMetric(m.entries, prometheus.GaugeValue, float64(followed), "followed")
	ch <- prometheus.MustNewConstMetric(m.entries, prometheus.GaugeValue, float64(orphaned), "orphaned")
}
