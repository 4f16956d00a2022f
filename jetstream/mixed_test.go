package jetstream

import (
	"context"
	"encoding/json"
	"sync"
	"testing"
	"time"

	natsjs "github.com/nats-io/nats.go/jetstream"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/anarchon/anarchon/backend"
	"github.com/anarchon/anarchon/backend/memory"
	"github.com/anarchon/anarchon/embedded"
	"github.com/anarchon/anarchon/internal/natstest"
	"github.com/anarchon/anarchon/kvlease"
	"github.com/anarchon/anarchon/scheduler"
)

// A mixed fleet: instances built with New and with NewLeased on one job, as during a
// rolling upgrade that turns leases on or off. Both decide a first attempt through
// the slot's one claim.

// mixedPair returns a plain and a leased backend on their own connections to s, and
// a prepared job.
func mixedPair(t *testing.T, s *embedded.Server, prefix string, opts ...Option) (*Backend, *LeasedBackend, string) {
	t.Helper()
	ctx := ctxFor(t)
	plain := newBackend(t, natstest.JetStream(t, natstest.Conn(t, s)), opts...)
	lb, err := NewLeased(natstest.JetStream(t, natstest.Conn(t, s)), memory.NewRunStore(backend.SystemClock{}), opts...)
	require.NoError(t, err)
	require.NoError(t, lb.Init(ctx))
	t.Cleanup(func() { _ = lb.Close(context.Background()) })
	job := jobName(prefix)
	require.NoError(t, plain.PrepareJob(ctx, limits(job)))
	require.NoError(t, lb.PrepareJob(ctx, limits(job)))
	return plain, lb, job
}

// subjectCounts returns how many messages each of the job's subjects holds.
func subjectCounts(t *testing.T, b *Backend, job string) map[string]uint64 {
	t.Helper()
	st := b.cached(job)
	require.NotNil(t, st)
	info, err := st.stream.Info(ctxFor(t), natsjs.WithSubjectFilter(st.all))
	require.NoError(t, err)
	if info.State.Subjects == nil {
		return map[string]uint64{}
	}
	return info.State.Subjects
}

func TestClaimRecordLeasedFlag(t *testing.T) {
	in := claimIn("j", slot(0), "t", "a")
	var raw map[string]any
	require.NoError(t, json.Unmarshal(encodeClaimAs(in, false, true, time.Now()), &raw))
	assert.Equal(t, true, raw["leased"])
	var plain map[string]any
	require.NoError(t, json.Unmarshal(encodeClaim(in, false, time.Now()), &plain))
	_, ok := plain["leased"]
	assert.False(t, ok, "a plain claim has no leased field")

	c, err := parseClaim("j", encodeClaimAs(in, false, true, time.Now()))
	require.NoError(t, err)
	assert.True(t, c.Leased)
	c, err = parseClaim("j", []byte(`{"v":1,"job":"j","slot_ms":1,"token":"t"}`))
	require.NoError(t, err)
	assert.False(t, c.Leased, "a record written before the field is a plain claim")
	rec, _, err := decodeClaim("j", kindClaim, encodeClaimAs(in, false, true, time.Now()))
	require.NoError(t, err, "History reads a leased claim like any claim")
	assert.Equal(t, in.Token, rec.Token)
	assert.Equal(t, 1, rec.Attempt)
}

