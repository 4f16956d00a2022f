package kvlease

// Subjects returns the subjects of the store's bucket, $KV.<bucket>.>, whatever
// the jobs: every lease and run record of every job is a key there. A service
// that shares the store's connection (package fleet) checks that none of its own
// subjects overlaps them.
func (s *Store) Subjects([]string) []string {
	return []string{"$KV." + s.opts.bucket + ".>"}
}
