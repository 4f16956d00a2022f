package kvlease

import (
	"context"
	"errors"
	"fmt"
	"sync/atomic"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"

	"github.com/anarchon/anarchon/internal/natsutil"
)

// pair is a blind claim's two writes, its lease key and its run record, both
// from revision 0.
type pair struct {
	lease, run write
	token      string // the claiming token
}

// A pairWriter stores a pair, the lease key first, so that a run record is
// never stored without its lease key before it. Its answers: both revisions;
// leaseRev 0 and errConflict (the lease key holds something; storedRev of the
// error names its revision when the server did); leaseRev and errConflict (the
// run record lost); errUndecided (read and decide); or put's errors.
type pairWriter interface {
	writePair(ctx context.Context, p pair) (leaseRev, runRev uint64, err error)
}

// pairWriterFor picks b's pair writer: chained on a single-replica bucket, else
// in turn.
func (s *Store) pairWriterFor(b *bucket) pairWriter {
	if b.chain {
		return &chained{inTurn: inTurn{s: s, b: b}}
	}
	return inTurn{s: s, b: b}
}

// inTurn writes the lease key, then, once it is stored, the run record.
type inTurn struct {
	s *Store
	b *bucket
}

func (w inTurn) writePair(ctx context.Context, p pair) (leaseRev, runRev uint64, err error) {
	if leaseRev, err = w.s.put(ctx, w.b, p.lease); err != nil {
		return 0, 0, err
	}
	runRev, err = w.s.put(ctx, w.b, p.run)
	return leaseRev, runRev, err
}

// chained sends a pair's two writes in one round trip, on a single-replica
// bucket only: nats-server 2.15.3 checks Nats-Expected-Last-Msg-Id on a
// replicated stream when it applies the message, and a mismatch found then stops
// the stream. Beyond maxChained pairs in flight, pairs are written in turn.
type chained struct {
	inTurn
	inFlight atomic.Int32 // pairs being written
	retries  atomic.Int64 // run records written again alone (for tests)
}

// maxChained is how many pairs a bucket sends chained at once: in a burst,
// writes come between each other's two messages, and the losers' run records are
// refused writes the server must still answer.
const maxChained = 4

func (w *chained) writePair(ctx context.Context, p pair) (uint64, uint64, error) {
	defer w.inFlight.Add(-1)
	if w.inFlight.Add(1) > maxChained {
		return w.inTurn.writePair(ctx, p)
	}
	return w.chain(ctx, p)
}

// chain sends the two messages without waiting between them. The lease key's
// carries a Nats-Msg-Id of the claim and the run record's a
// Nats-Expected-Last-Msg-Id naming it, so the run record is stored only right
// behind this claim's lease key. Another write stored between the two refuses
// the run record (10070): it is then written again alone.
func (w *chained) chain(ctx context.Context, p pair) (leaseRev, runRev uint64, err error) {
	lm, err := putMsg(w.b, p.lease)
	if err != nil {
		return 0, 0, err
	}
	rm, err := putMsg(w.b, p.run)
	if err != nil {
		return 0, 0, err
	}
	id := p.lease.key + " " + p.token
	lm.Header.Set(jetstream.MsgIDHeader, id)
	rm.Header.Set(jetstream.ExpectedLastMsgIDHeader, id)
	actx, cancel := context.WithTimeout(ctx, w.s.opts.attempt)
	res := w.s.direct.PublishAll(actx, []*nats.Msg{lm, rm})
	cancel()
	le, re := res[0].Err, res[1].Err
	switch {
	case le == nil && re == nil:
		return res[0].Ack.Sequence, res[1].Ack.Sequence, nil
	case le != nil && re == nil:
		// Not reachable by the chain; never leave a run record without its lease.
		_ = w.s.purge(ctx, w.b, p.run.key, res[1].Ack.Sequence)
		return 0, 0, fmt.Errorf("%w: the run record was stored without its lease key (%w)", errUndecided, le)
	case le != nil && isConflict(le):
		return 0, 0, fmt.Errorf("%w: %s at revision %d: %w", errConflict, p.lease.key, p.lease.expect, le)
	case le != nil && (natsutil.Unanswered(le) || errors.Is(le, context.DeadlineExceeded)):
		return 0, 0, fmt.Errorf("%w: %w", errUndecided, le)
	case le != nil:
		return 0, 0, fmt.Errorf("kvlease: write %s: %w", p.lease.key, le)
	}
	leaseRev = res[0].Ack.Sequence
	if res[0].Ack.Duplicate {
		// Stored by an earlier call with the token, whose answer was lost.
		return 0, 0, fmt.Errorf("%w: the lease key was written before", errUndecided)
	}
	switch {
	case natsutil.HasCode(re, natsutil.ErrCodeWrongLastMsgID):
		w.retries.Add(1)
		runRev, err = w.s.put(ctx, w.b, p.run)
		return leaseRev, runRev, err
	case isConflict(re):
		return leaseRev, 0, fmt.Errorf("%w: %s at revision %d: %w", errConflict, p.run.key, p.run.expect, re)
	case natsutil.Unanswered(re), errors.Is(re, context.DeadlineExceeded):
		return leaseRev, 0, fmt.Errorf("%w: %w", errUndecided, re)
	default:
		return leaseRev, 0, fmt.Errorf("kvlease: write %s: %w", p.run.key, re)
	}
}

// errUndecided marks a write whose outcome the claim must read: it went
// unanswered, or the pair lost without saying which key.
var errUndecided = errors.New("kvlease: claim undecided")
