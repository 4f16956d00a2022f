package kvlease

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"slices"
	"strings"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"

	"github.com/anarchon/anarchon/backend"
	"github.com/anarchon/anarchon/internal/natsutil"
)

var _ backend.Pauser = (*Store)(nil)

// Pause keys: pause.<job> for one job, pause.=all for all jobs ('=' is not in the
// base64url alphabet of job tokens, so no job's key can be it).
const (
	pausePrefix = "pause."
	pauseAllKey = pausePrefix + "=all"
)

func pauseKey(job string) string {
	if job == "" {
		return pauseAllKey
	}
	return pausePrefix + jobToken(job)
}

// pauseRecord is the value of a pause key.
type pauseRecord struct {
	V       int    `json:"v"`
	Job     string `json:"job"`
	Reason  string `json:"reason"`
	By      string `json:"by,omitempty"`
	AtMS    int64  `json:"at_ms,omitempty"`
	UntilMS int64  `json:"until_ms,omitempty"`
}

func (r pauseRecord) pause() backend.Pause {
	p := backend.Pause{Job: r.Job, Reason: r.Reason, By: r.By}
	if r.AtMS != 0 {
		p.At = time.UnixMilli(r.AtMS).UTC()
	}
	if r.UntilMS != 0 {
		p.Until = time.UnixMilli(r.UntilMS).UTC()
	}
	return p
}

// SetPause stores p under its job's pause key in the bucket, replacing the pause
// there. A pause with Until expires by itself (a per-message TTL a little past
// Until). One without lives until ClearPause. So does one whose Until is further
// than a TTL can reach (natsutil.MaxTTL, a century): its key stays, but every
// reader ends the pause at Until all the same (backend.Pause.InForce).
func (s *Store) SetPause(ctx context.Context, p backend.Pause) error {
	if p.Job != "" {
		if err := backend.ValidateJobName(p.Job); err != nil {
			return err
		}
	}
	ctx, cancel := s.callContext(ctx)
	defer cancel()
	b, err := s.bucketFor(ctx)
	if err != nil {
		return err
	}
	rec := pauseRecord{V: recordVersion, Job: p.Job, Reason: p.Reason, By: p.By}
	if !p.At.IsZero() {
		rec.AtMS = p.At.UnixMilli()
	}
	var opts []jetstream.PublishOpt
	if !p.Until.IsZero() {
		rec.UntilMS = p.Until.UnixMilli()
		left := time.Until(p.Until) // saturates past 2262
		if left <= 0 {
			return fmt.Errorf("%w: kvlease: pause until %s is not in the future", backend.ErrInvalidOption, p.Until.Format(time.RFC3339))
		}
		if left < natsutil.MaxTTL-time.Second {
			opts = append(opts, jetstream.WithMsgTTL(natsutil.TTL(left+time.Second)))
		}
	}
	data, err := json.Marshal(rec)
	if err != nil {
		return fmt.Errorf("kvlease: encode pause: %w", err)
	}
	m := nats.NewMsg(b.subject(pauseKey(p.Job)))
	m.Data = data
	err = s.attempt(ctx, func(ctx context.Context) error {
		_, err := s.js.PublishMsg(ctx, m, append(opts, jetstream.WithRetryAttempts(0))...)
		return err
	})
	if err != nil {
		return fmt.Errorf("kvlease: store pause of %q: %w", p.Job, err)
	}
	return nil
}

// ClearPause removes job's pause ("" : the all-jobs pause).
func (s *Store) ClearPause(ctx context.Context, job string) error {
	ctx, cancel := s.callContext(ctx)
	defer cancel()
	b, err := s.bucketFor(ctx)
	if err != nil {
		return err
	}
	err = s.attempt(ctx, func(ctx context.Context) error {
		return b.kv.Purge(ctx, pauseKey(job), jetstream.PurgeTTL(markerTTL))
	})
	if err != nil {
		return fmt.Errorf("kvlease: clear pause of %q: %w", job, err)
	}
	return nil
}

// Pauses returns the stored pauses, read from the stream leader.
func (s *Store) Pauses(ctx context.Context) ([]backend.Pause, error) {
	ctx, cancel := s.callContext(ctx)
	defer cancel()
	b, err := s.bucketFor(ctx)
	if err != nil {
		return nil, err
	}
	info, err := s.sampleClock(ctx, b, jetstream.WithSubjectFilter(b.subject(pausePrefix+">")))
	if err != nil {
		return nil, fmt.Errorf("kvlease: list pauses: %w", err)
	}
	var out []backend.Pause
	for subj := range info.State.Subjects {
		e, err := s.read(ctx, b, strings.TrimPrefix(subj, b.prefix))
		if err != nil {
			return nil, err
		}
		if p, ok := decodePause(e.put, e.value); ok {
			out = append(out, p)
		}
	}
	sortPauses(out)
	return out, nil
}

// WatchPauses calls fn with the stored pauses once the watch has read them, and
// again after every change (a pause stored, cleared, or expired), until ctx ends.
func (s *Store) WatchPauses(ctx context.Context, fn func([]backend.Pause)) error {
	b, err := s.bucketFor(ctx)
	if err != nil {
		return err
	}
	w, err := b.kv.WatchFiltered(ctx, []string{pausePrefix + ">"})
	if err != nil {
		return fmt.Errorf("kvlease: watch pauses: %w", err)
	}
	defer stopWatcher(w)
	byKey := map[string]backend.Pause{}
	ready := false
	report := func() {
		all := make([]backend.Pause, 0, len(byKey))
		for _, p := range byKey {
			all = append(all, p)
		}
		sortPauses(all)
		fn(all)
	}
	for {
		select {
		case <-ctx.Done():
			return nil
		case <-s.done.Done():
			return ErrClosed
		case e, ok := <-w.Updates():
			if !ok {
				if ctx.Err() != nil {
					return nil
				}
				return errors.New("kvlease: the pause watch ended")
			}
			if e == nil { // the stored values have been delivered
				ready = true
				report()
				continue
			}
			if p, ok := decodePause(e.Operation() == jetstream.KeyValuePut, e.Value()); ok {
				byKey[e.Key()] = p
			} else {
				delete(byKey, e.Key())
			}
			if ready {
				report()
			}
		}
	}
}

// decodePause reads a pause value; a marker, or a value that is not a pause this
// version can read, is no pause.
func decodePause(put bool, value []byte) (backend.Pause, bool) {
	if !put {
		return backend.Pause{}, false
	}
	var rec pauseRecord
	if err := json.Unmarshal(value, &rec); err != nil || rec.Reason == "" {
		return backend.Pause{}, false
	}
	return rec.pause(), true
}

func sortPauses(all []backend.Pause) {
	slices.SortFunc(all, func(x, y backend.Pause) int { return strings.Compare(x.Job, y.Job) })
}
