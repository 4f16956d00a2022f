package jetstream

import (
	"context"
	"errors"
	"fmt"
	"time"

	"github.com/nats-io/nats.go"
	natsjs "github.com/nats-io/nats.go/jetstream"

	"github.com/anarchon/anarchon/backend"
	"github.com/anarchon/anarchon/internal/backendutil"
	"github.com/anarchon/anarchon/internal/natsutil"
)

// RecordManualRun records a RunNow run on the job's manual subject, with no
// de-duplication (each run has its own token), and returns in.Slot. The record
// expires after in.HistoryTTL when set; the newest history-size records are kept.
func (b *Backend) RecordManualRun(ctx context.Context, in backend.ClaimInput) (time.Time, error) {
	if err := backendutil.CheckClaim("jetstream", in.Job, in.Token); err != nil {
		return time.Time{}, err
	}
	ctx, cancel := b.callContext(ctx)
	defer cancel()
	st, err := b.stream(ctx, in.Job, "record manual run")
	if err != nil {
		return time.Time{}, err
	}
	msg := &nats.Msg{Subject: st.manual, Header: nats.Header{}, Data: encodeClaim(in, true, time.Now())}
	if in.HistoryTTL > 0 {
		msg.Header.Set(natsjs.MsgTTLHeader, natsutil.TTLHeader(in.HistoryTTL))
	}
	if err := b.publish(ctx, st, msg); err != nil {
		return time.Time{}, fmt.Errorf("jetstream: record manual run of job %q on stream %q: %w", in.Job, st.names.stream, err)
	}
	return in.Slot, nil
}

// SaveResult stores r on the job's result subject. The stream keeps the newest
// keep.Size results (its per-subject limit, set by PrepareJob and updated here when
// keep.Size changes on a stream anarchon created). With keep.TTL each result also
// expires after keep.TTL (a per-message TTL, in whole seconds, at least one).
func (b *Backend) SaveResult(ctx context.Context, job string, r backend.StoredResult, keep backend.Retention) error {
	if keep.Size < 0 || keep.TTL < 0 {
		return fmt.Errorf("%w: job %q: negative retention %+v", ErrUnsupportedJob, job, keep)
	}
	ctx, cancel := b.callContext(ctx)
	defer cancel()
	st, err := b.stream(ctx, job, "save result")
	if err != nil {
		return err
	}
	msg := &nats.Msg{Subject: st.results, Header: nats.Header{}, Data: b.fitResult(st, job, r)}
	if keep.TTL > 0 {
		msg.Header.Set(natsjs.MsgTTLHeader, natsutil.TTLHeader(keep.TTL))
	}
	if err := b.publish(ctx, st, msg); err != nil {
		return fmt.Errorf("jetstream: save result of job %q on stream %q: %w", job, st.names.stream, err)
	}
	b.resize(ctx, st, historySize(keep.Size))
	return nil
}

// recordRoom is what a record's message leaves for its headers and the protocol.
const recordRoom = 1024

// fitResult encodes r so that it fits in a message of st's stream and of the
// connection. An error whose encoding is larger than the room is cut further, with
// the mark TruncateText leaves. JSON escapes make a text up to six times longer.
func (b *Backend) fitResult(st *jobStream, job string, r backend.StoredResult) []byte {
	limit := int(b.js.Conn().MaxPayload()) - recordRoom
	if st.maxMsg > 0 {
		limit = min(limit, int(st.maxMsg)-recordRoom)
	}
	data := encodeResult(job, r)
	if len(data) <= limit || r.Error == "" {
		return data
	}
	// The longest cut of the error that fits: encodings grow with the text.
	text, lo, hi := r.Error, 0, len(r.Error)
	for lo < hi {
		mid := (lo + hi + 1) / 2
		r.Error = backend.TruncateText(text, mid)
		if len(encodeResult(job, r)) <= limit {
			lo = mid
		} else {
			hi = mid - 1
		}
	}
	r.Error = backend.TruncateText(text, lo)
	return encodeResult(job, r)
}

