package jetstream

// subjectLister is what LeasedBackend.Subjects asks its run store for, when the
// store says (kvlease.Store does).
type subjectLister interface{ Subjects(jobs []string) []string }

// Subjects returns the subjects the streams of these jobs listen on, one pattern
// per job: <subject prefix>.<job token>.>, the only subjects the backend publishes
// to besides the JetStream API. A service that shares the backend's connection
// (package fleet) checks that none of its own subjects overlaps them.
func (b *Backend) Subjects(jobs []string) []string {
	out := make([]string, 0, len(jobs))
	for _, job := range jobs {
		out = append(out, b.cfg.namesFor(job).all)
	}
	return out
}

// Subjects returns Backend.Subjects and the run store's subjects, when the store
// lists them (kvlease.Store: its bucket).
func (b *LeasedBackend) Subjects(jobs []string) []string {
	out := b.Backend.Subjects(jobs)
	if l, ok := b.runs.(subjectLister); ok {
		out = append(out, l.Subjects(jobs)...)
	}
	return out
}
