package jetstream

import (
	"context"
	"fmt"
	"time"

	"github.com/nats-io/nats.go"
	natsjs "github.com/nats-io/nats.go/jetstream"

	"github.com/anarchon/anarchon/backend"
	"github.com/anarchon/anarchon/internal/backendutil"
	"github.com/anarchon/anarchon/internal/natsutil"
)

// LeasedBackend is a Backend with leases: it implements backend.LeaseBackend, so
// the scheduler claims through its RunStore (backups, overlap protection, catch-up,
// hand-over). A run store that keeps its records (kvlease, a backend.Settler)
// writes them into this backend; a won lease needs no record before the handler.
// Made WithMixedFleet, it records each won lease on the slot's claim subject
// first (RecordClaim), which instances without leases meet.
//
// Leases are a separate type, rather than an option of New, so that the type
// assertion b.(backend.LeaseBackend) is true exactly when there is a RunStore:
// a plain *Backend has no Runs method to return nil from.
type LeasedBackend struct {
	*Backend
	runs backend.RunStore
}

var (
	_ backend.LeaseBackend  = (*LeasedBackend)(nil)
	_ backend.ClaimRecorder = (*LeasedBackend)(nil)
	_ backend.RecordDecider = (*LeasedBackend)(nil)
)

// RecordDecides reports whether the record of a won lease of job decides the
// slot (backend.RecordDecider). It does when made WithMixedFleet, or while the
// job's stream is in mode "plain" or "mixed". The scheduler then writes it
// before the handler. Otherwise RecordClaim does not record a Settler's win.
func (b *LeasedBackend) RecordDecides(job string) bool { return b.arbitrates(job) }

// NewLeased returns a backend that keeps history in per-job streams on js, like New,
// and leases in runs (for example a kvlease store). A runs that is a
// backend.RecordsUser writes its records into the backend (UseRecords). Close
// does not close runs.
func NewLeased(js natsjs.JetStream, runs backend.RunStore, opts ...Option) (*LeasedBackend, error) {
	if runs == nil {
		return nil, fmt.Errorf("%w: jetstream: NewLeased: nil RunStore", backend.ErrInvalidConfig)
	}
	b, err := New(js, opts...)
	if err != nil {
		return nil, err
	}
	b.cfg.leased = true
	if u, ok := runs.(backend.RecordsUser); ok {
		u.UseRecords(b)
	}
	return &LeasedBackend{Backend: b, runs: runs}, nil
}

// Runs returns the lease store.
func (b *LeasedBackend) Runs() backend.RunStore { return b.runs }

// Claim is Backend.Claim with the record marked as written by an instance with
// leases. The scheduler calls Claim on a backend with leases only to record, from
// one instance, a slot its lease store decided not to run (skipped, late). The mark
// keeps a lease winner's RecordClaim from taking it for the claim of an instance
// without leases.
func (b *LeasedBackend) Claim(ctx context.Context, in backend.ClaimInput) (bool, error) {
	return b.claim(ctx, in, true)
}

// RecordClaim stores the claim of a won lease as a history record. Made
// WithMixedFleet, it makes it the slot's one decision shared with instances
// without leases.
//
// A first attempt is published like a plain claim (Claim): to the slot's claim
// subject, with the same Nats-Msg-Id (job + slot) and Nats-TTL, marked as leased.
// Whichever instance publishes the slot's claim first decides:
//   - Stored, or a duplicate whose stored claim is ours (a retried record): nil.
//   - A duplicate whose stored claim is leased with another token: nil, because the
//     lease store already chose the holder. This attempt's own record then goes
//     to the lease subject, as a takeover's does.
//   - A duplicate whose stored claim is not leased: an instance without leases won
//     the slot and runs it. The error wraps backend.ErrClaimedElsewhere, and the
//     caller must not run the slot.
//
// A duplicate is always read back from the stream leader. Undecided answers (10158,
// timeouts, no responders, a leaderless stream) are sent again with the same id and
// token, like Claim.
//
// Made WithMixedFleet, a takeover (in.Attempt > 1) meets the slot's claim the
// same way: the first holder may have died before its record was stored. Without
// it, a takeover's record goes to the lease subject at once. A lease subject
// record's Nats-Msg-Id (job + slot + token) stores a retried write once; it is
// kept like the results.
//
// A first attempt writes one message, on the claim subject; a takeover's
// duplicate costs one leader read more. The claim is stored for the claim's
// lifetime (the duplicate window, or the job's timeout if longer).
func (b *LeasedBackend) RecordClaim(ctx context.Context, in backend.ClaimInput) error {
	if err := backendutil.CheckClaim("jetstream", in.Job, in.Token); err != nil {
		return err
	}
	st, err := b.claimStream(ctx, in.Job, "record claim")
	if err != nil {
		return err
	}
	if in.Attempt > 1 && !b.cfg.mixedFleet {
		return b.recordLease(ctx, st, in)
	}
	slot := in.Slot.UnixMilli()
	now := time.Now()
	key := st.slotKey(slot)
	b.memo.send(key, in.Token, now, st.ttl())
	ans, err := b.publishClaim(ctx, st, claimSend{msg: st.claimMsg(in, true, now), slot: slot, op: "record claim"}, func(uint64) bool { return true })
	if err == nil {
		b.memo.answered(key, in.Token, ans, time.Now(), st.ttl())
	}
	switch {
	case err != nil:
		return err
	case ans.won(in.Token):
		return nil
	case !ans.held.Leased:
		return fmt.Errorf("jetstream: record claim of job %q slot %d on stream %q: %w (instance %q, claim at sequence %d): "+
			"instances without leases share the job, and this slot is theirs",
			in.Job, slot, st.names.stream, backend.ErrClaimedElsewhere, ans.held.Instance, ans.seq)
	default:
		return b.recordLease(ctx, st, in)
	}
}

// recordLease writes in to the job's lease subject.
func (b *LeasedBackend) recordLease(ctx context.Context, st *jobStream, in backend.ClaimInput) error {
	ctx, cancel := b.callContext(ctx)
	defer cancel()
	slot := in.Slot.UnixMilli()
	msg := &nats.Msg{Subject: st.leases, Header: nats.Header{}, Data: encodeClaim(in, false, time.Now())}
	msg.Header.Set(natsjs.MsgIDHeader, st.msgID(slot)+":"+in.Token)
	if in.HistoryTTL > 0 {
		msg.Header.Set(natsjs.MsgTTLHeader, natsutil.TTLHeader(in.HistoryTTL))
	}
	if err := b.publish(ctx, st, msg); err != nil {
		return fmt.Errorf("jetstream: record claim of job %q on stream %q: %w", in.Job, st.names.stream, err)
	}
	return nil
}
