package integration

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"math/rand/v2"
	"net"
	"slices"
	"sort"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/stretchr/testify/require"

	"github.com/anarchon/anarchon/embedded"
	"github.com/anarchon/anarchon/jetstream"
	"github.com/anarchon/anarchon/kvlease"
	"github.com/anarchon/anarchon/scheduler"
)

// Helpers of the fault tests (leader loss, lost acknowledgements, partitioned
// replica). Every name here starts with "fault" so that it cannot collide with the
// helpers of the other integration tests.

// faultExec is one handler execution: one attempt of one slot on one instance.
type faultExec struct {
	run   scheduler.Run
	start time.Time
	end   time.Time // zero while the handler runs
	// cancelled is when the handler saw its context end (zero if it returned on its
	// own), and cause is context.Cause then.
	cancelled time.Time
	cause     error
}

// faultKey names one slot of one job.
type faultKey struct {
	job  string
	slot int64 // Unix ms
}

func (k faultKey) String() string {
	return fmt.Sprintf("%s@%s", k.job, time.UnixMilli(k.slot).UTC().Format("15:04:05.000"))
}

// faultRecorder is the ledger of a fault test, shared by all its instances: every
// handler start and end, and the scheduler events that tell what happened to slots
// that did not run.
type faultRecorder struct {
	mu    sync.Mutex
	execs map[faultKey][]*faultExec // in start order
	// won counts EventClaimed per (slot, attempt): exactly one winner each.
	won     map[faultKey]map[int]int
	late    map[faultKey]int // EventLate, all instances
	skipped map[faultKey]int // EventSkipped, all instances
	// lostNone counts EventLost with outcome none: a backup found nothing to take over.
	lostNone   map[faultKey]int
	takeovers  int            // EventTakeover
	leaseLost  int            // EventLeaseLost
	errsByOp   map[string]int // EventBackendError by Op
	errSamples map[string][]string
	claimErrs  map[faultKey]int // claim errors by slot
	// claimErrBy counts claim errors by slot and instance; wonAfterErr counts wins
	// by an instance whose earlier claim of the same slot failed (a retry that won).
	claimErrBy  map[faultKey]map[string]int
	wonAfterErr int
	// trace keeps every event of every slot, for failure messages.
	trace map[faultKey][]string
}

func newFaultRecorder() *faultRecorder {
	return &faultRecorder{
		execs:      map[faultKey][]*faultExec{},
		won:        map[faultKey]map[int]int{},
		late:       map[faultKey]int{},
		skipped:    map[faultKey]int{},
		lostNone:   map[faultKey]int{},
		errsByOp:   map[string]int{},
		errSamples: map[string][]string{},
		claimErrs:  map[faultKey]int{},
		claimErrBy: map[faultKey]map[string]int{},
		trace:      map[faultKey][]string{},
	}
}

// onEvent is every instance's Config.OnEvent. It only counts, under a mutex.
func (r *faultRecorder) onEvent(e scheduler.Event) {
	k := faultKey{e.Job, e.Slot.UnixMilli()}
	r.mu.Lock()
	defer r.mu.Unlock()
	if e.Kind != scheduler.EventScheduled {
		line := fmt.Sprintf("%s %s %s", e.At.Format("15:04:05.000"), e.Instance, e.Kind)
		if e.Outcome != "" {
			line += " " + string(e.Outcome)
		}
		if e.Attempt > 0 {
			line += fmt.Sprintf(" attempt %d", e.Attempt)
		}
		if e.Status != "" {
			line += " " + string(e.Status)
		}
		if e.Op != "" {
			line += " op " + e.Op
		}
		if e.Err != nil {
			line += ": " + e.Err.Error()
		}
		r.trace[k] = append(r.trace[k], line)
	}
	switch e.Kind {
	case scheduler.EventClaimed:
		if r.won[k] == nil {
			r.won[k] = map[int]int{}
		}
		r.won[k][e.Attempt]++
		if r.claimErrBy[k][e.Instance] > 0 {
			r.wonAfterErr++
		}
	case scheduler.EventLate:
		r.late[k]++
	case scheduler.EventSkipped:
		r.skipped[k]++
	case scheduler.EventLost:
		if e.Outcome == scheduler.OutcomeNone {
			r.lostNone[k]++
		}
	case scheduler.EventTakeover:
		r.takeovers++
	case scheduler.EventLeaseLost:
		r.leaseLost++
	case scheduler.EventBackendError:
		r.errsByOp[e.Op]++
		if e.Op == "claim" {
			r.claimErrs[k]++
			if r.claimErrBy[k] == nil {
				r.claimErrBy[k] = map[string]int{}
			}
			r.claimErrBy[k][e.Instance]++
		}
		if len(r.errSamples[e.Op]) < 3 && e.Err != nil {
			r.errSamples[e.Op] = append(r.errSamples[e.Op], fmt.Sprintf("%s %s: %v", e.Instance, k, e.Err))
		}
	}
}

