package kvlease

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"strconv"
	"time"

	"github.com/nats-io/nats.go/jetstream"

	"github.com/anarchon/anarchon/internal/natsutil"
)

// layout is the version of the bucket's set-up, kept in its stream's metadata under
// natsutil.LayoutKey. Raise it when a release changes what the bucket holds or how
// its stream is configured. A bucket set up by a newer release is left alone, so
// the releases of a rolling upgrade do not rewrite it back and forth.
// Layout 2 stores machine.Run in the run records and adds the job keys; Init
// refuses a bucket of layout 1 (ErrOlderLayout).
const layout = "2"

// Init checks that the server has JetStream and creates the bucket, or brings an
// existing one to the store's configuration. It is idempotent and safe to call
// concurrently, from this process and from every other instance at once; once it
// succeeded it returns at once. Without JetStream it fails with an error wrapping
// ErrNoJetStream. A ctx without deadline gets the store's call timeout (WithCallTimeout).
//
// A request that gets no answer (a timeout, no responders, a cluster with no leader
// yet) or that meets a concurrent create or update is sent again, with backoff,
// until ctx ends. Init returns only once a stream information request shows the
// bucket configured as the store needs. It sends no update when the bucket already
// is, and it leaves alone a bucket set up by a newer release of this package.
func (s *Store) Init(ctx context.Context) error {
	if s.b.Load() != nil {
		return nil
	}
	ctx, cancel := s.callContext(ctx)
	defer cancel()
	s.initMu.Lock()
	defer s.initMu.Unlock()
	if s.b.Load() != nil {
		return nil
	}
	if err := s.checkJetStream(ctx); err != nil {
		return err
	}
	if err := s.checkOldRecords(ctx); err != nil {
		return err
	}
	res, err := natsutil.EnsureStream(ctx, clockedStreams{s.js, &s.clock}, natsutil.StreamSetup{
		Config:    s.streamConfig(),
		Reconcile: s.reconcile,
		Check:     s.checkServer,
		Attempt:   s.opts.attempt,
	})
	if err != nil {
		return fmt.Errorf("kvlease: create or update bucket %q: %w", s.opts.bucket, err)
	}
	var kv jetstream.KeyValue
	_, err = natsutil.Retry(ctx, s.opts.attempt, func(err error) bool {
		// The bucket was just shown to exist: a "not found" is an answer from a
		// server that has not caught up yet.
		return natsutil.Unanswered(err) || errors.Is(err, jetstream.ErrBucketNotFound)
	}, func(ctx context.Context) (err error) {
		kv, err = s.js.KeyValue(ctx, s.opts.bucket)
		return err
	})
	if err != nil {
		return fmt.Errorf("kvlease: bind bucket %q: %w", s.opts.bucket, err)
	}
	cfg := res.Stream.CachedInfo().Config
	nb := &bucket{kv: kv, stream: res.Stream, prefix: "$KV." + s.opts.bucket + ".", direct: cfg.AllowDirect && cfg.Replicas <= 1, chain: cfg.Replicas <= 1}
	nb.pairs = s.pairWriterFor(nb)
	s.b.Store(nb)
	return nil
}

// checkOldRecords notes whether an existing bucket of an older layout holds
// leases or run records, which this release cannot read (reconcile refuses it).
// An older bucket without them (entries and pauses only) is brought up to date.
func (s *Store) checkOldRecords(ctx context.Context) error {
	var st jetstream.Stream
	_, err := natsutil.Retry(ctx, s.opts.attempt, natsutil.Unanswered, func(ctx context.Context) (err error) {
		st, err = s.js.Stream(ctx, "KV_"+s.opts.bucket)
		return err
	})
	if errors.Is(err, jetstream.ErrStreamNotFound) || err == nil && natsutil.CompareLayout(st.CachedInfo().Config.Metadata, layout) != natsutil.LayoutOlder {
		return nil
	}
	if err != nil {
		return fmt.Errorf("kvlease: read bucket %q: %w", s.opts.bucket, err)
	}
	for _, keys := range []string{runPrefix + ">", leasePrefix + ">"} {
		var info *jetstream.StreamInfo
		_, err := natsutil.Retry(ctx, s.opts.attempt, natsutil.Unanswered, func(ctx context.Context) (err error) {
			info, err = st.Info(ctx, jetstream.WithSubjectFilter("$KV."+s.opts.bucket+"."+keys))
			return err
		})
		if err != nil {
			return fmt.Errorf("kvlease: read bucket %q: %w", s.opts.bucket, err)
		}
		if len(info.State.Subjects) > 0 {
			s.oldRecords.Store(true)
		}
	}
	return nil
}

// checkJetStream asks for the account's JetStream information until it gets an
// answer: a cluster that has not elected its meta leader yet answers nothing, or
// 10008.
func (s *Store) checkJetStream(ctx context.Context) error {
	_, err := natsutil.Retry(ctx, s.opts.attempt, func(err error) bool {
		return !natsutil.NoJetStream(err) && natsutil.Unanswered(err)
	}, func(ctx context.Context) error {
		_, err := s.js.AccountInfo(ctx)
		return err
	})
	switch {
	case err == nil:
		return nil
	case natsutil.NoJetStream(err):
		return fmt.Errorf("%w: %w", ErrNoJetStream, err)
	}
	return fmt.Errorf("kvlease: check JetStream: %w", err)
}

