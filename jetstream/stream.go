package jetstream

import (
	"context"
	"errors"
	"fmt"
	"maps"
	"slices"
	"strconv"
	"time"
	"unicode/utf8"

	natsjs "github.com/nats-io/nats.go/jetstream"

	"github.com/anarchon/anarchon/backend"
	"github.com/anarchon/anarchon/internal/natsutil"
)

// Stream metadata that marks a stream as anarchon's: the job it holds and the layout
// of its subjects and records. Raise layout when a release changes either. Streams
// of an older layout are brought up to it. Streams of a newer one are left as they
// are, so that the releases of a rolling upgrade do not rewrite them back and forth,
// and used when they can be.
const (
	metaJob    = "anarchon.job"
	metaLayout = natsutil.LayoutKey
	layout     = "1"
)

// PrepareJob creates the job's stream, or updates it when it exists: the stream is
// one per job, named <stream prefix>_<encoded job>, listening on
// <subject prefix>.<encoded job>.>. It is idempotent and safe to call from every
// instance at once. A request that gets no answer (a timeout, no responders, a
// cluster or stream with no leader yet) is followed by a fresh read and decision,
// with backoff, until ctx ends. So is a create that meets a concurrent create, and
// an update that meets a concurrent one. It returns once a stream information
// request shows a stream it can use, and it never sends an update that would
// change nothing.
//
// A stream this backend created (its metadata names the job) has its duplicate
// window, history size, replicas and limits brought to what job asks for, and its
// layout, when older, to this release's. A stream of a newer release's layout is not
// changed, and is used when it can work, like a stream with the same name that
// anarchon did not create; otherwise PrepareJob returns a *StreamConflictError
// naming the setting. Settings that cannot change (storage, retention, a mirror, a
// seal) give the same error for anarchon's own streams.
//
// The stream's metadata "anarchon.claims" holds its claim mode: "plain",
// "leases" or "mixed" (WithMixedFleet). PrepareJob refuses a stream in the other
// kind's mode with an error matching ErrMixedFleet, and writes its own mode
// into a stream it may change. A stream without a mode is taken for its own.
func (b *Backend) PrepareJob(ctx context.Context, job backend.JobLimits) error {
	if b.closed.Load() {
		return ErrClosed
	}
	if err := b.CheckJob(job); err != nil {
		return err
	}
	ctx, cancel := b.callContext(ctx)
	defer cancel()

	n := b.cfg.namesFor(job.Job)
	window, fitted := b.windowFor(job)
	want := b.streamConfig(job.Job, n, window, historySize(job.Retention.Size))
	modeSent := false // the claim mode is written once: no fight with a concurrent start
	res, err := natsutil.EnsureStream(ctx, b.js, natsutil.StreamSetup{
		Config: want,
		Reconcile: func(have natsjs.StreamConfig) (natsjs.StreamConfig, []string, error) {
			mine, err := b.checkStream(job.Job, n, &have, window)
			if err == nil {
				err = b.checkMode(job.Job, n.stream, have.Metadata)
			}
			if err != nil || !mine {
				return have, nil, err
			}
			w := want
			if modeSent {
				w.Metadata = maps.Clone(want.Metadata)
				w.Metadata[metaClaims] = have.Metadata[metaClaims]
				if _, set := have.Metadata[metaClaims]; !set {
					delete(w.Metadata, metaClaims)
				}
			}
			modeSent = modeSent || have.Metadata[metaClaims] != want.Metadata[metaClaims]
			upd, changes := b.reconcile(have, w, fitted)
			return upd, changes, nil
		},
		Attempt: b.cfg.attemptTimeout,
		OnRetry: func(op string, retry int, err error) {
			b.cfg.log.Debug("jetstream: no definite answer while preparing a job stream, asking again",
				"stream", n.stream, "job", job.Job, "request", op, "retry", retry, "error", err)
		},
	})
	if err != nil {
		if conflict := (*StreamConflictError)(nil); errors.As(err, &conflict) || errors.Is(err, ErrMixedFleet) {
			return err
		}
		return fmt.Errorf("jetstream: prepare stream %q for job %q: %w", n.stream, job.Job, err)
	}
	info := res.Stream.CachedInfo()
	ours := info.Config.Metadata[metaJob] == job.Job
	switch {
	case len(res.Changes) > 0:
		b.cfg.log.Info("jetstream: updated job stream", "stream", n.stream, "job", job.Job, "changes", res.Changes, "retries", res.Retries)
	case !ours:
		b.cfg.log.Info("jetstream: using a stream anarchon did not create, unchanged", "stream", n.stream, "job", job.Job)
	case natsutil.CompareLayout(info.Config.Metadata, layout) == natsutil.LayoutNewer:
		ours = false // a newer release's: not for this one to resize either
		b.cfg.log.Info("jetstream: using a job stream of a newer release's layout, unchanged",
			"stream", n.stream, "job", job.Job, "layout", info.Config.Metadata[metaLayout], "ours", layout)
	}
	st := &jobStream{
		names:  n,
		job:    job.Job,
		stream: res.Stream,
		streamState: &streamState{
			timeout: job.Timeout,
			ours:    ours,
			size:    info.Config.MaxMsgsPerSubject,
			maxMsg:  info.Config.MaxMsgSize,
		},
	}
	st.setWindow(info.Config.Duplicates)
	st.direct.Store(info.Config.AllowDirect)
	st.setMode(info.Config.Metadata)
	b.remember(st)
	return nil
}