// TestMixedPlainClaimFirst: an instance without leases claims the slot first; the
// lease winner's RecordClaim reports the slot as claimed elsewhere, every time.
func TestMixedPlainClaimFirst(t *testing.T) {
	s := natstest.Server(t, embedded.Options{})
	plain, lb, job := mixedPair(t, s, "plain-first")
	ctx := ctxFor(t)

	pin := claimIn(job, slot(0), token(), "plain")
	won, err := plain.Claim(ctx, pin)
	require.NoError(t, err)
	require.True(t, won)

	lin := claimIn(job, slot(0), token(), "leased")
	for range 2 { // the second as a retry of the first
		err = lb.RecordClaim(ctx, lin)
		require.ErrorIs(t, err, backend.ErrClaimedElsewhere)
		assert.Contains(t, err.Error(), lb.cached(job).names.stream)
		assert.Contains(t, err.Error(), "without leases share the job")
		assert.Contains(t, err.Error(), `"plain"`, "the error names the instance holding the slot")
	}

	won, err = plain.Claim(ctx, pin)
	require.NoError(t, err)
	assert.True(t, won, "the plain claim is still repeat-safe")

	st := lb.cached(job)
	counts := subjectCounts(t, lb.Backend, job)
	assert.EqualValues(t, 1, counts[st.claimSubject(slot(0).UnixMilli())])
	assert.Zero(t, counts[st.leases], "a refused lease leaves no record")
	hist, err := lb.History(ctx, job, 10)
	require.NoError(t, err)
	require.Len(t, hist, 1)
	assert.Equal(t, pin.Token, hist[0].Token)
	assert.Equal(t, "plain", hist[0].Instance)
}

// TestMixedLeasedRecordFirst: the lease winner records first; an instance without
// leases then loses the slot, with or without reading the stored claim back.
func TestMixedLeasedRecordFirst(t *testing.T) {
	s := natstest.Server(t, embedded.Options{})
	plain, lb, job := mixedPair(t, s, "leased-first")
	ctx := ctxFor(t)
	st := lb.cached(job)

	lin := claimIn(job, slot(0), token(), "leased")
	require.NoError(t, lb.RecordClaim(ctx, lin))
	require.NoError(t, lb.RecordClaim(ctx, lin), "a retried record finds its own claim")

	won, err := plain.Claim(ctx, claimIn(job, slot(0), token(), "plain"))
	require.NoError(t, err)
	assert.False(t, won, "a plain claim loses to the leased record")
	verify := newBackend(t, natstest.JetStream(t, natstest.Conn(t, s)), WithVerifyEveryDuplicate())
	won, err = verify.Claim(ctx, claimIn(job, slot(0), token(), "plain-verify"))
	require.NoError(t, err, "the read-back decodes the leased record")
	assert.False(t, won)
	won, err = verify.Claim(ctx, lin)
	require.NoError(t, err)
	assert.True(t, won, "the stored leased claim holds the lease winner's token")

	counts := subjectCounts(t, lb.Backend, job)
	assert.EqualValues(t, 1, counts[st.claimSubject(slot(0).UnixMilli())])
	assert.Zero(t, counts[st.leases], "a first attempt writes one message, on the claim subject")

	// Another attempt-1 lease of the slot (a lease store that lost its state): the
	// stored claim is leased, so the lease store's choice stands, and this attempt is
	// recorded on the lease subject.
	other := claimIn(job, slot(0), token(), "leased-2")
	require.NoError(t, lb.RecordClaim(ctx, other))
	require.NoError(t, lb.RecordClaim(ctx, other))
	counts = subjectCounts(t, lb.Backend, job)
	assert.EqualValues(t, 1, counts[st.claimSubject(slot(0).UnixMilli())])
	assert.EqualValues(t, 1, counts[st.leases])

	// A takeover goes to the lease subject, as before.
	take := claimIn(job, slot(0), token(), "backup")
	take.Attempt = 2
	require.NoError(t, lb.RecordClaim(ctx, take))
	counts = subjectCounts(t, lb.Backend, job)
	assert.EqualValues(t, 1, counts[st.claimSubject(slot(0).UnixMilli())])
	assert.EqualValues(t, 2, counts[st.leases])
}

