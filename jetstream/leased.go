package jetstream

import (
	"context"
	"fmt"
	"time"

	"github.com/nats-io/nats.go"
	natsjs "github.com/nats-io/nats.go/jetstream"

	"github.com/anarchon/anarchon/scheduler"
)

// LeasedBackend is a Backend with leases: it implements scheduler.LeaseBackend, so
// the scheduler claims through its RunStore (backups, overlap protection, catch-up,
// hand-over) and records each won lease with RecordClaim (scheduler.ClaimRecorder).
//
// Leases are a separate type, rather than an option of New, so that the type
// assertion b.(scheduler.LeaseBackend) is true exactly when there is a RunStore:
// a plain *Backend has no Runs method to return nil from.
type LeasedBackend struct {
	*Backend
	runs scheduler.RunStore
}

var (
	_ scheduler.LeaseBackend  = (*LeasedBackend)(nil)
	_ scheduler.ClaimRecorder = (*LeasedBackend)(nil)
)

// NewLeased returns a backend that keeps history in per-job streams on js, like New,
// and leases in runs (for example a kvlease store). Close does not close runs.
func NewLeased(js natsjs.JetStream, runs scheduler.RunStore, opts ...Option) (*LeasedBackend, error) {
	if runs == nil {
		return nil, invalid("NewLeased: nil RunStore")
	}
	b, err := New(js, opts...)
	if err != nil {
		return nil, err
	}
	return &LeasedBackend{Backend: b, runs: runs}, nil
}

// Runs returns the lease store.
func (b *LeasedBackend) Runs() scheduler.RunStore { return b.runs }

// RecordClaim stores the claim of a won lease as a history record, on the job's
// lease subject. The lease store decided the winner; the record's Nats-Msg-Id
// (job + slot + token) only makes a retried write store it once. It is kept like
// the results: the newest history-size records, for in.HistoryTTL when set.
func (b *LeasedBackend) RecordClaim(ctx context.Context, in scheduler.ClaimInput) error {
	if in.Token == "" {
		return fmt.Errorf("%w: job %q: empty token", ErrInvalidClaim, in.Job)
	}
	ctx, cancel := b.withTimeout(ctx)
	defer cancel()
	st, err := b.stream(ctx, in.Job, "record claim")
	if err != nil {
		return err
	}
	slot := in.Slot.UnixMilli()
	msg := &nats.Msg{Subject: st.leases, Header: nats.Header{}, Data: encodeClaim(in, false, time.Now())}
	msg.Header.Set(natsjs.MsgIDHeader, st.msgID(slot)+":"+in.Token)
	if in.HistoryTTL > 0 {
		msg.Header.Set(natsjs.MsgTTLHeader, ttlHeader(in.HistoryTTL))
	}
	if _, err := b.js.PublishMsg(ctx, msg); err != nil {
		return fmt.Errorf("jetstream: record claim of job %q on stream %q: %w", in.Job, st.names.stream, err)
	}
	return nil
}