// handler returns a handler that records its execution and works for a random
// duration in [minWork, maxWork], or until its context ends (a well-behaved handler:
// it stops at once when told its lease is lost).
func (r *faultRecorder) handler(minWork, maxWork time.Duration) scheduler.Handler {
	return func(ctx context.Context, run scheduler.Run) error {
		x := &faultExec{run: run, start: time.Now()}
		k := faultKey{run.Job, run.Slot.UnixMilli()}
		r.mu.Lock()
		r.execs[k] = append(r.execs[k], x)
		r.mu.Unlock()
		t := time.NewTimer(minWork + rand.N(maxWork-minWork+1))
		defer t.Stop()
		select {
		case <-t.C:
			r.mu.Lock()
			x.end = time.Now()
			r.mu.Unlock()
			return nil
		case <-ctx.Done():
			now := time.Now()
			r.mu.Lock()
			x.end, x.cancelled, x.cause = now, now, context.Cause(ctx)
			r.mu.Unlock()
			return context.Cause(ctx)
		}
	}
}

// runningOn returns a slot of job whose handler runs on instance and started at
// least minAge ago, or the zero key.
func (r *faultRecorder) runningOn(instance, job string, minAge time.Duration) faultKey {
	r.mu.Lock()
	defer r.mu.Unlock()
	for k, xs := range r.execs {
		for _, x := range xs {
			if k.job == job && x.run.Instance == instance && x.end.IsZero() && time.Since(x.start) >= minAge {
				return k
			}
		}
	}
	return faultKey{}
}

// resolved reports whether k ran or was reported late or skipped by some instance.
func (r *faultRecorder) resolved(k faultKey) bool {
	r.mu.Lock()
	defer r.mu.Unlock()
	return len(r.execs[k]) > 0 || r.late[k] > 0 || r.skipped[k] > 0
}

// duplicates lists every (slot, attempt) whose handler started more than once.
func (r *faultRecorder) duplicates() []string {
	r.mu.Lock()
	defer r.mu.Unlock()
	var out []string
	for k, xs := range r.execs {
		seen := map[int][]string{}
		for _, x := range xs {
			seen[x.run.Attempt] = append(seen[x.run.Attempt], x.run.Instance)
		}
		for a, who := range seen {
			if len(who) > 1 {
				out = append(out, fmt.Sprintf("%s attempt %d started %d times (%s)", k, a, len(who), strings.Join(who, ", ")))
			}
		}
	}
	sort.Strings(out)
	return out
}

// multipleWinners lists every (slot, attempt) that more than one claim won.
func (r *faultRecorder) multipleWinners() []string {
	r.mu.Lock()
	defer r.mu.Unlock()
	var out []string
	for k, byAttempt := range r.won {
		for a, n := range byAttempt {
			if n > 1 {
				out = append(out, fmt.Sprintf("%s attempt %d won %d times", k, a, n))
			}
		}
	}
	sort.Strings(out)
	return out
}

// wins returns how many claims won each attempt of k.
func (r *faultRecorder) wins(k faultKey) map[int]int {
	r.mu.Lock()
	defer r.mu.Unlock()
	out := map[int]int{}
	for a, n := range r.won[k] {
		out[a] = n
	}
	return out
}