// TestMixedTakeoverMeetsThePlainClaim: the lease's first holder died after taking
// the lease and before recording it, so the slot's claim subject was free and an
// instance without leases claimed and ran the slot. The backup's takeover meets that
// claim and is refused: the slot runs once. A takeover that finds no claim at all
// stores its own there, and a plain claim then loses.
func TestMixedTakeoverMeetsThePlainClaim(t *testing.T) {
	s := natstest.Server(t, embedded.Options{})
	plain, lb, job := mixedPair(t, s, "takeover")
	ctx := ctxFor(t)
	st := lb.cached(job)

	won, err := plain.Claim(ctx, claimIn(job, slot(0), token(), "plain"))
	require.NoError(t, err)
	require.True(t, won)
	take := claimIn(job, slot(0), token(), "backup")
	take.Attempt = 2
	err = lb.RecordClaim(ctx, take)
	require.ErrorIs(t, err, backend.ErrClaimedElsewhere, "a takeover is arbitrated against the plain claim")
	assert.Contains(t, err.Error(), `"plain"`)

	take = claimIn(job, slot(1), token(), "backup")
	take.Attempt = 2
	require.NoError(t, lb.RecordClaim(ctx, take))
	require.NoError(t, lb.RecordClaim(ctx, take), "repeat-safe")
	won, err = plain.Claim(ctx, claimIn(job, slot(1), token(), "plain"))
	require.NoError(t, err)
	assert.False(t, won, "the takeover's record is the slot's claim")
	counts := subjectCounts(t, lb.Backend, job)
	assert.EqualValues(t, 1, counts[st.claimSubject(slot(1).UnixMilli())])
	assert.Zero(t, counts[st.leases])

	// Made WithLeasedFleet, a takeover goes to the lease subject at once.
	_, fleetOnly, job2 := mixedPair(t, s, "takeover-leased-fleet", WithLeasedFleet())
	take = claimIn(job2, slot(0), token(), "backup")
	take.Attempt = 2
	require.NoError(t, fleetOnly.RecordClaim(ctx, take))
	counts = subjectCounts(t, fleetOnly.Backend, job2)
	assert.EqualValues(t, 1, counts[fleetOnly.cached(job2).leases])
}

// TestMixedFirstPublishUnacknowledged: the leased record reached the stream but its
// acknowledgement was lost; RecordClaim sent again finds its own token.
func TestMixedFirstPublishUnacknowledged(t *testing.T) {
	s := natstest.Server(t, embedded.Options{})
	js := natstest.JetStream(t, natstest.Conn(t, s))
	_, lb, job := mixedPair(t, s, "unacked")
	ctx := ctxFor(t)
	st := lb.cached(job)

	in := claimIn(job, slot(0), token(), "leased")
	_, err := js.PublishMsg(ctx, st.claimMsg(in, true, time.Now()))
	require.NoError(t, err)
	lb2, err := NewLeased(natstest.JetStream(t, natstest.Conn(t, s)), memory.NewRunStore(backend.SystemClock{}))
	require.NoError(t, err)
	require.NoError(t, lb2.PrepareJob(ctx, limits(job)))
	require.NoError(t, lb2.RecordClaim(ctx, in))
	counts := subjectCounts(t, lb.Backend, job)
	assert.EqualValues(t, 1, counts[st.claimSubject(slot(0).UnixMilli())])
	assert.Zero(t, counts[st.leases])
}

// TestLeasedClaimIsLeased: LeasedBackend.Claim (which the scheduler uses to record a
// skipped or late slot from one instance) marks its claim as leased, so a lease
// winner of that slot is not refused as if an instance without leases held it, and
// a plain claim still loses to it.
func TestLeasedClaimIsLeased(t *testing.T) {
	s := natstest.Server(t, embedded.Options{})
	plain, lb, job := mixedPair(t, s, "leased-claim")
	ctx := ctxFor(t)

	late := claimIn(job, slot(0), token(), "leased-a")
	won, err := lb.Claim(ctx, late)
	require.NoError(t, err)
	require.True(t, won)
	won, err = lb.Claim(ctx, late)
	require.NoError(t, err)
	assert.True(t, won, "repeat-safe")

	require.NoError(t, lb.RecordClaim(ctx, claimIn(job, slot(0), token(), "leased-b")))
	won, err = plain.Claim(ctx, claimIn(job, slot(0), token(), "plain"))
	require.NoError(t, err)
	assert.False(t, won)

	st := lb.cached(job)
	m, err := st.stream.GetLastMsgForSubject(ctx, st.claimSubject(slot(0).UnixMilli()))
	require.NoError(t, err)
	c, err := parseClaim(job, m.Data)
	require.NoError(t, err)
	assert.True(t, c.Leased)
	assert.Equal(t, late.Token, c.Token)
}