// historySize is the stream's MaxMsgsPerSubject for a history size (0: unbounded).
func historySize(size int) int64 {
	if size <= 0 {
		return -1
	}
	return int64(size)
}

// streamConfig is the configuration of a new job stream.
//
// All of the job's records share the stream. The per-subject limit bounds history:
//   - <p>.<job>.claim.<slot ms>: the claims of one slot, de-duplicated by Nats-Msg-Id.
//     There is one subject per slot, so the per-subject limit never evicts a claim.
//     Each claim expires by its own Nats-TTL, at least the duplicate window.
//   - <p>.<job>.result: stored results, the newest MaxMsgsPerSubject kept, each
//     with Nats-TTL = the history TTL when there is one.
//   - <p>.<job>.manual and <p>.<job>.lease: manual runs and lease-won claims, bounded
//     like results.
//   - <p>.<job>.entry.<entry>.>: the same subjects for each of the job's entries.
//
// No stream-wide MaxAge: it would expire claims and results alike. AllowDirect is
// on, for History's batched reads (one request for many messages). A direct get
// may be served by a follower that has not applied the latest claim yet. So the
// read back of a claim goes to the leader (STREAM.MSG.GET), never direct. An older
// release turns AllowDirect off again when it prepares the job (same layout):
// History then reads one message at a time, as that release does.
func (b *Backend) streamConfig(job string, n names, window time.Duration, size int64) natsjs.StreamConfig {
	return natsjs.StreamConfig{
		Name:              n.stream,
		Description:       "anarchon: claims, manual runs and results of job " + strconv.Quote(truncate(job, 200)),
		Subjects:          []string{n.all},
		Retention:         natsjs.LimitsPolicy,
		Discard:           natsjs.DiscardOld,
		MaxMsgs:           -1,
		MaxBytes:          b.cfg.maxBytes,
		MaxAge:            0,
		MaxMsgsPerSubject: size,
		Storage:           b.cfg.storage,
		Replicas:          b.cfg.replicas,
		Duplicates:        window,
		AllowMsgTTL:       true,
		AllowDirect:       true,
		Metadata:          map[string]string{metaJob: job, metaLayout: layout, metaClaims: b.claimMode()},
	}
}

// minMsgSize is the smallest MaxMsgSize a job's records fit in.
func minMsgSize(job string) int32 { return int32(2*len(job) + 4096) }

