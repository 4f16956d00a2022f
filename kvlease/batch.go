package kvlease

import (
	"context"
	"errors"
	"fmt"
	"strconv"
	"strings"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"
	"github.com/nats-io/nuid"

	"github.com/anarchon/anarchon/internal/natsutil"
)

// Atomic batch publish (nats-server ≥ 2.12, AllowAtomicPublish on the bucket's
// stream; used WithAtomicBatches): the messages of a batch are stored all together
// or none of them, and each carries its own Nats-Expected-Last-Subject-Sequence and
// Nats-TTL, both of which the server checks and applies inside a batch (only
// Nats-Expected-Last-Msg-Id is refused there). A claim writes its lease key and run
// record in one batch, a finish its run record and the lease key's purge.
//
// The batch is written by hand: every message but the last is published without a
// reply (the connection keeps them in order), the last carries Nats-Batch-Commit and
// is answered with the batch's acknowledgement or its error. orbit.go's
// jetstreamext.PublishMsgBatch sends the same headers, but by default waits for an
// answer to the first message (BatchFlowControl.AckFirst), a round trip more; for
// two messages the headers by hand cost less than a dependency.
const (
	batchIDHeader     = "Nats-Batch-Id"
	batchSeqHeader    = "Nats-Batch-Sequence"
	batchCommitHeader = "Nats-Batch-Commit"

	kvPurge     = "PURGE"
	expectedSeq = "Nats-Expected-Last-Subject-Sequence"
)

// errNoBatch marks a batch the server would not take as a batch: the caller writes
// the same changes one compare-and-set at a time instead.
var errNoBatch = errors.New("kvlease: atomic batch not taken")

// putBatch writes ws in one atomic batch and returns the revision of each, in
// order. A lost compare-and-set on any key stores nothing and returns an error
// matching errConflict; a batch the server does not take, one matching errNoBatch.
// A batch left unanswered is sent again (with a new batch id): once applied, its
// compare-and-sets lose, and the caller reads again and decides, as after any race.
func (s *Store) putBatch(ctx context.Context, b *bucket, ws []write) ([]uint64, error) {
	msgs := make([]*nats.Msg, len(ws))
	for i, w := range ws {
		var m *nats.Msg
		if w.value == nil {
			m = purgeMsg(b, w.key, w.expect, w.ttl, nil)
		} else {
			var err error
			if m, err = putMsg(b, w); err != nil {
				return nil, err
			}
		}
		m.Header.Set(batchSeqHeader, strconv.Itoa(i+1))
		msgs[i] = m
	}
	msgs[len(msgs)-1].Header.Set(batchCommitHeader, "1")
	var ack *jetstream.PubAck
	err := s.attempt(ctx, func(ctx context.Context) (err error) {
		id := nuid.Next()
		for _, m := range msgs {
			m.Header.Set(batchIDHeader, id)
		}
		for _, m := range msgs[:len(msgs)-1] {
			if err := s.js.Conn().PublishMsg(m); err != nil {
				return err
			}
		}
		ack, err = s.js.PublishMsg(ctx, msgs[len(msgs)-1], jetstream.WithRetryAttempts(0))
		return err
	})
	keys := func() string {
		k := make([]string, len(ws))
		for i, w := range ws {
			k[i] = w.key + "@" + strconv.FormatUint(w.expect, 10)
		}
		return strings.Join(k, ", ")
	}
	switch {
	case err == nil:
	case isConflict(err):
		return nil, fmt.Errorf("%w: batch %s: %w", errConflict, keys(), err)
	case natsutil.HasCode(err, natsutil.ErrCodeAtomicDisabled), natsutil.HasCode(err, natsutil.ErrCodeBatchIncomplete),
		natsutil.HasCode(err, natsutil.ErrCodeBatchTooMany):
		return nil, fmt.Errorf("%w: batch %s: %w", errNoBatch, keys(), err)
	default:
		return nil, fmt.Errorf("kvlease: write batch %s: %w", keys(), err)
	}
	// The batch's messages are stored with consecutive sequences, the last one the
	// acknowledged sequence.
	revs := make([]uint64, len(ws))
	for i := range ws {
		revs[i] = ack.Sequence - uint64(len(ws)-1-i)
	}
	return revs, nil
}