// TestHistoryOfLeasedRunsOneRecordPerAttempt: with attempt 1 on the claim subject
// and takeovers on the lease subject, History shows each attempt once, with the
// status of its result, and no run left "running".
func TestHistoryOfLeasedRunsOneRecordPerAttempt(t *testing.T) {
	s := natstest.Server(t, embedded.Options{})
	_, lb, job := mixedPair(t, s, "history")
	ctx := ctxFor(t)
	keep := backend.Retention{Size: 50}
	save := func(in backend.ClaimInput, status backend.Status, by string) {
		t.Helper()
		now := time.Now()
		require.NoError(t, lb.SaveResult(ctx, job, backend.StoredResult{
			Slot: in.Slot, Token: in.Token, Instance: by, Attempt: in.Attempt, Status: status,
			StartedAt: now.Add(-time.Millisecond), FinishedAt: now,
		}, keep))
	}

	// Slot 0: won, recorded twice (a retry), finished.
	a0 := claimIn(job, slot(0), token(), "a")
	require.NoError(t, lb.RecordClaim(ctx, a0))
	require.NoError(t, lb.RecordClaim(ctx, a0))
	save(a0, backend.StatusOK, "a")

	// Slot 1: won by a, whose lease expired; b took over (attempt 2), recorded a's
	// attempt as lost, and finished.
	a1 := claimIn(job, slot(1), token(), "a")
	require.NoError(t, lb.RecordClaim(ctx, a1))
	b1 := claimIn(job, slot(1), token(), "b")
	b1.Attempt = 2
	require.NoError(t, lb.RecordClaim(ctx, b1))
	require.NoError(t, lb.RecordClaim(ctx, b1))
	save(a1, backend.StatusLost, "b")
	save(b1, backend.StatusError, "b")

	hist, err := lb.History(ctx, job, 10)
	require.NoError(t, err)
	type rec struct {
		slot    time.Time
		attempt int
		inst    string
		status  backend.Status
	}
	var got []rec
	for _, r := range hist {
		got = append(got, rec{r.Slot, r.Attempt, r.Instance, r.Status})
		assert.False(t, r.ClaimedAt.IsZero(), "slot %v attempt %d: the claim is part of the record", r.Slot, r.Attempt)
	}
	want := []rec{
		{slot(1), 2, "b", backend.StatusError},
		{slot(1), 1, "b", backend.StatusLost},
		{slot(0), 1, "a", backend.StatusOK},
	}
	require.Len(t, got, len(want), "%+v", got)
	for i := range want {
		assert.True(t, want[i].slot.Equal(got[i].slot), "record %d: slot %v, want %v", i, got[i].slot, want[i].slot)
		assert.Equal(t, want[i].attempt, got[i].attempt, "record %d", i)
		assert.Equal(t, want[i].inst, got[i].inst, "record %d", i)
		assert.Equal(t, want[i].status, got[i].status, "record %d", i)
	}

	st := lb.cached(job)
	counts := subjectCounts(t, lb.Backend, job)
	assert.EqualValues(t, 1, counts[st.claimSubject(slot(0).UnixMilli())])
	assert.EqualValues(t, 1, counts[st.claimSubject(slot(1).UnixMilli())])
	assert.EqualValues(t, 1, counts[st.leases], "only the takeover is on the lease subject")
	assert.EqualValues(t, 3, counts[st.results])
}