// streamConfig is the bucket's stream: a KV bucket (one message per key, rollups for
// purges) with per-message TTLs and expiry markers. Replicated, it has no direct
// gets, so every read is answered by the stream leader. Such a read is never behind
// a write already acknowledged; followers answering direct gets can be. A single
// replica answers direct gets, which are consistent there and about three times
// faster.
func (s *Store) streamConfig() jetstream.StreamConfig {
	return jetstream.StreamConfig{
		Name:                   "KV_" + s.opts.bucket,
		Description:            "anarchon leases (kvlease)",
		Subjects:               []string{"$KV." + s.opts.bucket + ".>"},
		MaxMsgsPerSubject:      1,
		MaxMsgs:                -1,
		MaxBytes:               -1,
		MaxMsgSize:             -1,
		MaxConsumers:           -1,
		Storage:                s.opts.storage,
		Replicas:               s.opts.replicas,
		Discard:                jetstream.DiscardNew,
		Duplicates:             2 * time.Minute,
		AllowRollup:            true,
		DenyDelete:             true,
		AllowDirect:            s.opts.replicas == 1,
		AllowMsgTTL:            true,
		SubjectDeleteMarkerTTL: markerTTL,
		Metadata:               map[string]string{natsutil.LayoutKey: layout},
	}
}

// reconcile returns the update that brings an existing bucket's stream to
// streamConfig, and the names of the settings it changes: none when the stream
// already is as the store needs it. Settings the store does not rely on (a
// description, placement, compression, other metadata) are kept. A bucket set up by
// a newer release is left as it is, if the store can use it.
func (s *Store) reconcile(have jetstream.StreamConfig) (jetstream.StreamConfig, []string, error) {
	want := s.streamConfig()
	cannot := func(setting, why string) error {
		return fmt.Errorf("the bucket's stream %q has %s, which the store cannot use and will not change (%s)", want.Name, setting, why)
	}
	switch {
	case have.Mirror != nil:
		return have, nil, cannot("a mirror", "a mirror takes no writes")
	case have.Sealed:
		return have, nil, cannot("sealed set", "a sealed stream takes no writes")
	case have.Retention != jetstream.LimitsPolicy:
		return have, nil, cannot("retention "+have.Retention.String(), "retention cannot change; delete the bucket")
	case have.Storage != want.Storage:
		return have, nil, cannot(have.Storage.String()+" storage", "storage cannot change; delete the bucket or configure WithStorage("+have.Storage.String()+")")
	}
	if natsutil.CompareLayout(have.Metadata, layout) == natsutil.LayoutOlder && s.oldRecords.Load() {
		return have, nil, fmt.Errorf("%w: bucket %q has layout %q, this release writes %q and cannot read it: "+
			"stop every replica, then delete the bucket or purge its lease., run., buffer. and count. keys (docs/backends.md, Upgrading the lease bucket)",
			ErrOlderLayout, s.opts.bucket, have.Metadata[natsutil.LayoutKey], layout)
	}
	if natsutil.CompareLayout(have.Metadata, layout) == natsutil.LayoutNewer {
		if !slices.Contains(have.Subjects, want.Subjects[0]) || !have.AllowMsgTTL {
			return have, nil, cannot("the layout "+strconv.Quote(have.Metadata[natsutil.LayoutKey])+" of a newer release without per-message TTLs on "+want.Subjects[0],
				"run the newer release on every instance")
		}
		return have, nil, nil
	}
	upd := have
	var c natsutil.Changes
	c.Match(&upd, have, want, natsutil.Subjects, natsutil.MaxMsgsPerSubject, natsutil.MaxMsgs, natsutil.MaxBytes)
	c.Set("max_msg_size", have.MaxMsgSize != want.MaxMsgSize, func() { upd.MaxMsgSize = want.MaxMsgSize })
	c.Set("max_age", have.MaxAge != 0, func() { upd.MaxAge = 0 })
	c.Match(&upd, have, want, natsutil.Replicas, natsutil.Discard, natsutil.DuplicateWindow)
	c.Set("allow_rollup_hdrs", !have.AllowRollup, func() { upd.AllowRollup = true })
	c.Set("deny_delete", !have.DenyDelete, func() { upd.DenyDelete = true })
	c.Set("deny_purge", have.DenyPurge, func() { upd.DenyPurge = false })
	c.Set("no_ack", have.NoAck, func() { upd.NoAck = false })
	c.Match(&upd, have, want, natsutil.AllowDirect)
	c.Set("mirror_direct", have.MirrorDirect, func() { upd.MirrorDirect = false })
	c.Match(&upd, have, want, natsutil.AllowMsgTTL)
	c.Set("subject_delete_marker_ttl", have.SubjectDeleteMarkerTTL != want.SubjectDeleteMarkerTTL,
		func() { upd.SubjectDeleteMarkerTTL = want.SubjectDeleteMarkerTTL })
	c.Match(&upd, have, want, natsutil.Metadata)
	return upd, c, nil
}

// checkServer judges the configuration the server answered a create or update
// with: a server that does not know per-message TTLs (before 2.11) drops them
// silently, which would make every lease permanent.
func (s *Store) checkServer(got jetstream.StreamConfig) error {
	if !got.AllowMsgTTL || got.SubjectDeleteMarkerTTL != markerTTL {
		return fmt.Errorf("%w: bucket %q", ErrUnsupportedServer, s.opts.bucket)
	}
	return nil
}

// clockedStreams reads the server's clock off every stream information answer, so
// that Init leaves the store with a fresh sample.
type clockedStreams struct {
	natsutil.Streams
	clock *serverClock
}

func (c clockedStreams) Stream(ctx context.Context, name string) (jetstream.Stream, error) {
	sent := time.Now()
	st, err := c.Streams.Stream(ctx, name)
	if err == nil {
		if info := st.CachedInfo(); info != nil {
			c.clock.observe(info.TimeStamp, sent, time.Now())
		}
	}
	return st, err
}
