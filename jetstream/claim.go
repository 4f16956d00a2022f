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

// Claim publishes the claim of (job, slot) to the slot's subject with
// Nats-Msg-Id = job+slot and reports whether this token won:
//
//   - A normal acknowledgement: the message was stored, the token won.
//   - A duplicate acknowledgement: the slot was claimed before, and the ack carries
//     the stored claim's sequence. Claim reads that message from the stream leader
//     only when the token may be the stored one by what this Backend has seen (see
//     claimMemo). It wins when the stored token is its own. The token may be the
//     stored one when this Backend published it before (a repeated claim whose first
//     answer was lost). It may also be the stored one when this Backend already
//     answered another token of the slot: then this one is not the scheduler's
//     first and only token for the slot, but a repeat from another process.
//     Otherwise the claim is lost with no second request: the slot's first answer
//     on this Backend, won or lost, costs one round trip. WithVerifyEveryDuplicate reads
//     every duplicate back.
//
// Error 10158 (the same id in flight on a replicated stream), a timeout, no
// responders or a leaderless stream are not answers. Claim then publishes again, with
// the same id and token and bounded backoff, until it has an answer or ctx ends. Each
// request is bounded by WithAttemptTimeout.
//
// A plain Backend refuses to claim while the job's stream is in mode "leases",
// with an error matching ErrMixedFleet. An instance with leases started beside it
// out of order.
func (b *Backend) Claim(ctx context.Context, in backend.ClaimInput) (bool, error) {
	return b.claim(ctx, in, false)
}

// claim is Claim; leased marks the record as written by an instance with leases
// (LeasedBackend.Claim).
func (b *Backend) claim(ctx context.Context, in backend.ClaimInput, leased bool) (bool, error) {
	if err := backendutil.CheckClaim("jetstream", in.Job, in.Token); err != nil {
		return false, err
	}
	now := time.Now()
	st, err := b.claimStream(ctx, in.Job, "claim")
	if err != nil {
		return false, err
	}
	if err := b.claimRefusal(st); err != nil {
		return false, err
	}
	slot := in.Slot.UnixMilli()
	key := st.slotKey(slot)
	sentBefore := b.memo.send(key, in.Token, now, st.ttl())

	ans, err := b.publishClaim(ctx, st, claimSend{msg: st.claimMsg(in, leased, now), slot: slot, op: "claim"}, func(seq uint64) bool {
		return b.cfg.verifyAll || sentBefore || b.memo.mayHold(key, in.Token, seq)
	})
	if err != nil {
		return false, err // the claim may be stored: the memo keeps it as sent
	}
	b.memo.answered(key, in.Token, ans, time.Now(), st.ttl())
	return ans.won(in.Token), nil
}

// claimMsg is the claim of in's slot: on the slot's claim subject, with the id every
// instance claiming the slot sends, stored for claimTTL.
func (st *jobStream) claimMsg(in backend.ClaimInput, leased bool, now time.Time) *nats.Msg {
	slot := in.Slot.UnixMilli()
	msg := &nats.Msg{Subject: st.claimSubject(slot), Header: nats.Header{}, Data: encodeClaimAs(in, false, leased, now)}
	msg.Header.Set(natsjs.MsgIDHeader, st.msgID(slot))
	msg.Header.Set(natsjs.MsgTTLHeader, natsutil.TTLHeader(st.ttl()))
	return msg
}

// claimAnswer is the server's answer to a claim.
type claimAnswer struct {
	// stored: the message was stored (not a duplicate), so its token holds the slot.
	stored bool
	// held: on a duplicate that was read back, the stored claim of the slot; nil
	// when the duplicate was not read back.
	held *claimRecord
	// seq: the sequence of the stored claim.
	seq uint64
}

// won reports whether the answer makes token the slot's holder.
func (a claimAnswer) won(token string) bool {
	return a.stored || a.held != nil && a.held.Token == token
}

// A claimSend is a claim on its way: its message, the slot it claims (Unix ms),
// and the call that sends it, named in errors and logs.
type claimSend struct {
	msg  *nats.Msg
	slot int64
	op   string
}