// publish sends a record to st's stream through the client's lean path
// (natsutil.Publish) and waits for its acknowledgement. It sends again after no
// responders (a stream whose leader is being elected), as nats.go's PublishMsg does
// by default. It notes the stored sequence for History's read ahead.
func (b *Backend) publish(ctx context.Context, st *jobStream, msg *nats.Msg) error {
	ack, err := natsutil.PublishRetry(ctx, b.js.Conn(), msg, natsjs.DefaultPubRetryAttempts, natsjs.DefaultPubRetryWait)
	// The same message id in flight (another writer of the same record, on a
	// replicated stream): sent again, it is answered a duplicate.
	for n := 1; natsutil.HasCode(err, natsutil.ErrCodeDuplicateInProcess); n++ {
		if natsutil.ClaimBackoff.Wait(ctx, n) != nil {
			return err
		}
		ack, err = natsutil.PublishRetry(ctx, b.js.Conn(), msg, natsjs.DefaultPubRetryAttempts, natsjs.DefaultPubRetryWait)
	}
	if err != nil {
		return err
	}
	st.sawSeq(ack.Sequence)
	return nil
}

// resize brings the stream's history size to size, when the stream is anarchon's.
// The result is already stored, so a failure is logged, not returned.
func (b *Backend) resize(ctx context.Context, st *jobStream, size int64) {
	st.mu.Lock()
	defer st.mu.Unlock()
	if !st.ours || st.size == size {
		return
	}
	info, err := st.stream.Info(ctx)
	if err == nil && info.Config.MaxMsgsPerSubject != size {
		cfg := info.Config
		cfg.MaxMsgsPerSubject = size
		_, err = b.js.UpdateStream(ctx, cfg)
	}
	if err != nil {
		b.cfg.log.Warn("jetstream: could not change the history size of a job stream", "stream", st.names.stream, "job", st.job, "size", size, "error", err)
		return
	}
	st.size = size
}

// stream returns the job's stream for a write, with an error that says what to do
// when it does not exist.
func (b *Backend) stream(ctx context.Context, job, op string) (*jobStream, error) {
	st, err := b.lookup(ctx, job)
	if errors.Is(err, errNoStream) {
		return nil, fmt.Errorf("jetstream: %s of job %q: stream %q does not exist (PrepareJob creates it): %w",
			op, job, b.cfg.namesFor(backend.JobOf(job)).stream, natsjs.ErrStreamNotFound)
	}
	return st, err
}

var _ backend.RecordWriter = (*Backend)(nil)

// WriteRecords stores recs, terminal records of attempts of job, on the job's
// result subject (backend.RecordWriter), kept as SaveResult keeps them. Each
// carries a Nats-Msg-Id of the job, slot and token, so a record written again
// within the stream's duplicate window is stored once. One that finished longer
// ago than half the window is written only when the job's history lacks it.
func (b *Backend) WriteRecords(ctx context.Context, job string, recs []backend.StoredResult, keep backend.Retention) error {
	if keep.Size < 0 || keep.TTL < 0 {
		return fmt.Errorf("%w: job %q: negative retention %+v", ErrUnsupportedJob, job, keep)
	}
	ctx, cancel := b.callContext(ctx)
	defer cancel()
	st, err := b.stream(ctx, job, "write records")
	if err != nil {
		return err
	}
	var hist []backend.RunRecord
	for _, r := range recs {
		if r.FinishedAt.IsZero() || time.Since(r.FinishedAt) > st.dupWindow()/2 {
			if hist == nil {
				if hist, err = b.History(ctx, job, 0); err != nil {
					return fmt.Errorf("jetstream: write records of job %q: %w", job, err)
				}
			}
			if holds(hist, r) {
				continue
			}
		}
		msg := &nats.Msg{Subject: st.results, Header: nats.Header{}, Data: b.fitResult(st, job, r)}
		msg.Header.Set(natsjs.MsgIDHeader, st.msgID(r.Slot.UnixMilli())+":"+r.Token+":result")
		if keep.TTL > 0 {
			msg.Header.Set(natsjs.MsgTTLHeader, natsutil.TTLHeader(keep.TTL))
		}
		if err := b.publish(ctx, st, msg); err != nil {
			return fmt.Errorf("jetstream: write records of job %q on stream %q: %w", job, st.names.stream, err)
		}
	}
	if keep.Size > 0 {
		b.resize(ctx, st, historySize(keep.Size))
	}
	return nil
}

// holds reports whether hist holds r's attempt as finished.
func holds(hist []backend.RunRecord, r backend.StoredResult) bool {
	for _, h := range hist {
		if h.Token == r.Token && h.Slot.Equal(r.Slot) && h.Status.Finished() {
			return true
		}
	}
	return false
}
