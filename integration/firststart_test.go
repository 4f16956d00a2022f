package integration

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/nats-io/nats.go"
	natsjs "github.com/nats-io/nats.go/jetstream"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/anarchon/anarchon/embedded"
	"github.com/anarchon/anarchon/internal/natstest"
	"github.com/anarchon/anarchon/jetstream"
	"github.com/anarchon/anarchon/kvlease"
	"github.com/anarchon/anarchon/scheduler"
)

// A fleet's first start: N instances, each on its own connection, start at the same
// instant against a 3-node cluster that has just come up, with R3 job streams and an
// R3 lease bucket. Every one of them must start, and then every slot of an
// every-second job must run exactly once.
//
// Half of the instances initialize the lease store before Start, as
// examples/service does; the other half leave it to the first claim, so that the
// bucket is also set up from inside the claim path while the others set it up.
func TestFirstStartFreshCluster(t *testing.T) {
	for _, n := range []int{3, 10} {
		t.Run(fmt.Sprintf("instances=%d", n), func(t *testing.T) {
			c := faultCluster(t)
			f := newFirstStartFleet(t, c, "fs", n)
			f.startAtOnce(t)
			f.checkEverySlotOnce(t)
		})
	}
}

// The lease bucket exists (an earlier deploy made it) but the jobs' streams do not
// (the jobs are new): N instances start at once and all create the streams.
func TestFirstStartBucketExistsStreamsDoNot(t *testing.T) {
	for _, n := range []int{3, 10} {
		t.Run(fmt.Sprintf("instances=%d", n), func(t *testing.T) {
			c := faultCluster(t)
			nc := faultDial(t, "fs-setup", strings.Join(c.ClientURLs(), ","))
			store, err := kvlease.New(natstest.JetStream(t, nc), kvlease.WithReplicas(3))
			require.NoError(t, err)
			require.NoError(t, store.Init(ctxT(t, 30*time.Second)), "create the bucket beforehand")
			store.Close()

			f := newFirstStartFleet(t, c, "fsb", n)
			f.startAtOnce(t)
			f.checkEverySlotOnce(t)
		})
	}
}

// The fleet starts while the cluster has no meta leader: the node leading the meta
// group stops the instant before, so the first requests get no answer (or 10008)
// until the two others elect a new one. Each instance's start has 30s, more than
// an election takes. Every instance initializes its lease store first, as
// examples/service does: the store asks again until the new leader answers. (A
// Start without it fails here: the JetStream backend's Init sends its one account
// information request without retrying, see jetstream/backend.go.)
func TestFirstStartWhileMetaLeaderIsElected(t *testing.T) {
	c := faultCluster(t)
	f := newFirstStartFleet(t, c, "fsm", 3)
	for _, in := range f.ins {
		in.preInit = true
	}
	leader, err := c.Leader()
	require.NoError(t, err)
	require.NoError(t, c.StopNode(leader))
	f.startAtOnceWithin(t, 30*time.Second)
	f.checkEverySlotOnce(t)
}

// firstStartJobs are the jobs every instance of a first-start test declares.
var firstStartJobs = []string{"fs-tick", "fs-report"}

// firstStartFleet is the instances of a first-start test and what they saw.
type firstStartFleet struct {
	ins    []*firstStartInstance
	log    *ledger
	tally  *apiTally
	mu     sync.Mutex
	errors []string // backend error events
}

type firstStartInstance struct {
	name    string
	store   *kvlease.Store
	sched   *scheduler.Scheduler
	preInit bool // initialize the store before Start
}

