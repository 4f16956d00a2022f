package main

import (
	"context"
	"strconv"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/anarchon/anarchon/backend"
	"github.com/anarchon/anarchon/scheduler"
)

// Go benchmarks of the hot paths that cross packages, over loopback TCP to an
// embedded server, on the same rig as the command's first section:
//
//	go test -C integration/bench -run '^$' -bench . -benchtime 200x .
//
// The claim itself (won, lost, against a raw publish) is benchmarked in
// jetstream/bench_test.go, and the lease operations (claim, heartbeat, finish) in
// kvlease/bench_test.go; these add what a whole slot costs when the pieces are put
// together, and History. Each reports round trips per operation (from the
// connection's message counters) beside p50 and p99.

func benchRig(b *testing.B, leases bool) *claimRig {
	b.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	r, err := newClaimRig(ctx, nil, leases)
	require.NoError(b, err, "the embedded nats-server and the rig must start")
	b.Cleanup(r.close)
	return r
}

// measure runs f b.N times on o's connection and reports percentiles and round trips.
func measure(b *testing.B, o *op, f func() error) {
	b.Helper()
	b.ResetTimer()
	for b.Loop() {
		if err := o.do(true, f); err != nil {
			b.Fatal(err)
		}
	}
	b.StopTimer()
	b.ReportMetric(float64(o.lat.pct(50).Nanoseconds())/1e3, "p50-µs")
	b.ReportMetric(float64(o.lat.pct(99).Nanoseconds())/1e3, "p99-µs")
	b.ReportMetric(float64(o.msgs.out)/float64(o.n()), "round-trips/op")
}

// BenchmarkHistory reads the newest 10 and 100 runs of a job holding 120 finished
// runs (a claim and a result each).
func BenchmarkHistory(b *testing.B) {
	r := benchRig(b, false)
	require.NoError(b, r.fillHistory(context.Background()))
	for _, limit := range []int{10, 100} {
		b.Run(strconv.Itoa(limit), func(b *testing.B) {
			o := &op{name: "history", conn: r.win.nc}
			measure(b, o, func() error { return r.history(context.Background(), limit) })
		})
	}
}

// BenchmarkWonSlotPlain is a won slot's whole store traffic on the plain JetStream
// backend, as the scheduler sends it: Claim, then SaveResult.
func BenchmarkWonSlotPlain(b *testing.B) {
	r := benchRig(b, false)
	ctx := context.Background()
	o := &op{name: "won slot", conn: r.win.nc}
	measure(b, o, func() error {
		slot := r.nextSlot()
		in := claimInput(claimJob, slot, newToken(), "bench-win")
		won, err := r.bwin.Claim(ctx, in)
		if err != nil || !won {
			return errOr(err, "claim lost")
		}
		now := time.Now()
		return r.bwin.SaveResult(ctx, claimJob, backend.StoredResult{
			Slot: slot, Token: in.Token, Instance: in.Instance, Attempt: 1, Status: scheduler.StatusOK, StartedAt: now, FinishedAt: now,
		}, backend.Retention{Size: scheduler.DefaultHistorySize})
	})
}

// BenchmarkWonSlotLeased is a won slot's whole store traffic with kvlease leases, as
// the scheduler sends it for a short handler (no heartbeat falls due): Store.Claim,
// RecordClaim, Store.Finish, SaveResult, all on one connection.
func BenchmarkWonSlotLeased(b *testing.B) {
	r := benchRig(b, true)
	ctx := context.Background()
	st, err := newStore(ctx, r.lrec)
	require.NoError(b, err)
	b.Cleanup(st.Close)
	o := &op{name: "won leased slot", conn: r.lrec.nc}
	measure(b, o, func() error {
		slot := r.nextSlot()
		tok := newToken()
		res, err := st.Claim(ctx, backend.RunClaim{
			Job: leaseJob, Slot: slot, Token: tok, Instance: "bench-win", Lease: benchLease,
			Deadline: time.Now().Add(time.Hour), Keep: 2 * time.Minute,
		})
		if err != nil || res.Outcome != backend.OutcomeWon {
			return errOr(err, "lease claim: "+string(res.Outcome))
		}
		in := claimInput(leaseJob, slot, tok, "bench-win")
		if err := r.leased.RecordClaim(ctx, in); err != nil {
			return err
		}
		if err := st.Finish(ctx, backend.RunKey{Job: leaseJob, Slot: slot, Token: tok}, scheduler.StatusOK); err != nil {
			return err
		}
		now := time.Now()
		return r.leased.SaveResult(ctx, leaseJob, backend.StoredResult{
			Slot: slot, Token: tok, Instance: in.Instance, Attempt: 1, Status: scheduler.StatusOK, StartedAt: now, FinishedAt: now, Fence: res.Fence,
		}, backend.Retention{Size: scheduler.DefaultHistorySize})
	})
}

func errOr(err error, msg string) error {
	if err != nil {
		return err
	}
	return &benchError{msg}
}

type benchError struct{ msg string }

func (e *benchError) Error() string { return e.msg }
