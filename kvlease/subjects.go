package kvlease

import (
	"github.com/nats-io/nats.go/jetstream"

	"github.com/anarchon/anarchon/internal/natsutil"
	"github.com/anarchon/anarchon/internal/option"
)

// Subjects returns the subjects of the store's bucket, $KV.<bucket>.>, whatever
// the jobs: every lease and run record of every job is a key there. A service
// that shares the store's connection (package fleet) checks that none of its own
// subjects overlaps them.
func (s *Store) Subjects([]string) []string {
	return []string{"$KV." + s.opts.bucket + ".>"}
}

// Permissions returns the subjects a store made with opts publishes to (NATS
// publish permissions), on an account with the default JetStream API prefix: the
// account information, and its bucket's API and keys (natsutil.BucketPermissions).
// Its only subscriptions are inboxes.
func Permissions(opts ...Option) ([]string, error) {
	o := defaultOptions()
	if err := option.Apply(&o, opts); err != nil {
		return nil, err
	}
	return append([]string{jetstream.DefaultAPIPrefix + "INFO"}, natsutil.BucketPermissions(jetstream.DefaultAPIPrefix, o.bucket, ">")...), nil
}