// faultTakeover is a run that started with attempt > 1 and what the attempt before
// it was doing then.
type faultTakeover struct {
	key      faultKey
	attempt  int
	by, from string
	// overlap is how long the previous attempt's handler still ran, its context not
	// cancelled, after this attempt's handler started (<= 0: none). It is positive
	// too when the previous attempt's handler started only after this one (a winner
	// that started its handler after its lease had been taken over).
	overlap time.Duration
	// prevOK: the previous attempt's handler had returned on its own (success)
	// before this one started: a finished run was run again.
	prevOK bool
	// prevCause is why the previous attempt's context ended, if it did.
	prevCause error
	// noPrev: no earlier attempt started a handler.
	noPrev bool
	// prevStart and start are when the two handlers started, after the slot.
	prevStart, start time.Duration
}

func (t faultTakeover) String() string {
	switch {
	case t.noPrev:
		return fmt.Sprintf("%s attempt %d on %s: no earlier attempt ran", t.key, t.attempt, t.by)
	case t.prevStart > t.start:
		return fmt.Sprintf("%s attempt %d on %s started (slot%+v) before attempt %d on %s (started slot%+v, after the takeover; it ran until %v after attempt %d started)",
			t.key, t.attempt, t.by, t.start.Round(time.Millisecond), t.attempt-1, t.from, t.prevStart.Round(time.Millisecond), t.overlap.Round(time.Millisecond), t.attempt)
	case t.overlap > 0:
		return fmt.Sprintf("%s attempt %d on %s started (slot%+v) while attempt %d on %s (started slot%+v) still ran with a live context for %v",
			t.key, t.attempt, t.by, t.start.Round(time.Millisecond), t.attempt-1, t.from, t.prevStart.Round(time.Millisecond), t.overlap.Round(time.Millisecond))
	case t.prevOK:
		return fmt.Sprintf("%s attempt %d on %s re-ran a slot whose attempt %d on %s had returned ok %v earlier",
			t.key, t.attempt, t.by, t.attempt-1, t.from, -t.overlap.Round(time.Millisecond))
	default:
		return fmt.Sprintf("%s attempt %d on %s after attempt %d on %s ended (%v)", t.key, t.attempt, t.by, t.attempt-1, t.from, t.prevCause)
	}
}

// takeoversSeen classifies every handler start with attempt > 1 against the attempt
// before it, as far as handlers could tell (their start, end, and context).
func (r *faultRecorder) takeoversSeen(stillRunningAt time.Time) []faultTakeover {
	r.mu.Lock()
	defer r.mu.Unlock()
	var out []faultTakeover
	for k, xs := range r.execs {
		for _, x := range xs {
			if x.run.Attempt <= 1 {
				continue
			}
			t := faultTakeover{key: k, attempt: x.run.Attempt, by: x.run.Instance, start: x.start.Sub(x.run.Slot)}
			i := slices.IndexFunc(xs, func(p *faultExec) bool { return p.run.Attempt == x.run.Attempt-1 })
			if i < 0 {
				t.noPrev = true
				out = append(out, t)
				continue
			}
			p := xs[i]
			t.from, t.prevCause, t.prevStart = p.run.Instance, p.cause, p.start.Sub(p.run.Slot)
			end := p.end
			if end.IsZero() {
				end = stillRunningAt
			}
			t.overlap = end.Sub(x.start)
			t.prevOK = p.cancelled.IsZero() && !p.end.IsZero() && !p.end.After(x.start)
			out = append(out, t)
		}
	}
	sort.Slice(out, func(i, j int) bool { return out[i].key.slot < out[j].key.slot })
	return out
}

// runsBy counts handler starts by instance for slots in [from, to].
func (r *faultRecorder) runsBy(from, to time.Time) map[string]int {
	r.mu.Lock()
	defer r.mu.Unlock()
	out := map[string]int{}
	for k, xs := range r.execs {
		if k.slot < from.UnixMilli() || k.slot > to.UnixMilli() {
			continue
		}
		for _, x := range xs {
			out[x.run.Instance]++
		}
	}
	return out
}

