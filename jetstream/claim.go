package jetstream

import (
	"context"
	"errors"
	"fmt"
	"math/rand/v2"
	"sync"
	"time"

	"github.com/nats-io/nats.go"
	natsjs "github.com/nats-io/nats.go/jetstream"

	"github.com/anarchon/anarchon/scheduler"
)

// JetStream API error codes Claim retries on.
const (
	// errCodeDuplicateInProcess: on a replicated stream, a message with the same
	// Nats-Msg-Id is proposed but not yet committed. Neither won nor lost.
	errCodeDuplicateInProcess natsjs.ErrorCode = 10158
	// errCodeClusterNotAvailable: the stream has no leader at the moment.
	errCodeClusterNotAvailable natsjs.ErrorCode = 10008
)

// Claim publishes the claim of (job, slot) to the slot's subject with
// Nats-Msg-Id = job+slot and reports whether this token won:
//
//   - a normal acknowledgement: the message was stored, the token won;
//   - a duplicate acknowledgement: the slot was claimed before, and the ack carries
//     the stored claim's sequence. If this process has published this (job, slot,
//     token) before, Claim reads that message from the stream leader and wins when
//     the stored token is its own (a repeated claim whose first answer was lost).
//     Otherwise the stored claim cannot be this token's, and the claim is lost with
//     no second request (see WithVerifyEveryDuplicate).
//
// Error 10158 (the same id in flight on a replicated stream), a timeout, no
// responders or a leaderless stream are not answers: Claim publishes again, with the
// same id and token, with bounded backoff, until it has an answer or ctx ends. Each
// request is bounded by WithAttemptTimeout. So the first claim, won or lost, costs
// one round trip.
func (b *Backend) Claim(ctx context.Context, in scheduler.ClaimInput) (bool, error) {
	return b.claim(ctx, in, false)
}

// claim is Claim; leased marks the record as written by an instance with leases
// (LeasedBackend.Claim).
func (b *Backend) claim(ctx context.Context, in scheduler.ClaimInput, leased bool) (bool, error) {
	if err := scheduler.ValidateJobName(in.Job); err != nil {
		return false, fmt.Errorf("%w: %w", ErrInvalidClaim, err)
	}
	if in.Token == "" {
		return false, fmt.Errorf("%w: job %q: empty token", ErrInvalidClaim, in.Job)
	}
	ctx, cancel := b.withTimeout(ctx)
	defer cancel()
	st, err := b.stream(ctx, in.Job, "claim")
	if err != nil {
		return false, err
	}
	slot := in.Slot.UnixMilli()
	now := time.Now()
	msg := st.claimMsg(in, leased, now)

	key := sentKey{stream: st.names.stream, slot: slot, token: in.Token}
	readBack := sent.mark(key, now, st.claimTTL) || b.cfg.verifyAll

	ans, err := b.publishClaim(ctx, st, in.Job, slot, msg, readBack, "claim")
	if err != nil {
		return false, err
	}
	won := ans.stored || ans.held != nil && ans.held.Token == in.Token
	if !won {
		sent.forget(key) // a definite loss stays a loss: no need to read back later
	}
	return won, nil
}