// newFirstStartFleet builds n instances on c, each on its own connection to all
// nodes. Nothing talks to JetStream yet.
func newFirstStartFleet(t *testing.T, c *embedded.Cluster, prefix string, n int) *firstStartFleet {
	t.Helper()
	f := &firstStartFleet{log: newLedger(), tally: newAPITally()}
	urls := strings.Join(c.ClientURLs(), ",")
	for i := range n {
		name := fmt.Sprintf("%s-%d", prefix, i)
		j := f.tally.wrap(natstest.JetStream(t, faultDial(t, name, urls)))
		store, err := kvlease.New(j, kvlease.WithReplicas(3))
		require.NoError(t, err)
		t.Cleanup(store.Close)
		b, err := jetstream.NewLeased(j, store, jetstream.WithReplicas(3))
		require.NoError(t, err)
		s, err := scheduler.New(scheduler.Config{Backend: b, Instance: name, OnEvent: f.onEvent})
		require.NoError(t, err)
		t.Cleanup(func() { _ = s.Stop(context.Background()) })
		for _, job := range firstStartJobs {
			require.NoError(t, s.Every(job, time.Second, f.log.handler))
		}
		f.ins = append(f.ins, &firstStartInstance{name: name, store: store, sched: s, preInit: i%2 == 0})
	}
	return f
}

func (f *firstStartFleet) onEvent(e scheduler.Event) {
	if e.Kind != scheduler.EventBackendError {
		return
	}
	f.mu.Lock()
	defer f.mu.Unlock()
	f.errors = append(f.errors, fmt.Sprintf("%s %s %s: %v", e.Instance, e.Op, e.Job, e.Err))
}

// startAtOnce releases every instance's start at the same instant and requires all
// of them to succeed. Each start has the default timeouts per call (the store's,
// the scheduler's), as a user's Start without a deadline has.
func (f *firstStartFleet) startAtOnce(t *testing.T) {
	t.Helper()
	f.startAtOnceWithin(t, 0)
}

// startAtOnceWithin is startAtOnce with a deadline for each instance's start (0:
// none, the default timeouts per call).
func (f *firstStartFleet) startAtOnceWithin(t *testing.T, within time.Duration) {
	t.Helper()
	ctx := t.Context()
	if within > 0 {
		ctx = ctxT(t, within)
	}
	gate := make(chan struct{})
	took := make([]time.Duration, len(f.ins))
	errs := make([]error, len(f.ins))
	var wg sync.WaitGroup
	for i, in := range f.ins {
		wg.Go(func() {
			<-gate
			t0 := time.Now()
			if in.preInit {
				if err := in.store.Init(ctx); err != nil {
					errs[i] = fmt.Errorf("lease bucket: %w", err)
					return
				}
			}
			errs[i] = in.sched.Start(ctx)
			took[i] = time.Since(t0)
		})
	}
	t0 := time.Now()
	close(gate)
	wg.Wait()
	all := time.Since(t0)
	for i, err := range errs {
		assert.NoError(t, err, "start %s", f.ins[i].name)
	}
	require.False(t, t.Failed(), "every instance must start; setup requests: %s", f.tally)
	sorted := slices.Clone(took)
	slices.Sort(sorted)
	t.Logf("%d instances started in %v (each: min %v, median %v, max %v); setup requests: %s",
		len(f.ins), all.Round(time.Millisecond), sorted[0].Round(time.Millisecond),
		sorted[len(sorted)/2].Round(time.Millisecond), sorted[len(sorted)-1].Round(time.Millisecond), f.tally)
}

// checkEverySlotOnce waits until the jobs have run the slots of the next few
// seconds, stops the fleet and checks that each of those slots ran exactly once.
func (f *firstStartFleet) checkEverySlotOnce(t *testing.T) {
	t.Helper()
	sched, err := scheduler.NewIntervalSchedule(time.Second)
	require.NoError(t, err)
	from := sched.Next(time.Now()) // the first slot due after every instance started
	to := from.Add(3 * time.Second)
	deadline := time.Now().Add(30 * time.Second)
	ran := func() bool {
		for _, job := range firstStartJobs {
			if f.log.count(job, time.Second, to, to).ran == 0 {
				return false
			}
		}
		return true
	}
	for !ran() && time.Now().Before(deadline) {
		sleepCtx(t, 20*time.Millisecond)
	}
	// Backend errors until now: stopping cancels the backups' watches, which report
	// their cancellation as errors.
	f.mu.Lock()
	errs := slices.Clone(f.errors)
	f.mu.Unlock()
	if !assert.True(t, ran(), "the jobs ran slot %s in time", to.UTC().Format(time.TimeOnly)) {
		for _, job := range firstStartJobs {
			t.Logf("job %s: %s", job, f.log.count(job, time.Second, from, to))
		}
		t.Logf("backend errors: %d, first: %q", len(errs), errs[:min(len(errs), 5)])
	}
	// Stop within a deadline even when the check failed, so that a stuck instance
	// shows as a failed stop rather than a hung test.
	var wg sync.WaitGroup
	for _, in := range f.ins {
		wg.Go(func() { assert.NoError(t, in.sched.Stop(ctxT(t, 10*time.Second)), "stop %s", in.name) })
	}
	wg.Wait()
	for _, job := range firstStartJobs {
		c := f.log.count(job, time.Second, from, to)
		assert.Equal(t, 4, c.slots, "job %s", job)
		assert.Equal(t, c.slots, c.ran, "job %s: every slot runs: %s", job, c)
		assert.Zero(t, c.dups, "job %s: no slot runs twice: %s", job, c)
		assert.Empty(t, f.log.duplicates(job), "job %s", job)
	}
	assert.Empty(t, errs, "backend errors while the fleet ran")
}