// publishClaim sends claim c of st's job until it has an answer. Error 10158 (the
// same id in flight on a replicated stream), a timeout, no responders or a
// leaderless stream are not answers. It then publishes again, with the same id and
// token and bounded backoff, until ctx ends. Each request is bounded by
// WithAttemptTimeout. A duplicate at sequence seq is read back from the stream
// leader when readBack(seq) says so, and always after an undecided attempt (the
// message may have been stored by it).
//
// The call is bounded by ctx's deadline, or by the call timeout from now when ctx has
// none. The first attempt runs on one context bounded by the attempt timeout; the
// call's context is made only when an attempt was undecided, so the common claim
// costs one context, as a bare publish does.
func (b *Backend) publishClaim(ctx context.Context, st *jobStream, c claimSend, readBack func(seq uint64) bool) (claimAnswer, error) {
	start := time.Now()
	deadline, ok := ctx.Deadline()
	if !ok {
		deadline = start.Add(b.cfg.callTimeout)
	}
	actx, cancel := context.WithDeadline(ctx, attemptDeadline(start, deadline, b.cfg.attemptTimeout))
	ans, err := b.claimOnce(actx, st, c.msg, readBack)
	cancel()
	switch {
	case err == nil:
		return ans, nil
	case !retryable(err) || ctx.Err() != nil:
		return claimAnswer{}, fmt.Errorf("jetstream: %s job %q slot %d on stream %q: %w", c.op, st.job, c.slot, st.names.stream, err)
	}
	undecided := 1
	b.cfg.log.Debug("jetstream: claim undecided, sending it again", "op", c.op, "job", st.job, "slot", c.slot, "attempt", undecided, "error", err)
	ctx, cancel = context.WithDeadline(ctx, deadline)
	defer cancel()
	if werr := natsutil.ClaimBackoff.Wait(ctx, 1); werr != nil {
		return claimAnswer{}, fmt.Errorf("jetstream: %s job %q slot %d on stream %q: no definite answer before the deadline (last: %w): %w",
			c.op, st.job, c.slot, st.names.stream, err, werr)
	}
	_, err = natsutil.ClaimBackoff.Retry(ctx, b.cfg.attemptTimeout, func(err error) bool {
		if !retryable(err) {
			return false
		}
		undecided++
		b.cfg.log.Debug("jetstream: claim undecided, sending it again", "op", c.op, "job", st.job, "slot", c.slot, "attempt", undecided, "error", err)
		return true
	}, func(ctx context.Context) (err error) {
		// After an undecided attempt the message may have been stored: from then on
		// a duplicate may be ours.
		ans, err = b.claimOnce(ctx, st, c.msg, func(seq uint64) bool { return undecided > 0 || readBack(seq) })
		return err
	})
	if err != nil {
		return claimAnswer{}, fmt.Errorf("jetstream: %s job %q slot %d on stream %q: %w", c.op, st.job, c.slot, st.names.stream, err)
	}
	return ans, nil
}

// attemptDeadline is the deadline of an attempt started at start: the attempt
// timeout later (0: none), or the call's deadline when that comes first.
func attemptDeadline(start, call time.Time, attempt time.Duration) time.Time {
	if attempt > 0 && start.Add(attempt).Before(call) {
		return start.Add(attempt)
	}
	return call
}

// claimStream returns the job's stream for a claim: the cached one without any
// context, else looked up within the call timeout.
func (b *Backend) claimStream(ctx context.Context, job, op string) (*jobStream, error) {
	if st := b.cached(job); st != nil && !b.closed.Load() {
		return st, nil
	}
	ctx, cancel := b.callContext(ctx)
	defer cancel()
	return b.stream(ctx, job, op)
}

// claimOnce sends the claim once and, on a duplicate that readBack asks for, reads
// the stored claim.
func (b *Backend) claimOnce(ctx context.Context, st *jobStream, msg *nats.Msg, readBack func(seq uint64) bool) (claimAnswer, error) {
	ack, err := natsutil.Publish(ctx, b.js.Conn(), msg)
	if err != nil {
		return claimAnswer{}, err
	}
	st.sawSeq(ack.Sequence)
	if !ack.Duplicate {
		return claimAnswer{stored: true, seq: ack.Sequence}, nil
	}
	if !readBack(ack.Sequence) {
		return claimAnswer{seq: ack.Sequence}, nil
	}
	// A leader read (never a direct get, which a lagging follower may answer): the
	// stream leader has applied every acknowledged message.
	m, err := natsutil.LeaderGet(ctx, b.js, st.names.stream, ack.Sequence, "")
	if errors.Is(err, natsjs.ErrMsgNotFound) {
		return claimAnswer{}, fmt.Errorf("%w: the slot's claim (sequence %d) is no longer stored: %w", ErrUndecided, ack.Sequence, err)
	}
	if err != nil {
		return claimAnswer{}, err
	}
	rec, err := parseClaim(st.job, m.Data)
	if err != nil {
		return claimAnswer{}, fmt.Errorf("%w: the message at sequence %d that holds the slot's id is not a claim: %w", ErrUndecided, ack.Sequence, err)
	}
	return claimAnswer{held: &rec, seq: ack.Sequence}, nil
}

// retryable reports whether err leaves the claim undecided, so that sending it again
// (same id, same token) is the way to an answer: no answer at all, or the same id
// still in flight on a replicated stream.
func retryable(err error) bool {
	return natsutil.Unanswered(err) || natsutil.HasCode(err, natsutil.ErrCodeDuplicateInProcess)
}