// checkStream decides whether an existing stream can hold job. It reports whether
// reconcile may change the stream: it is anarchon's, of this release's layout or an
// older one. Every setting of any other stream (one anarchon did not create, or one
// of a newer release's layout) must already work.
func (b *Backend) checkStream(job string, n names, cfg *natsjs.StreamConfig, window time.Duration) (bool, error) {
	conflict := func(setting, have, want, hint string) error {
		return &StreamConflictError{Stream: n.stream, Job: job, Setting: setting, Have: have, Want: want, Hint: hint}
	}
	owner, ours := cfg.Metadata[metaJob]
	if ours && owner != job {
		return false, conflict("metadata "+metaJob, strconv.Quote(truncate(owner, 200)), strconv.Quote(truncate(job, 200)),
			"two job names map to one stream name; rename one of the jobs or use another WithStreamPrefix")
	}
	const del = "delete the stream (its history goes with it) or use another WithStreamPrefix"
	switch {
	case cfg.Mirror != nil:
		return ours, conflict("mirror", strconv.Quote(cfg.Mirror.Name), "no mirror", "a mirror takes no publishes; "+del)
	case cfg.Sealed:
		return ours, conflict("sealed", "true", "false", "a sealed stream takes no publishes; "+del)
	case cfg.Retention != natsjs.LimitsPolicy:
		return ours, conflict("retention", cfg.Retention.String(), "limits", "other policies delete claims early; "+del)
	case cfg.NoAck:
		return ours, conflict("no_ack", "true", "false", "claims are decided by the publish acknowledgement; "+del)
	case cfg.AllowMsgCounter:
		return ours, conflict("allow_msg_counter", "true", "false", del)
	case cfg.SubjectTransform != nil:
		return ours, conflict("subject_transform", cfg.SubjectTransform.Source+" -> "+cfg.SubjectTransform.Destination, "none", del)
	case ours && cfg.Storage != b.cfg.storage:
		return ours, conflict("storage", cfg.Storage.String(), b.cfg.storage.String(),
			"storage cannot change; "+del+", or configure WithStorage("+cfg.Storage.String()+")")
	}
	newer := ours && natsutil.CompareLayout(cfg.Metadata, layout) == natsutil.LayoutNewer
	if ours && !newer {
		return true, nil // the rest, reconcile updates
	}
	hint := "the stream was not created by anarchon (no " + metaJob + " metadata), so it is not changed; fix it or " + del
	if newer {
		hint = "the stream has the layout " + strconv.Quote(truncate(cfg.Metadata[metaLayout], 20)) + " of a newer release (this one has " + layout +
			"), so it is not changed; run the newer release on every instance"
	}
	switch {
	case !slices.Contains(cfg.Subjects, n.all):
		return false, conflict("subjects", fmt.Sprint(cfg.Subjects), "to include "+strconv.Quote(n.all), hint)
	case cfg.Duplicates < window:
		return false, conflict("duplicate_window", cfg.Duplicates.String(), "at least "+window.String(), hint)
	case !cfg.AllowMsgTTL:
		return false, conflict("allow_msg_ttl", "false", "true", hint)
	case cfg.Discard != natsjs.DiscardOld:
		return false, conflict("discard", cfg.Discard.String(), "old", hint)
	case cfg.MaxAge > 0 && cfg.MaxAge < window:
		return false, conflict("max_age", cfg.MaxAge.String(), "0 or at least "+window.String(), hint)
	case cfg.MaxMsgSize > 0 && cfg.MaxMsgSize < minMsgSize(job):
		return false, conflict("max_msg_size", strconv.Itoa(int(cfg.MaxMsgSize)), "at least "+strconv.Itoa(int(minMsgSize(job))), hint)
	}
	return false, nil
}

// reconcile returns have with the settings this backend manages set as in want, and
// the names of those that changed. Settings it does not manage (placement,
// compression, a description, other metadata) are kept. The layout in the metadata
// is only ever raised: checkStream keeps streams of a newer layout from here. A
// fitted window only widens the stream's, so that instances that fit it
// differently (another release, other options) never narrow it back and forth.
func (b *Backend) reconcile(have, want natsjs.StreamConfig, fitted bool) (natsjs.StreamConfig, []string) {
	if fitted && have.Duplicates > want.Duplicates {
		want.Duplicates = have.Duplicates
	}
	upd := have
	var c natsutil.Changes
	c.Match(&upd, have, want, natsutil.Subjects, natsutil.DuplicateWindow, natsutil.MaxMsgsPerSubject,
		natsutil.Replicas, natsutil.MaxBytes, natsutil.MaxMsgs)
	c.Set("max_age", have.MaxAge != 0 && have.MaxAge < want.Duplicates, func() { upd.MaxAge = 0 })
	// want has discard old, message TTLs on and direct gets on.
	c.Match(&upd, have, want, natsutil.Discard, natsutil.AllowMsgTTL, natsutil.AllowDirect)
	c.Set("max_msg_size", have.MaxMsgSize > 0 && have.MaxMsgSize < minMsgSize(want.Metadata[metaJob]), func() { upd.MaxMsgSize = -1 })
	c.Match(&upd, have, want, natsutil.Metadata)
	return upd, c
}

// truncate cuts s to at most n bytes without splitting a UTF-8 sequence.
func truncate(s string, n int) string {
	if len(s) <= n {
		return s
	}
	for n > 0 && !utf8.RuneStart(s[n]) {
		n--
	}
	return s[:n] + "…"
}