// claimMsg is the claim of in's slot: on the slot's claim subject, with the id every
// instance claiming the slot sends, stored for claimTTL.
func (st *jobStream) claimMsg(in scheduler.ClaimInput, leased bool, now time.Time) *nats.Msg {
	slot := in.Slot.UnixMilli()
	msg := &nats.Msg{Subject: st.claimSubject(slot), Header: nats.Header{}, Data: encodeClaimAs(in, false, leased, now)}
	msg.Header.Set(natsjs.MsgIDHeader, st.msgID(slot))
	msg.Header.Set(natsjs.MsgTTLHeader, ttlHeader(st.claimTTL))
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

// publishClaim sends a claim until it has an answer: error 10158 (the same id in
// flight on a replicated stream), a timeout, no responders or a leaderless stream are
// not answers, so it publishes again, with the same id and token, with bounded
// backoff, until ctx ends. Each request is bounded by WithAttemptTimeout. A duplicate
// is read back from the stream leader when readBack is set, and always after an
// undecided attempt (the message may have been stored by it).
func (b *Backend) publishClaim(ctx context.Context, st *jobStream, job string, slot int64, msg *nats.Msg, readBack bool, op string) (claimAnswer, error) {
	var last error
	for attempt := 0; ; attempt++ {
		if attempt > 0 {
			if err := sleep(ctx, backoff(attempt)); err != nil {
				return claimAnswer{}, fmt.Errorf("jetstream: %s job %q slot %d: no answer before the deadline (last: %v): %w", op, job, slot, last, err)
			}
		}
		ans, err := b.claimOnce(ctx, st, msg, readBack)
		if err == nil {
			return ans, nil
		}
		if !retryable(err) || ctx.Err() != nil {
			return claimAnswer{}, fmt.Errorf("jetstream: %s job %q slot %d on stream %q: %w", op, job, slot, st.names.stream, err)
		}
		last = err
		b.cfg.log.Debug("jetstream: claim undecided, sending it again", "op", op, "job", job, "slot", slot, "attempt", attempt+1, "error", err)
		// The message may have been stored: from now on a duplicate may be ours.
		readBack = true
	}
}

// claimOnce sends the claim once and, on a duplicate with readBack, reads the stored
// claim.
func (b *Backend) claimOnce(ctx context.Context, st *jobStream, msg *nats.Msg, readBack bool) (claimAnswer, error) {
	actx, cancel := context.WithTimeout(ctx, b.cfg.attemptTimeout)
	defer cancel()
	ack, err := b.js.PublishMsg(actx, msg, natsjs.WithRetryAttempts(0))
	if err != nil {
		return claimAnswer{}, err
	}
	if !ack.Duplicate {
		return claimAnswer{stored: true, seq: ack.Sequence}, nil
	}
	if !readBack {
		return claimAnswer{seq: ack.Sequence}, nil
	}
	// A leader read: GetMsg on a stream without AllowDirect is answered by the stream
	// leader only, which has applied every acknowledged message.
	m, err := st.stream.GetMsg(actx, ack.Sequence)
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
// (same id, same token) is the way to an answer.
func retryable(err error) bool {
	var apiErr *natsjs.APIError
	if errors.As(err, &apiErr) {
		return apiErr.ErrorCode == errCodeDuplicateInProcess || apiErr.ErrorCode == errCodeClusterNotAvailable
	}
	return errors.Is(err, context.DeadlineExceeded) ||
		errors.Is(err, nats.ErrTimeout) ||
		errors.Is(err, nats.ErrNoResponders) ||
		errors.Is(err, natsjs.ErrNoStreamResponse) ||
		errors.Is(err, nats.ErrReconnectBufExceeded)
}

// backoff is the wait before retry n (n >= 1): 5ms doubling to 500ms, jittered.
func backoff(n int) time.Duration {
	d := min(5*time.Millisecond<<min(n-1, 7), 500*time.Millisecond)
	return d/2 + rand.N(d/2)
}

func sleep(ctx context.Context, d time.Duration) error {
	t := time.NewTimer(d)
	defer t.Stop()
	select {
	case <-ctx.Done():
		return ctx.Err()
	case <-t.C:
		return nil
	}
}

// sent remembers, for the whole process, the claims this process has published
// that may be stored: won ones and undecided ones. A duplicate answer to a claim not
// in it is a loss without reading the stored claim back, because a token is unique
// to one attempt of one process (the contract), so a token this process never sent
// cannot be the stored one. It is process-wide rather than per Backend so that two
// backends in one process (two schedulers, a test) repeating each other's tokens
// still read back. Entries live as long as the claim is stored (claimTTL).
var sent = &sentClaims{m: make(map[sentKey]time.Time)}

type sentKey struct {
	stream string
	slot   int64
	token  string
}

type sentClaims struct {
	mu     sync.Mutex
	m      map[sentKey]time.Time // until when the entry matters
	nextGC time.Time
}

// mark records k as sent and reports whether it had been sent before.
func (s *sentClaims) mark(k sentKey, now time.Time, ttl time.Duration) bool {
	s.mu.Lock()
	defer s.mu.Unlock()
	if now.After(s.nextGC) {
		for k, until := range s.m {
			if now.After(until) {
				delete(s.m, k)
			}
		}
		s.nextGC = now.Add(time.Minute)
	}
	until, before := s.m[k]
	before = before && !now.After(until)
	s.m[k] = now.Add(ttl)
	return before
}

func (s *sentClaims) forget(k sentKey) {
	s.mu.Lock()
	delete(s.m, k)
	s.mu.Unlock()
}

func (s *sentClaims) len() int {
	s.mu.Lock()
	defer s.mu.Unlock()
	return len(s.m)
}
