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

// pair is a claim's two writes: its lease key, then its run record, each a
// compare-and-set from the revision it expects.
type pair struct {
	lease, run write
	token      string // the claiming token
	// blind: a first claim's writes, both from revision 0, sent before any read
	// (blind.go).
	blind bool
}

// A pairWriter stores a claim's pair, the lease key first: a run record is never
// stored without its lease key stored before it, so the lease key stays the mutex.
// Each bucket has one, picked at Init (pairWriterFor). Its answers:
//
//   - both revisions and no error: both stored;
//   - leaseRev 0 and an error matching errConflict: the lease key holds something
//     (storedRev of the error names its revision when the server did), and nothing
//     of this pair was stored;
//   - leaseRev and an error matching errConflict: the lease key is this claim's, the
//     run record's write lost;
//   - an error matching errUndecided, with leaseRev when the lease key is known to
//     be this claim's: a write went unanswered, or the pair lost without saying
//     which key; read and decide;
//   - any other error, as put returns it.
type pairWriter interface {
	writePair(ctx context.Context, p pair) (leaseRev, runRev uint64, err error)
}

// pairWriterFor picks b's pair writer: atomic batches when the bucket takes them
// (WithAtomicBatches on nats-server 2.12 or later), else chained on a
// single-replica bucket, else in turn. A writer that cannot write a pair its way
// writes it as the one it falls back to: batched to chained or in turn, chained to
// in turn.
func (s *Store) pairWriterFor(b *bucket) pairWriter {
	var w pairWriter = inTurn{s: s, b: b}
	if b.chain {
		w = &chained{inTurn: inTurn{s: s, b: b}}
	}
	if b.atomic.Load() {
		w = batched{s: s, b: b, next: w}
	}
	return w
}

// inTurn writes the lease key, then, once it is stored, the run record: two round
// trips.
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

// chained sends a blind pair's two writes in one round trip, on a single-replica
// bucket only: nats-server 2.15.3 checks Nats-Expected-Last-Msg-Id on a replicated
// stream when it applies the message, and a mismatch found then stops the stream
// (TestReplicatedClaimsAreNotChained). Other pairs, and blind pairs beyond
// maxChained in flight, are written in turn.
type chained struct {
	inTurn
	inFlight atomic.Int32 // blind pairs being written
	retries  atomic.Int64 // run records written again alone (for tests)
}

// maxChained is how many blind pairs a bucket sends chained at once; the ones
// beyond are written in turn. A chained pair saves a round trip only when no other
// write to the bucket comes between its two messages, and costs a write more when
// it loses: many claims at one instant (a fleet whose jobs share a schedule,
// claiming at the slot) come between each other's messages, and their losers' run
// records are refused writes the server must still answer. A store's own claims in
// flight are the best sign it has of such a burst.
const maxChained = 4

func (w *chained) writePair(ctx context.Context, p pair) (uint64, uint64, error) {
	if !p.blind {
		return w.inTurn.writePair(ctx, p)
	}
	defer w.inFlight.Add(-1)
	if w.inFlight.Add(1) > maxChained {
		return w.inTurn.writePair(ctx, p)
	}
	return w.chain(ctx, p)
}

// chain sends the pair's two messages one after the other without waiting. The run
// record is chained to the lease key: the lease key's message carries a Nats-Msg-Id
// of this claim (the slot's lease key and the token), and the run record's
// Nats-Expected-Last-Msg-Id names it, so the server stores the run record only if
// the stream's last stored message is this claim's lease key. A run record
// therefore never exists without its lease key having been stored first, as with
// the two writes in turn. (The id also makes a repeat of the lease write, after an
// answer was lost, a duplicate that answers with the stored revision.)
//
// Another write to the bucket stored between the two (any key: the check is on the
// stream's last message) makes the run record fail with 10070; it is then written
// again, alone, from the revision it expects.
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
		// Not reachable by the chain (the run record needs the lease key stored
		// just before it), but never leave a run record without its lease: end it
		// and decide from the store.
		_ = w.s.purge(ctx, w.b, p.run.key, res[1].Ack.Sequence)
		return 0, 0, fmt.Errorf("%w: the run record was stored without its lease key (%w)", errUndecided, le)
	case le != nil && isConflict(le):
		return 0, 0, fmt.Errorf("%w: %s at revision %d: %w", errConflict, p.lease.key, p.lease.expect, le)
	case le != nil && natsutil.Unanswered(le), le != nil && errors.Is(le, context.DeadlineExceeded):
		return 0, 0, fmt.Errorf("%w: %w", errUndecided, le)
	case le != nil:
		return 0, 0, fmt.Errorf("kvlease: write %s: %w", p.lease.key, le)
	}
	leaseRev = res[0].Ack.Sequence
	if res[0].Ack.Duplicate {
		// This claim's lease key was stored before (an earlier call with the token,
		// whose answer was lost): it may have changed since. Read and decide.
		return 0, 0, fmt.Errorf("%w: the lease key was written before", errUndecided)
	}
	switch {
	case natsutil.HasCode(re, natsutil.ErrCodeWrongLastMsgID):
		// Another write came between the two: the run record alone.
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

// batched writes a pair as one atomic batch (batch.go): both stored or neither, each
// compare-and-set checked by the server, so no claimer dies between them. A batch
// the server does not take leaves a blind pair to the claim's read and writes any
// other as next does; once the stream answers that atomic publish is off, every
// pair is next's.
type batched struct {
	s    *Store
	b    *bucket
	next pairWriter
}

func (w batched) writePair(ctx context.Context, p pair) (uint64, uint64, error) {
	if !w.b.atomic.Load() {
		return w.next.writePair(ctx, p)
	}
	revs, err := w.s.putBatch(ctx, w.b, []write{p.lease, p.run})
	if errors.Is(err, errNoBatch) && natsutil.HasCode(err, natsutil.ErrCodeAtomicDisabled) {
		w.b.atomic.Store(false) // turned off on the stream: stop trying
	}
	switch {
	case err == nil:
		return revs[0], revs[1], nil
	case errors.Is(err, errNoBatch) && !p.blind:
		return w.next.writePair(ctx, p)
	case errors.Is(err, errConflict), errors.Is(err, errNoBatch):
		// Nothing stored, and a lost batch does not say which key lost.
		return 0, 0, fmt.Errorf("%w: %v", errUndecided, err)
	}
	return 0, 0, err
}

// errUndecided marks a pair whose outcome the claim must read: a write went
// unanswered (either may be stored), or the pair lost without saying which key.
var errUndecided = errors.New("kvlease: claim undecided")