// TestMixedFleetRunsEachSlotOnce runs two schedulers on one job and one server, one
// built with New and one with NewLeased and a kvlease store, through both directions
// of a rolling upgrade: each slot's handler runs exactly once.
//
// It needs the scheduler to call RecordClaim before it starts a first attempt and
// to leave a slot alone on backend.ErrClaimedElsewhere.
func TestMixedFleetRunsEachSlotOnce(t *testing.T) {
	s := natstest.Server(t, embedded.Options{})
	t.Run("leases turned on", func(t *testing.T) { testMixedFleet(t, s, false) })
	t.Run("leases turned off", func(t *testing.T) { testMixedFleet(t, s, true) })
}

// testMixedFleet starts the old instance, then the new one beside it, then stops the
// old one. leasedFirst says which kind is the old one.
func testMixedFleet(t *testing.T, s *embedded.Server, leasedFirst bool) {
	ctx := ctxFor(t)
	job := jobName("mixed")
	const interval = 100 * time.Millisecond

	var mu sync.Mutex
	ran := map[int64][]string{}
	count := func() int {
		mu.Lock()
		defer mu.Unlock()
		return len(ran)
	}

	newSched := func(leased bool) *scheduler.Scheduler {
		t.Helper()
		js := natstest.JetStream(t, natstest.Conn(t, s))
		var b backend.Backend
		inst := "plain"
		if leased {
			inst = "leased"
			store, err := kvlease.New(js)
			require.NoError(t, err)
			require.NoError(t, store.Init(ctx))
			t.Cleanup(store.Close)
			lb, err := NewLeased(js, store)
			require.NoError(t, err)
			b = lb
		} else {
			pb, err := New(js)
			require.NoError(t, err)
			b = pb
		}
		sc, err := scheduler.New(scheduler.Config{Backend: b, Instance: inst})
		require.NoError(t, err)
		require.NoError(t, sc.Every(job, interval, func(_ context.Context, r scheduler.Run) error {
			mu.Lock()
			ran[r.Slot.UnixMilli()] = append(ran[r.Slot.UnixMilli()], r.Instance)
			mu.Unlock()
			return nil
		}, scheduler.WithJitter(30*time.Millisecond)))
		return sc
	}
	waitSlots := func(n int, why string) {
		t.Helper()
		target := count() + n
		require.Eventually(t, func() bool { return count() >= target }, 15*time.Second, 5*time.Millisecond, why)
	}

	old := newSched(leasedFirst)
	require.NoError(t, old.Start(ctx))
	waitSlots(2, "the old instance runs slots alone")

	upgraded := newSched(!leasedFirst)
	require.NoError(t, upgraded.Start(ctx))
	waitSlots(8, "both instances run the job")
	require.NoError(t, old.Stop(ctx))
	waitSlots(2, "the new instance runs slots alone")
	require.NoError(t, upgraded.Stop(ctx))

	mu.Lock()
	defer mu.Unlock()
	first, last := int64(-1), int64(-1)
	for slot, by := range ran {
		assert.Len(t, by, 1, "slot %d ran on %v", slot, by)
		if first < 0 || slot < first {
			first = slot
		}
		last = max(last, slot)
	}
	// No slot between the first and the last was left unrun: an instance with
	// leases refused a slot only because one without leases had claimed it.
	for slot := first; slot <= last; slot += interval.Milliseconds() {
		assert.Contains(t, ran, slot, "slot %d ran nowhere", slot)
	}

	// History: one record per slot that ran, finished, by the instance that ran it.
	hist, err := upgraded.History(ctx, job, 100)
	require.NoError(t, err)
	recs := map[int64][]backend.RunRecord{}
	for _, r := range hist {
		recs[r.Slot.UnixMilli()] = append(recs[r.Slot.UnixMilli()], r)
	}
	for slot, by := range ran {
		rs := recs[slot]
		if !assert.Len(t, rs, 1, "slot %d: History %+v", slot, rs) {
			continue
		}
		assert.Equal(t, backend.StatusOK, rs[0].Status, "slot %d", slot)
		assert.Equal(t, by[0], rs[0].Instance, "slot %d", slot)
	}
}