// execsOf returns a copy of the executions of k.
func (r *faultRecorder) execsOf(k faultKey) []faultExec {
	r.mu.Lock()
	defer r.mu.Unlock()
	out := make([]faultExec, 0, len(r.execs[k]))
	for _, x := range r.execs[k] {
		out = append(out, *x)
	}
	return out
}

// runsOf counts the handler starts of the slots in keys.
func (r *faultRecorder) runsOf(keys []faultKey) int {
	r.mu.Lock()
	defer r.mu.Unlock()
	n := 0
	for _, k := range keys {
		n += len(r.execs[k])
	}
	return n
}

func (r *faultRecorder) errors() (byOp map[string]int, samples map[string][]string) {
	r.mu.Lock()
	defer r.mu.Unlock()
	byOp, samples = map[string]int{}, map[string][]string{}
	for k, v := range r.errsByOp {
		byOp[k] = v
	}
	for k, v := range r.errSamples {
		samples[k] = slices.Clone(v)
	}
	return byOp, samples
}

// faultSlots lists the slots of an every-interval job in [from, to].
func faultSlots(job string, interval time.Duration, from, to time.Time) []faultKey {
	sched, err := scheduler.NewIntervalSchedule(interval)
	if err != nil {
		panic(err)
	}
	var out []faultKey
	for s := sched.Next(from.Add(-time.Millisecond)); !s.After(to); s = sched.Next(s) {
		out = append(out, faultKey{job, s.UnixMilli()})
	}
	return out
}

// faultAccount is what became of a set of due slots.
type faultAccount struct {
	due, ran, lateOnly, skippedOnly int
	// recordedLate counts slots that did not run whose late/skipped record is in
	// history (the rest were reported by events only).
	recordedLate int
	// dropped lists slots that neither ran nor were reported late or skipped by
	// any instance, in events or in history: silently dropped.
	dropped []faultKey
	// missed lists slots that did not run (late, skipped or dropped).
	missed []faultKey
}

func (a faultAccount) String() string {
	return fmt.Sprintf("%d due: %d ran, %d late (%d of them recorded in history), %d skipped, %d silently dropped",
		a.due, a.ran, a.lateOnly, a.recordedLate, a.skippedOnly, len(a.dropped))
}

// account decides, for every due slot, whether it ran, was reported late or skipped
// (events of any instance, or a late/skipped record in history), or was dropped.
func (r *faultRecorder) account(due []faultKey, history map[faultKey]scheduler.Status) faultAccount {
	r.mu.Lock()
	defer r.mu.Unlock()
	var a faultAccount
	for _, k := range due {
		a.due++
		hs, inHist := history[k]
		switch {
		case len(r.execs[k]) > 0:
			a.ran++
			continue
		case r.late[k] > 0 || (inHist && hs == scheduler.StatusLate):
			a.lateOnly++
		case r.skipped[k] > 0 || (inHist && hs == scheduler.StatusSkipped):
			a.skippedOnly++
		default:
			a.dropped = append(a.dropped, k)
		}
		if inHist && (hs == scheduler.StatusLate || hs == scheduler.StatusSkipped) {
			a.recordedLate++
		}
		a.missed = append(a.missed, k)
	}
	return a
}

// describe says what the recorder knows about k, for a failure message.
func (r *faultRecorder) describe(k faultKey) string {
	r.mu.Lock()
	defer r.mu.Unlock()
	return fmt.Sprintf("%s: %d runs, %d late events, %d skipped events, %d claim errors, %d 'none' answers to backups; events:\n\t%s",
		k, len(r.execs[k]), r.late[k], r.skipped[k], r.claimErrs[k], r.lostNone[k], strings.Join(r.trace[k], "\n\t"))
}

// faultHistory reads the history of jobs from s (all instances' records) and keeps,
// per slot, the status of a late or skipped record when there is one, else of any
// record.
func faultHistory(t *testing.T, s *scheduler.Scheduler, jobs []string) map[faultKey]scheduler.Status {
	t.Helper()
	out := map[faultKey]scheduler.Status{}
	for _, job := range jobs {
		var hist []scheduler.RunRecord
		var err error
		for deadline := time.Now().Add(20 * time.Second); ; {
			hist, err = s.History(ctxT(t, 5*time.Second), job, 500)
			if err == nil || time.Now().After(deadline) {
				break
			}
			sleepCtx(t, 200*time.Millisecond)
		}
		require.NoError(t, err, "history of %q reads back", job)
		for _, rec := range hist {
			k := faultKey{job, rec.Slot.UnixMilli()}
			if cur, ok := out[k]; ok && (cur == scheduler.StatusLate || cur == scheduler.StatusSkipped) {
				continue
			}
			out[k] = rec.Status
		}
	}
	return out
}

