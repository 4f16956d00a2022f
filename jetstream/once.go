package jetstream

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"errors"
	"fmt"

	"github.com/nats-io/nats.go"
	natsjs "github.com/nats-io/nats.go/jetstream"

	"github.com/anarchon/anarchon/backend"
	"github.com/anarchon/anarchon/internal/backendutil"
	"github.com/anarchon/anarchon/internal/natsutil"
)

var _ backend.OnceRecorder = (*Backend)(nil)

// onceHeader carries the nonce of one RecordOnce call, so that a call that sent
// its record again after an unanswered publish can tell its own stored copy from
// another writer's.
const onceHeader = "Anarchon-Once"

// RecordOnce stores rec on job's result subject, kept as SaveResult keeps it,
// and reports whether this call stored it (backend.OnceRecorder). The record
// carries WriteRecords' Nats-Msg-Id (job, slot and token), so of the writers of
// one record the server stores the first and answers the others a duplicate:
// they get false. The server remembers an id for the stream's duplicate window
// only (WindowFor the job): a record of the same slot and token stored longer
// ago than that is stored again, so a caller reads History first.
//
// No responders and the same id in flight (10158) are sent again, as the other
// writes do; so are a timeout and a leaderless stream, within the call's
// deadline. After such an unanswered publish the message may be stored already:
// a duplicate is then read back from the stream leader, and it is this call's
// own when it carries this call's nonce.
func (b *Backend) RecordOnce(ctx context.Context, job string, rec backend.StoredResult, keep backend.Retention) (bool, error) {
	if err := backendutil.CheckClaim("jetstream", job, rec.Token); err != nil {
		return false, err
	}
	if keep.Size < 0 || keep.TTL < 0 {
		return false, fmt.Errorf("%w: job %q: negative retention %+v", ErrUnsupportedJob, job, keep)
	}
	ctx, cancel := b.callContext(ctx)
	defer cancel()
	st, err := b.stream(ctx, job, "record once")
	if err != nil {
		return false, err
	}
	var n [12]byte
	_, _ = rand.Read(n[:])
	nonce := hex.EncodeToString(n[:])
	stored, err := b.publishOnce(ctx, st, b.onceMsg(st, job, rec, keep, nonce), nonce, false)
	if err != nil {
		return false, fmt.Errorf("jetstream: record once of job %q slot %d on stream %q: %w", job, rec.Slot.UnixMilli(), st.names.stream, err)
	}
	if keep.Size > 0 {
		b.resize(ctx, st, historySize(keep.Size))
	}
	return stored, nil
}

// onceMsg is RecordOnce's message of rec, written by the call of nonce.
func (b *Backend) onceMsg(st *jobStream, job string, rec backend.StoredResult, keep backend.Retention, nonce string) *nats.Msg {
	msg := &nats.Msg{Subject: st.results, Header: nats.Header{}, Data: b.fitResult(st, job, rec)}
	msg.Header.Set(natsjs.MsgIDHeader, st.msgID(rec.Slot.UnixMilli())+":"+rec.Token+":result")
	msg.Header.Set(onceHeader, nonce)
	if keep.TTL > 0 {
		msg.Header.Set(natsjs.MsgTTLHeader, natsutil.TTLHeader(keep.TTL))
	}
	return msg
}

// publishOnce sends msg, which carries nonce, until the server stores it or
// answers a duplicate, and reports whether it stored this call's copy. sent
// says msg may be stored already (a publish of it went unanswered). Each
// request is bounded by WithAttemptTimeout.
func (b *Backend) publishOnce(ctx context.Context, st *jobStream, msg *nats.Msg, nonce string, sent bool) (bool, error) {
	unanswered := sent // a publish went unanswered: the message may be stored
	var stored bool
	_, err := natsutil.ClaimBackoff.Retry(ctx, b.cfg.attemptTimeout, retryable, func(ctx context.Context) error {
		ack, err := natsutil.Publish(ctx, b.js.Conn(), msg)
		if err != nil {
			unanswered = unanswered || natsutil.Unanswered(err)
			return err
		}
		st.sawSeq(ack.Sequence)
		if stored = !ack.Duplicate; stored || !unanswered {
			return nil
		}
		// A leader read: the stream leader has applied every acknowledged message.
		m, err := natsutil.LeaderGet(ctx, b.js, st.names.stream, ack.Sequence, "")
		if errors.Is(err, natsjs.ErrMsgNotFound) {
			return fmt.Errorf("%w: the record (sequence %d) is no longer stored: whether this call stored it cannot be told: %w",
				ErrUndecided, ack.Sequence, err)
		}
		if err != nil {
			return err
		}
		stored = m.Header.Get(onceHeader) == nonce
		return nil
	})
	return stored, err
}
