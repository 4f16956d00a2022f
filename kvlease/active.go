package kvlease

import (
	"context"
	"fmt"
	"slices"
	"strings"

	"github.com/nats-io/nats.go/jetstream"

	"github.com/anarchon/anarchon/scheduler"
)

// Active lists job's unfinished runs, oldest slot first. It lists the job's keys
// with one StreamInfo request and reads the run records and their leases from the
// stream leader, so it never misses a write already acknowledged. Live tells whether
// the run's lease key holds a live lease; Expires is when that lease ends, or
// roughly when it ended (its marker's time) while a marker is left.
func (s *Store) Active(ctx context.Context, job string) ([]scheduler.ActiveRun, error) {
	if err := scheduler.ValidateJobName(job); err != nil {
		return nil, err
	}
	ctx, cancel := s.callContext(ctx)
	defer cancel()
	b, err := s.bucketFor(ctx)
	if err != nil {
		return nil, err
	}
	info, err := s.sampleClock(ctx, b, jetstream.WithSubjectFilter(b.subject(runPrefix+jobToken(job)+".*")))
	if err != nil {
		return nil, fmt.Errorf("kvlease: active %q: %w", job, err)
	}
	var out []scheduler.ActiveRun
	for subj := range info.State.Subjects {
		_, _, slot, err := parseKey(strings.TrimPrefix(subj, b.prefix))
		if err != nil {
			continue // not of this layout
		}
		k := keysFor(job, slot)
		run, err := s.readRun(ctx, b, k)
		if err != nil {
			return nil, err
		}
		if run.rec == nil || run.rec.finished() {
			continue
		}
		ls, err := s.readLease(ctx, b, k)
		if err != nil {
			return nil, err
		}
		r := run.rec
		a := scheduler.ActiveRun{
			Slot: slot, Token: r.Token, Instance: r.Instance, Attempt: r.Attempt, Fence: r.Fence,
			Live: ls.rec != nil, Expires: ls.expires(),
		}
		if !a.Live && ls.rev != 0 {
			a.Expires = ls.created
		}
		out = append(out, a)
	}
	slices.SortFunc(out, func(x, y scheduler.ActiveRun) int { return x.Slot.Compare(y.Slot) })
	return out, nil
}

// entryFromKV turns a watched KV entry into an entry.
func entryFromKV(e jetstream.KeyValueEntry) entry {
	return entry{
		rev:     e.Revision(),
		created: e.Created(),
		put:     e.Operation() == jetstream.KeyValuePut,
		value:   e.Value(),
	}
}

// stopWatcher stops w and drains its channel until nats.go closes it, so that its
// delivery callback is never left blocked on a full channel.
func stopWatcher(w jetstream.KeyWatcher) {
	_ = w.Stop()
	go func() {
		for range w.Updates() {
		}
	}()
}