// faultInstance is one scheduler instance of a fault test on its own connection,
// with a JetStream backend and a kvlease store.
type faultInstance struct {
	name  string
	nc    *nats.Conn
	sched *scheduler.Scheduler
}

// faultDial connects to url (one URL, or several separated by commas) the way a
// replica in production would: it reconnects forever, quickly.
func faultDial(t *testing.T, name, url string, opts ...nats.Option) *nats.Conn {
	t.Helper()
	all := append([]nats.Option{
		nats.Name(name),
		nats.MaxReconnects(-1),
		nats.ReconnectWait(100 * time.Millisecond),
		nats.ReconnectJitter(50*time.Millisecond, 0),
		nats.RetryOnFailedConnect(false),
	}, opts...)
	nc, err := nats.Connect(url, all...)
	require.NoError(t, err, "connect %s to %s", name, url)
	t.Cleanup(nc.Close)
	return nc
}

// newFaultInstance builds an instance on nc: job streams and the lease bucket with
// the given replicas, events into rec. callTimeout 0 keeps the scheduler's default.
func newFaultInstance(t *testing.T, nc *nats.Conn, name string, replicas int, rec *faultRecorder, callTimeout time.Duration) *faultInstance {
	t.Helper()
	j := js(t, nc)
	store, err := kvlease.New(j, kvlease.WithReplicas(replicas))
	require.NoError(t, err)
	t.Cleanup(store.Close)
	require.NoError(t, store.Init(ctxT(t, 30*time.Second)), "lease bucket for %s", name)
	b, err := jetstream.NewLeased(j, store, jetstream.WithReplicas(replicas))
	require.NoError(t, err)
	s, err := scheduler.New(scheduler.Config{Backend: b, Instance: name, OnEvent: rec.onEvent, CallTimeout: callTimeout})
	require.NoError(t, err)
	t.Cleanup(func() { _ = s.Stop(context.Background()) })
	return &faultInstance{name: name, nc: nc, sched: s}
}

// faultStartAll starts the instances, one after the other.
func faultStartAll(t *testing.T, ins []*faultInstance) {
	t.Helper()
	for _, in := range ins {
		require.NoError(t, in.sched.Start(ctxT(t, 30*time.Second)), "start %s", in.name)
	}
}

func faultStopAll(t *testing.T, ins []*faultInstance) time.Duration {
	t.Helper()
	t0 := time.Now()
	var wg sync.WaitGroup
	errs := make([]error, len(ins))
	for i, in := range ins {
		wg.Go(func() { errs[i] = in.sched.Stop(ctxT(t, 20*time.Second)) })
	}
	wg.Wait()
	for i, err := range errs {
		require.NoError(t, err, "stop %s", ins[i].name)
	}
	return time.Since(t0)
}

// faultCluster starts a 3-node cluster that the test shuts down.
func faultCluster(t *testing.T) *embedded.Cluster {
	t.Helper()
	c, err := embedded.StartCluster(ctxT(t, 60*time.Second), embedded.ClusterOptions{ReadyTimeout: 45 * time.Second})
	require.NoError(t, err, "3-node cluster must start")
	t.Cleanup(c.Shutdown)
	return c
}

// faultJobStream is the stream the JetStream backend keeps job in (job names in these
// tests are lower case letters, digits and '-', which are their own token).
func faultJobStream(job string) string { return jetstream.DefaultStreamPrefix + "_" + job }

// faultBucketStream is the stream of the default lease bucket.
const faultBucketStream = "KV_" + kvlease.DefaultBucket

