package jetstream

import (
	"context"
	"encoding/json"
	"fmt"
	"strconv"
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

// A mixed fleet: instances built with New and with NewLeased WithMixedFleet on one
// job, as during a rolling upgrade that turns leases on or off. Both decide a first
// attempt through the slot's one claim.

// mixedPair returns a plain and a leased backend (WithMixedFleet) on their own
// connections to s, and a prepared job.
func mixedPair(t *testing.T, s *embedded.Server, prefix string, opts ...Option) (*Backend, *LeasedBackend, string) {
	t.Helper()
	ctx := ctxFor(t)
	plain := newBackend(t, natstest.JetStream(t, natstest.Conn(t, s)), opts...)
	lb, err := NewLeased(natstest.JetStream(t, natstest.Conn(t, s)), memory.NewRunStore(backend.SystemClock{}), append(opts, WithMixedFleet())...)
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

	// Without WithMixedFleet, a takeover goes to the lease subject at once.
	fleetOnly, err := NewLeased(natstest.JetStream(t, natstest.Conn(t, s)), memory.NewRunStore(backend.SystemClock{}))
	require.NoError(t, err)
	job2 := jobName("takeover-leased-fleet")
	require.NoError(t, fleetOnly.PrepareJob(ctx, limits(job2)))
	take = claimIn(job2, slot(0), token(), "backup")
	take.Attempt = 2
	require.NoError(t, fleetOnly.RecordClaim(ctx, take))
	counts = subjectCounts(t, fleetOnly.Backend, job2)
	assert.EqualValues(t, 1, counts[fleetOnly.cached(job2).leases])
	assert.Zero(t, counts[fleetOnly.cached(job2).claimSubject(slot(0).UnixMilli())])
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
	lb2, err := NewLeased(natstest.JetStream(t, natstest.Conn(t, s)), memory.NewRunStore(backend.SystemClock{}), WithMixedFleet())
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

// TestMixedFleetRunsEachSlotOnce follows the steps of docs/backends.md ("Mixed
// fleets") in both directions. The old kind runs alone, then instances
// WithMixedFleet beside it, then the new kind beside those. Each slot's handler
// runs exactly once. At the end the stream's mode refuses the old kind.
func TestMixedFleetRunsEachSlotOnce(t *testing.T) {
	s := natstest.Server(t, embedded.Options{})
	t.Run("leases turned on", func(t *testing.T) { testRollingUpgrade(t, s, plainKind, leasedKind) })
	t.Run("leases turned off", func(t *testing.T) { testRollingUpgrade(t, s, leasedKind, plainKind) })
}

// fleetKind is how an instance of a rolling upgrade claims.
type fleetKind int

const (
	plainKind  fleetKind = iota // New
	mixedKind                   // NewLeased WithMixedFleet
	leasedKind                  // NewLeased
)

func (k fleetKind) String() string { return [...]string{"plain", "mixed", "leased"}[k] }

// mode is the claim mode an instance of kind k writes.
func (k fleetKind) mode() string { return [...]string{modePlain, modeMixed, modeLeases}[k] }

// fleetBackend returns a backend of kind k on its own connection to s: a
// leased kind has a kvlease store.
func fleetBackend(t *testing.T, s *embedded.Server, k fleetKind) backend.Backend {
	t.Helper()
	js := natstest.JetStream(t, natstest.Conn(t, s))
	if k == plainKind {
		return newBackend(t, js)
	}
	store, err := kvlease.New(js)
	require.NoError(t, err)
	require.NoError(t, store.Init(ctxFor(t)))
	t.Cleanup(store.Close)
	var opts []Option
	if k == mixedKind {
		opts = append(opts, WithMixedFleet())
	}
	lb, err := NewLeased(js, store, opts...)
	require.NoError(t, err)
	return lb
}

// upgradeRig runs instances of every kind on one job and notes who ran each slot.
type upgradeRig struct {
	t        *testing.T
	s        *embedded.Server
	job      string
	interval time.Duration
	started  map[fleetKind]int

	mu  sync.Mutex
	ran map[int64][]string
}

// newScheduler returns a scheduler of kind k on the rig's job, not started.
func (r *upgradeRig) newScheduler(k fleetKind) *scheduler.Scheduler {
	r.t.Helper()
	r.started[k]++
	inst := fmt.Sprintf("%s-%d", k, r.started[k])
	sc, err := scheduler.New(scheduler.Config{Backend: fleetBackend(r.t, r.s, k), Instance: inst, MaxClockSkew: r.interval})
	require.NoError(r.t, err)
	require.NoError(r.t, sc.Every(r.job, r.interval, func(_ context.Context, run scheduler.Run) error {
		r.mu.Lock()
		r.ran[run.Slot.UnixMilli()] = append(r.ran[run.Slot.UnixMilli()], run.Instance)
		r.mu.Unlock()
		return nil
	}, scheduler.WithJitter(30*time.Millisecond)))
	return sc
}

// start starts an instance of kind k and checks the mode it left on the stream.
func (r *upgradeRig) start(k fleetKind) *scheduler.Scheduler {
	r.t.Helper()
	sc := r.newScheduler(k)
	require.NoError(r.t, sc.Start(ctxFor(r.t)), "an instance %s starts", k)
	st := sc.Backend().(interface{ cached(string) *jobStream }).cached(r.job)
	info, err := st.stream.Info(ctxFor(r.t))
	require.NoError(r.t, err)
	assert.Equal(r.t, k.mode(), info.Config.Metadata[metaClaims], "the mode an instance %s leaves", k)
	return sc
}

func (r *upgradeRig) count() int {
	r.mu.Lock()
	defer r.mu.Unlock()
	return len(r.ran)
}

// waitSlots waits until n more slots ran.
func (r *upgradeRig) waitSlots(n int, why string) {
	r.t.Helper()
	target := r.count() + n
	require.Eventually(r.t, func() bool { return r.count() >= target }, 15*time.Second, 5*time.Millisecond, why)
}

// testRollingUpgrade turns a fleet of kind from into one of kind to by the
// documented steps, one instance each.
func testRollingUpgrade(t *testing.T, s *embedded.Server, from, to fleetKind) {
	ctx := ctxFor(t)
	r := &upgradeRig{t: t, s: s, job: jobName("upgrade"), interval: 100 * time.Millisecond,
		started: map[fleetKind]int{}, ran: map[int64][]string{}}

	old := r.start(from)
	r.waitSlots(2, "the old kind runs slots alone")
	for _, k := range []fleetKind{mixedKind, to} {
		next := r.start(k)
		r.waitSlots(6, fmt.Sprintf("%s beside the instance before it", k))
		require.NoError(t, old.Stop(ctx))
		// Past the claim reach (jitter + max lateness + clock skew: 230ms) of
		// the slots the stopped instance ran.
		r.waitSlots(3, fmt.Sprintf("%s alone", k))
		old = next
	}
	// The old kind, started again by mistake, is refused.
	err := r.newScheduler(from).Start(ctx)
	require.ErrorIs(t, err, ErrMixedFleet)
	for _, want := range []string{strconv.Quote(r.job), strconv.Quote(from.mode()), strconv.Quote(to.mode()), "WithMixedFleet"} {
		assert.Contains(t, err.Error(), want)
	}
	r.waitSlots(1, "the new kind still runs")
	require.NoError(t, old.Stop(ctx))

	r.mu.Lock()
	defer r.mu.Unlock()
	first, last := int64(-1), int64(-1)
	for slot, by := range r.ran {
		assert.Len(t, by, 1, "slot %d ran on %v", slot, by)
		if first < 0 || slot < first {
			first = slot
		}
		last = max(last, slot)
	}
	// No slot between the first and the last was left unrun: an instance with
	// leases refused a slot only because one without leases had claimed it.
	for slot := first; slot <= last; slot += r.interval.Milliseconds() {
		assert.Contains(t, r.ran, slot, "slot %d ran nowhere", slot)
	}
	checkUpgradeHistory(t, old, r.job, r.ran)
}

// checkUpgradeHistory checks one ok record per slot that ran, by the instance
// that ran it. Other records are of instances with leases. A lease won and
// skipped for a plain claim. A claim too late: the lease store did not know of a
// plain run. A lease handed over unrun at Stop.
func checkUpgradeHistory(t *testing.T, sc *scheduler.Scheduler, job string, ran map[int64][]string) {
	t.Helper()
	hist, err := sc.History(ctxFor(t), job, 0)
	require.NoError(t, err)
	recs := map[int64][]backend.RunRecord{}
	for _, r := range hist {
		recs[r.Slot.UnixMilli()] = append(recs[r.Slot.UnixMilli()], r)
	}
	others := map[backend.Status]int{}
	for slot, by := range ran {
		var ok []backend.RunRecord
		for _, r := range recs[slot] {
			if r.Status == backend.StatusOK {
				ok = append(ok, r)
				continue
			}
			others[r.Status]++
			assert.NotContains(t, r.Instance, plainKind.String(), "slot %d: %+v", slot, r)
			switch r.Status {
			case backend.StatusLate:
			case backend.StatusCancelled:
				assert.Contains(t, r.Error, "not run", "slot %d", slot)
			default:
				assert.Equal(t, backend.StatusSkipped, r.Status, "slot %d: %+v", slot, r)
				assert.Contains(t, r.Error, backend.ErrClaimedElsewhere.Error(), "slot %d", slot)
			}
		}
		if assert.Len(t, ok, 1, "slot %d: History %+v", slot, recs[slot]) {
			assert.Equal(t, by[0], ok[0].Instance, "slot %d", slot)
		}
	}
	t.Logf("%d slots ran; records of instances with leases beside plain runs: %v", len(ran), others)
}

// TestMixedFleetOutOfOrder: the second step of an upgrade taken while an
// instance of the old kind still runs, which the start check does not see. Each
// instance follows the mode the other sets: once it did, each slot runs once.
func TestMixedFleetOutOfOrder(t *testing.T) {
	s := natstest.Server(t, embedded.Options{})
	newRig := func(t *testing.T) *upgradeRig {
		return &upgradeRig{t: t, s: s, job: jobName("out-of-order"), interval: 100 * time.Millisecond,
			started: map[fleetKind]int{}, ran: map[int64][]string{}}
	}
	seen := func(r *upgradeRig, sc *scheduler.Scheduler) string {
		return sc.Backend().(interface{ cached(string) *jobStream }).cached(r.job).lastMode()
	}
	onceFrom := func(r *upgradeRig, from time.Time) {
		r.t.Helper()
		r.mu.Lock()
		defer r.mu.Unlock()
		twice := 0
		for slot, by := range r.ran {
			if time.UnixMilli(slot).Before(from) {
				twice += map[bool]int{true: 1}[len(by) > 1]
				continue
			}
			assert.Len(r.t, by, 1, "slot %d ran on %v", slot, by)
		}
		r.t.Logf("slots run twice before every instance read the mode: %d", twice)
	}

	t.Run("leases without the option beside a plain instance", func(t *testing.T) {
		ctx := ctxFor(t)
		r := newRig(t)
		plain := r.start(plainKind)
		mixed := r.start(mixedKind)
		leased := r.start(leasedKind) // before the plain instance stopped
		require.Eventually(t, func() bool { return seen(r, plain) == modeLeases }, 5*time.Second, time.Millisecond)
		from := time.Now()
		r.waitSlots(8, "all three run the job")
		for _, sc := range []*scheduler.Scheduler{plain, mixed, leased} {
			require.NoError(t, sc.Stop(ctx))
		}
		onceFrom(r, from)
	})
	t.Run("a plain instance beside leases without the option", func(t *testing.T) {
		ctx := ctxFor(t)
		r := newRig(t)
		leased := r.start(leasedKind)
		mixed := r.start(mixedKind)
		require.Eventually(t, func() bool { return seen(r, leased) == modeMixed }, 5*time.Second, time.Millisecond)
		// The slots the instance with leases ran before then are recorded nowhere
		// a plain claim meets: the plain instance may claim them within their reach.
		from := time.Now()
		plain := r.start(plainKind) // before the instance with leases alone was restarted
		r.waitSlots(8, "all three run the job")
		for _, sc := range []*scheduler.Scheduler{plain, mixed, leased} {
			require.NoError(t, sc.Stop(ctx))
		}
		onceFrom(r, from)
	})
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
	leased := func() *LeasedBackend { return fleetBackend(t, s, mixedKind).(*LeasedBackend) }
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
	// One record per attempt: the plain run, the dying holder's lease taken over,
	// the backup's takeover skipped for the plain claim.
	got := map[string]backend.RunRecord{}
	for _, r := range hist {
		if r.Slot.Equal(slot) {
			assert.NotContains(t, got, r.Instance, "%+v", hist)
			got[r.Instance] = r
		}
	}
	require.Len(t, got, 3, "%+v", hist)
	assert.Equal(t, backend.StatusOK, got["plain"].Status)
	assert.Equal(t, backend.StatusLost, got["dying"].Status)
	assert.Equal(t, backend.StatusSkipped, got["backup"].Status)
	assert.Equal(t, 2, got["backup"].Attempt)
	assert.Contains(t, got["backup"].Error, backend.ErrClaimedElsewhere.Error())
	assert.Contains(t, got["backup"].Error, `"plain"`, "the record names the instance that ran the slot")
}