// dyingRecorder is a LeasedBackend whose records of won leases never arrive until
// released: its instance "dies" after taking a lease and before recording it.
type dyingRecorder struct {
	*LeasedBackend
	release chan struct{}
}

func (d dyingRecorder) RecordClaim(ctx context.Context, in backend.ClaimInput) error {
	<-d.release
	return context.DeadlineExceeded
}

// TestMixedFleetTakeoverRunsTheSlotOnce: a leased holder takes the lease and dies
// before recording the slot's claim, so an instance without leases claims the slot
// and runs it; the leased backup that takes the lease over meets that claim and
// does not run the slot again.
func TestMixedFleetTakeoverRunsTheSlotOnce(t *testing.T) {
	s := natstest.Server(t, embedded.Options{})
	ctx := ctxFor(t)
	job := jobName("mixed-takeover")
	const interval = 5 * time.Second

	var mu sync.Mutex
	ran := map[int64][]string{}
	handler := func(_ context.Context, r scheduler.Run) error {
		mu.Lock()
		ran[r.Slot.UnixMilli()] = append(ran[r.Slot.UnixMilli()], r.Instance)
		mu.Unlock()
		return nil
	}
	leased := func() *LeasedBackend {
		js := natstest.JetStream(t, natstest.Conn(t, s))
		store, err := kvlease.New(js)
		require.NoError(t, err)
		require.NoError(t, store.Init(ctx))
		t.Cleanup(store.Close)
		lb, err := NewLeased(js, store)
		require.NoError(t, err)
		return lb
	}
	sched := func(b backend.Backend, inst string) *scheduler.Scheduler {
		sc, err := scheduler.New(scheduler.Config{Backend: b, Instance: inst})
		require.NoError(t, err)
		require.NoError(t, sc.Every(job, interval, handler, scheduler.WithLease(time.Second), scheduler.WithMaxLate(3*time.Second)))
		return sc
	}
	release := make(chan struct{})
	dying := sched(dyingRecorder{leased(), release}, "dying")
	plain := sched(newBackend(t, natstest.JetStream(t, natstest.Conn(t, s))), "plain")
	backup := sched(leased(), "backup")

	// Just before a slot: the dying holder and the plain instance claim at it, the
	// backup a moment later, so it stands by for the dying holder's lease.
	now := time.Now()
	slot := now.Truncate(interval).Add(interval)
	if slot.Sub(now) < time.Second {
		slot = slot.Add(interval)
	}
	time.Sleep(time.Until(slot) - 300*time.Millisecond)
	require.NoError(t, dying.Start(ctx))
	require.NoError(t, plain.Start(ctx))
	time.Sleep(time.Until(slot) + 400*time.Millisecond)
	require.NoError(t, backup.Start(ctx))
	time.Sleep(4 * time.Second) // the lease (1s) expires, the backup takes it over
	close(release)
	for _, sc := range []*scheduler.Scheduler{plain, backup, dying} {
		require.NoError(t, sc.Stop(ctx))
	}

	mu.Lock()
	defer mu.Unlock()
	assert.Equal(t, []string{"plain"}, ran[slot.UnixMilli()], "the slot runs once, on the instance without leases")
	hist, err := plain.History(ctx, job, 10)
	require.NoError(t, err)
	var terminal []backend.RunRecord
	for _, r := range hist {
		if r.Slot.Equal(slot) && r.Status.Finished() && r.Status != backend.StatusLost {
			terminal = append(terminal, r)
		}
	}
	require.Len(t, terminal, 1, "%+v", hist)
	assert.Equal(t, backend.StatusOK, terminal[0].Status)
	assert.Equal(t, "plain", terminal[0].Instance)
}