// faultLeaders returns the node leading each stream, -1 for none.
func faultLeaders(c *embedded.Cluster, streams []string) map[string]int {
	out := map[string]int{}
	for _, st := range streams {
		i, err := c.StreamLeader("", st)
		if err != nil {
			i = -1
		}
		out[st] = i
	}
	return out
}

// faultWaitLeaders waits until every stream has a leader on a running node that is
// not in avoid (a stepped-down or stopped node), and returns the leaders.
func faultWaitLeaders(t *testing.T, c *embedded.Cluster, streams []string, avoid map[string]int, within time.Duration) (map[string]int, error) {
	t.Helper()
	deadline := time.Now().Add(within)
	for {
		l := faultLeaders(c, streams)
		ok := true
		for _, st := range streams {
			if a, avoided := avoid[st]; l[st] < 0 || (avoided && l[st] == a) {
				ok = false
			}
		}
		if ok {
			return l, nil
		}
		if time.Now().After(deadline) {
			return l, fmt.Errorf("streams without a new leader after %v: %v (avoiding %v)", within, l, avoid)
		}
		select {
		case <-time.After(50 * time.Millisecond):
		case <-t.Context().Done():
			return l, t.Context().Err()
		}
	}
}

// faultStepDown asks the leader of stream to step down, through the JetStream API.
func faultStepDown(nc *nats.Conn, stream string) error {
	m, err := nc.Request("$JS.API.STREAM.LEADER.STEPDOWN."+stream, nil, 5*time.Second)
	if err != nil {
		return fmt.Errorf("step down %s: %w", stream, err)
	}
	var resp struct {
		Success bool `json:"success"`
		Error   *struct {
			Code        int    `json:"code"`
			ErrCode     int    `json:"err_code"`
			Description string `json:"description"`
		} `json:"error"`
	}
	if err := json.Unmarshal(m.Data, &resp); err != nil {
		return fmt.Errorf("step down %s: %w: %s", stream, err, m.Data)
	}
	if !resp.Success {
		if resp.Error != nil {
			return fmt.Errorf("step down %s: %d %s", stream, resp.Error.ErrCode, resp.Error.Description)
		}
		return fmt.Errorf("step down %s: %s", stream, m.Data)
	}
	return nil
}

// faultProxy is a TCP proxy in front of a NATS server that drops every connection
// now and then, in two ways: a plain cut (both sides closed at once, whatever is in
// flight either way is lost), and a lost acknowledgement: the proxy waits for a
// client's next write to the lease bucket (a lease key or run record, "PUB $KV."),
// forwards it, swallows everything the server sends that client from then on, and
// closes both sides a little later. The server applied a write whose answer never
// arrived.
type faultProxy struct {
	ln     net.Listener
	target string

	mu    sync.Mutex
	pairs map[*faultPair]struct{}

	wg                 sync.WaitGroup
	heal, closed       chan struct{} // stop dropping; stop everything
	healOnce, closeOne sync.Once

	drops, lostAckDrops, cut atomic.Int64
	// lostWrites counts lease-bucket writes forwarded to the server whose answers
	// the proxy swallowed; swallowedReplies counts replies (MSG/HMSG to an _INBOX)
	// it swallowed in all; requestsInWindow counts publishes it forwarded to the
	// server while the answers were being swallowed.
	lostWrites, swallowedReplies, requestsInWindow atomic.Int64
}

type faultPair struct {
	client, server net.Conn
	// armed: mute the replies right after forwarding the next lease-bucket write.
	armed     atomic.Bool
	mute      atomic.Bool // drop server → client
	closeOnce sync.Once
}

func (p *faultPair) close() {
	p.closeOnce.Do(func() {
		_ = p.client.Close()
		_ = p.server.Close()
	})
}

// startFaultProxy listens on 127.0.0.1:0 and forwards to target (host:port).
func startFaultProxy(t *testing.T, target string) *faultProxy {
	t.Helper()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	require.NoError(t, err)
	p := &faultProxy{ln: ln, target: target, pairs: map[*faultPair]struct{}{}, heal: make(chan struct{}), closed: make(chan struct{})}
	p.wg.Go(p.accept)
	t.Cleanup(p.Close)
	return p
}

func (p *faultProxy) URL() string { return "nats://" + p.ln.Addr().String() }