// apiTally counts the JetStream requests that set streams up, by operation and
// answer, across all instances of a test: how many were retried shows in the
// timeouts, 10008s and name-in-use answers.
type apiTally struct {
	mu sync.Mutex
	n  map[string]int
}

func newAPITally() *apiTally { return &apiTally{n: map[string]int{}} }

func (a *apiTally) wrap(j natsjs.JetStream) natsjs.JetStream { return &tallyJS{JetStream: j, tally: a} }

func (a *apiTally) add(op string, err error) {
	a.mu.Lock()
	defer a.mu.Unlock()
	a.n[op+" "+answer(err)]++
}

func (a *apiTally) String() string {
	a.mu.Lock()
	defer a.mu.Unlock()
	keys := make([]string, 0, len(a.n))
	for k := range a.n {
		keys = append(keys, k)
	}
	slices.Sort(keys)
	var b strings.Builder
	for i, k := range keys {
		if i > 0 {
			b.WriteString(", ")
		}
		fmt.Fprintf(&b, "%s=%d", k, a.n[k])
	}
	return b.String()
}

// answer classifies a request's outcome.
func answer(err error) string {
	var apiErr *natsjs.APIError
	switch {
	case err == nil:
		return "ok"
	case errors.Is(err, natsjs.ErrStreamNotFound):
		return "not-found"
	case errors.Is(err, natsjs.ErrStreamNameAlreadyInUse):
		return "name-in-use"
	case errors.Is(err, context.DeadlineExceeded), errors.Is(err, nats.ErrTimeout):
		return "timeout"
	case errors.Is(err, context.Canceled):
		return "canceled"
	case errors.Is(err, nats.ErrNoResponders):
		return "no-responders"
	case errors.As(err, &apiErr):
		return fmt.Sprintf("err-%d", apiErr.ErrorCode)
	default:
		return "other"
	}
}

// tallyJS counts the stream set-up requests made through it.
type tallyJS struct {
	natsjs.JetStream
	tally *apiTally
}

func (j *tallyJS) AccountInfo(ctx context.Context) (*natsjs.AccountInfo, error) {
	ai, err := j.JetStream.AccountInfo(ctx)
	j.tally.add("account-info", err)
	return ai, err
}

func (j *tallyJS) Stream(ctx context.Context, name string) (natsjs.Stream, error) {
	s, err := j.JetStream.Stream(ctx, name)
	j.tally.add("info", err)
	return s, err
}

func (j *tallyJS) CreateStream(ctx context.Context, cfg natsjs.StreamConfig) (natsjs.Stream, error) {
	s, err := j.JetStream.CreateStream(ctx, cfg)
	j.tally.add("create", err)
	return s, err
}

func (j *tallyJS) UpdateStream(ctx context.Context, cfg natsjs.StreamConfig) (natsjs.Stream, error) {
	s, err := j.JetStream.UpdateStream(ctx, cfg)
	j.tally.add("update", err)
	return s, err
}

func (j *tallyJS) CreateOrUpdateStream(ctx context.Context, cfg natsjs.StreamConfig) (natsjs.Stream, error) {
	s, err := j.JetStream.CreateOrUpdateStream(ctx, cfg)
	j.tally.add("create-or-update", err)
	return s, err
}