func (p *faultProxy) accept() {
	for {
		c, err := p.ln.Accept()
		if err != nil {
			return
		}
		s, err := net.DialTimeout("tcp", p.target, 2*time.Second)
		if err != nil {
			_ = c.Close()
			continue
		}
		pair := &faultPair{client: c, server: s}
		p.mu.Lock()
		select {
		case <-p.closed:
			p.mu.Unlock()
			pair.close()
			return
		default:
		}
		p.pairs[pair] = struct{}{}
		p.mu.Unlock()
		p.wg.Go(func() { p.pump(pair, pair.client, pair.server, false) })
		p.wg.Go(func() { p.pump(pair, pair.server, pair.client, true) })
	}
}

var (
	faultKVWrite = []byte("PUB $KV.") // PUB or HPUB to a KV bucket's subject
	faultReply   = []byte("MSG _INBOX.")
)

// pump copies from src to dst until either side fails, then closes the pair.
// fromServer: the server → client direction, which a lost-ack drop mutes.
func (p *faultProxy) pump(pair *faultPair, src, dst net.Conn, fromServer bool) {
	defer func() {
		pair.close()
		p.mu.Lock()
		delete(p.pairs, pair)
		p.mu.Unlock()
	}()
	buf := make([]byte, 32<<10)
	for {
		n, err := src.Read(buf)
		if n > 0 {
			chunk := buf[:n]
			switch {
			case fromServer && pair.mute.Load():
				p.swallowedReplies.Add(int64(bytes.Count(chunk, faultReply)))
				chunk = nil
			case !fromServer && pair.mute.Load():
				p.requestsInWindow.Add(int64(bytes.Count(chunk, []byte("PUB "))))
				p.lostWrites.Add(int64(bytes.Count(chunk, faultKVWrite)))
			case !fromServer && bytes.Contains(chunk, faultKVWrite) && pair.armed.CompareAndSwap(true, false):
				// Mute before the write reaches the server, so its answer cannot
				// slip through.
				pair.mute.Store(true)
				p.requestsInWindow.Add(int64(bytes.Count(chunk, []byte("PUB "))))
				p.lostWrites.Add(int64(bytes.Count(chunk, faultKVWrite)))
			}
			if len(chunk) > 0 {
				if _, werr := dst.Write(chunk); werr != nil {
					return
				}
			}
		}
		if err != nil {
			return // EOF or closed: the pair is closing
		}
	}
}

// dropEvery drops all connections at random intervals in [lo, hi] until Heal or
// Close. Half the drops are lost-ack drops; when slot > 0, half of those are armed
// just before a multiple of slot, so that they catch that slot's claim writes.
func (p *faultProxy) dropEvery(lo, hi, slot time.Duration) {
	p.wg.Go(func() {
		for {
			wait := lo + rand.N(hi-lo+1)
			lostAck := rand.N(2) == 0
			if lostAck && slot > 0 && rand.N(2) == 0 {
				edge := time.Now().Add(wait).Truncate(slot).Add(slot)
				wait = time.Until(edge.Add(-5 * time.Millisecond))
			}
			t := time.NewTimer(wait)
			select {
			case <-p.heal:
				t.Stop()
				return
			case <-t.C:
			}
			p.drop(lostAck)
		}
	})
}

// drop closes every connection. A lost-ack drop first arms every connection, waits
// up to 300 ms for lease-bucket writes (each armed connection goes deaf to the
// server right after its next one), then mutes all replies for 30 ms before closing.
func (p *faultProxy) drop(lostAck bool) {
	pairs := p.snapshot()
	if lostAck {
		for _, pair := range pairs {
			pair.armed.Store(true)
		}
		deadline := time.Now().Add(300 * time.Millisecond)
		for time.Now().Before(deadline) && !p.anyMuted(pairs) {
			select {
			case <-time.After(2 * time.Millisecond):
			case <-p.heal:
				deadline = time.Time{}
			}
		}
		// Give the other clients' writes of the same moment a chance to be caught too.
		select {
		case <-time.After(10*time.Millisecond + rand.N(40*time.Millisecond)):
		case <-p.heal:
		}
		for _, pair := range pairs {
			pair.mute.Store(true)
		}
		select {
		case <-time.After(30 * time.Millisecond):
		case <-p.heal:
		}
		p.lostAckDrops.Add(1)
	}
	for _, pair := range pairs {
		pair.close()
	}
	p.drops.Add(1)
	p.cut.Add(int64(len(pairs)))
}

func (p *faultProxy) snapshot() []*faultPair {
	p.mu.Lock()
	defer p.mu.Unlock()
	pairs := make([]*faultPair, 0, len(p.pairs))
	for pair := range p.pairs {
		pairs = append(pairs, pair)
	}
	return pairs
}

func (p *faultProxy) anyMuted(pairs []*faultPair) bool {
	for _, pair := range pairs {
		if pair.mute.Load() {
			return true
		}
	}
	return false
}

// Heal stops dropping connections; the proxy keeps forwarding.
func (p *faultProxy) Heal() {
	p.healOnce.Do(func() { close(p.heal) })
}

// Close stops the proxy: no more connections, every pair closed, every goroutine
// returned.
func (p *faultProxy) Close() {
	p.Heal()
	p.closeOne.Do(func() { close(p.closed) })
	_ = p.ln.Close()
	for _, pair := range p.snapshot() {
		pair.close()
	}
	p.wg.Wait()
}

// faultWaitResolved polls until every slot in due is resolved (ran, or reported late
// or skipped), or the deadline passes; it returns how many were still open.
func faultWaitResolved(t *testing.T, rec *faultRecorder, due []faultKey, within time.Duration) int {
	t.Helper()
	deadline := time.Now().Add(within)
	for {
		open := 0
		for _, k := range due {
			if !rec.resolved(k) {
				open++
			}
		}
		if open == 0 || time.Now().After(deadline) {
			return open
		}
		select {
		case <-time.After(100 * time.Millisecond):
		case <-t.Context().Done():
			return open
		}
	}
}

// faultSleepToSlot waits at least minWait, then until offset past the next multiple
// of interval: a fault injected there hits the claims of that slot in flight.
func faultSleepToSlot(t *testing.T, interval, minWait, offset time.Duration) {
	at := time.Now().Add(minWait).Truncate(interval).Add(interval + offset)
	sleepCtx(t, time.Until(at))
}

// faultOffsets formats slot keys as offsets from t0.
func faultOffsets(keys []faultKey, t0 time.Time) string {
	var parts []string
	for _, k := range keys {
		parts = append(parts, fmt.Sprintf("%s(%+.1fs)", k.job, time.UnixMilli(k.slot).Sub(t0).Seconds()))
	}
	return strings.Join(parts, " ")
}

// classifyTakeovers sorts takeovers into those that overlapped a live previous
// attempt, those that re-ran a slot whose handler had returned ok, and those of an
// attempt whose claimer never got its answer.
func classifyTakeovers(takeovers []faultTakeover) (overlaps, rerunOK, phantom []faultTakeover) {
	for _, to := range takeovers {
		switch {
		case to.noPrev:
			phantom = append(phantom, to)
		case to.overlap > 0:
			overlaps = append(overlaps, to)
		case to.prevOK:
			rerunOK = append(rerunOK, to)
		}
	}
	return overlaps, rerunOK, phantom
}

// faultDue lists the slots of every job due in [from, to].
func faultDue(jobs []string, interval time.Duration, from, to time.Time) []faultKey {
	var due []faultKey
	for _, j := range jobs {
		due = append(due, faultSlots(j, interval, from, to)...)
	}
	return due
}

// faultSettle waits for every due slot to come to an end (a claim is retried until
// deadline + lease), stops the instances and reads the jobs' history. It returns
// the slots still open when it gave up waiting, how long Stop took, and the history.
func faultSettle(t *testing.T, rec *faultRecorder, ins []*faultInstance, jobs []string, due []faultKey) (int, time.Duration, map[faultKey]scheduler.Status) {
	open := faultWaitResolved(t, rec, due, 10*time.Second)
	stopTook := faultStopAll(t, ins)
	return open, stopTook, faultHistory(t, ins[0].sched, jobs)
}
