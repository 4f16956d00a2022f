package integration

import (
	"fmt"
	"math/rand/v2"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/anarchon/anarchon/scheduler"
)

// Three instances run five jobs every second on a 3-node cluster (R3 job streams, R3
// lease bucket), each on its own connection to all nodes, with the scheduler's
// default call timeout. For about 30 s the leaders of those streams are stepped down,
// and the nodes leading them are stopped and restarted, in turn; each fault is
// injected a few milliseconds after a slot starts, while that slot's claims are in
// flight.
//
// Invariants: no (slot, attempt) runs twice and no attempt has two winners; a
// takeover (attempt > 1) starts only once the attempt before it has stopped (its
// handler returned or its context was cancelled), and never re-runs a slot whose
// handler already returned ok; and every slot due during the churn either ran or was
// reported late or skipped (an event of some instance, or a record in history) —
// none is silently dropped.
func TestLeaderLoss(t *testing.T) {
	c := faultCluster(t)
	urls := strings.Join(c.ClientURLs(), ",")
	rec := newFaultRecorder()
	const interval, lease = time.Second, 2 * time.Second
	jobs := []string{"ll-0", "ll-1", "ll-2", "ll-3", "ll-4"}
	streams := []string{faultBucketStream}
	for _, j := range jobs {
		streams = append(streams, faultJobStream(j))
	}

	var ins []*faultInstance
	for i := range 3 {
		name := fmt.Sprintf("ll-%c", 'a'+i)
		in := newFaultInstance(t, faultDial(t, name, urls), name, 3, rec, 0)
		for _, j := range jobs {
			// ll-4 runs longer than its lease, so it heartbeats through the failovers;
			// the others are short.
			h := rec.handler(50*time.Millisecond, 400*time.Millisecond)
			if j == "ll-4" {
				h = rec.handler(2500*time.Millisecond, 3500*time.Millisecond)
			}
			require.NoError(t, in.sched.Every(j, interval, h, scheduler.WithLease(lease)))
		}
		ins = append(ins, in)
	}
	faultStartAll(t, ins)
	admin := faultDial(t, "ll-admin", urls)
	leaders, err := faultWaitLeaders(t, c, streams, nil, 15*time.Second)
	require.NoError(t, err)

	// The churn: step-downs and node kills in turn, each followed by a wait until
	// every stream has a leader again.
	started := time.Now()
	var changes, stepdowns, kills int
	var failures, journal []string
	note := func(format string, args ...any) {
		journal = append(journal, time.Now().Format("15:04:05.000 ")+fmt.Sprintf(format, args...))
	}
	settle := func(before map[string]int, avoid map[string]int) map[string]int {
		after, err := faultWaitLeaders(t, c, streams, avoid, 20*time.Second)
		if err != nil {
			failures = append(failures, err.Error())
		}
		var moved []string
		for _, st := range streams {
			if after[st] >= 0 && after[st] != before[st] {
				changes++
				moved = append(moved, fmt.Sprintf("%s %d→%d", st, before[st], after[st]))
			}
		}
		note("leaders settled: %s", strings.Join(moved, ", "))
		return after
	}
	stepDown := func(targets []string) {
		avoid := map[string]int{}
		for _, st := range targets {
			if err := faultStepDown(admin, st); err != nil {
				failures = append(failures, err.Error())
				continue
			}
			stepdowns++
			avoid[st] = leaders[st]
		}
		note("stepped down %d streams", len(avoid))
		leaders = settle(leaders, avoid)
	}
	kill := func(node int) {
		require.NoError(t, c.StopNode(node))
		kills++
		note("stopped node %d", node)
		avoid := map[string]int{}
		for st, l := range leaders {
			if l == node {
				avoid[st] = node
			}
		}
		leaders = settle(leaders, avoid)
		sleepCtx(t, 2*time.Second) // the cluster runs on two nodes for a while
		require.NoError(t, c.RestartNode(ctxT(t, 45*time.Second), node), "restart node %d", node)
		note("restarted node %d", node)
		leaders = settle(leaders, nil)
	}
	busiest := func() int { // the node leading the most job streams
		n := map[int]int{}
		for _, st := range streams[1:] {
			n[leaders[st]]++
		}
		best := 0
		for i := range 3 {
			if n[i] > n[best] {
				best = i
			}
		}
		return best
	}
	actions := []func(){
		func() { stepDown([]string{faultBucketStream}) },
		func() { stepDown(streams[1:]) },
		func() { kill(leaders[faultBucketStream]) },
		func() { stepDown(streams) },
		func() { kill(busiest()) },
	}
	churn := soak(t, 27*time.Second)
	for i := 0; time.Since(started) < churn && t.Context().Err() == nil; i++ {
		// Right after a slot starts, while its claims are in flight.
		faultSleepToSlot(t, interval, time.Second, rand.N(30*time.Millisecond))
		actions[i%len(actions)]()
	}
	churnEnd := time.Now()

	// Every slot due during the churn must come to an end: wait for it (a claim
	// is retried until deadline + lease), then stop.
	due := faultDue(jobs, interval, started, churnEnd)
	open, stopTook, history := faultSettle(t, rec, ins, jobs, due)

	acc := rec.account(due, history)
	dups := rec.duplicates()
	winners := rec.multipleWinners()
	takeovers := rec.takeoversSeen(time.Now())
	overlaps, rerunOK, phantom := classifyTakeovers(takeovers)
	errs, samples := rec.errors()

	t.Logf("leader loss: %v of churn: %d leader changes induced (%d step-downs, %d node kills); %d open slots when stopping",
		churnEnd.Sub(started).Round(time.Millisecond), changes, stepdowns, kills, open)
	t.Logf("leader loss: slots %v; %d handler runs; %d duplicates; %d multiple winners", acc, rec.runsOf(due), len(dups), len(winners))
	t.Logf("leader loss: %d takeovers: %d after the previous handler stopped, %d of an attempt whose claimer never got its answer, %d overlapping a live previous attempt, %d re-running a slot whose handler had returned ok",
		len(takeovers), len(takeovers)-len(phantom)-len(overlaps)-len(rerunOK), len(phantom), len(overlaps), len(rerunOK))
	t.Logf("leader loss: missed slots: %s", faultOffsets(acc.missed, started))
	for _, to := range takeovers {
		t.Logf("leader loss: takeover %v", to)
		if to.overlap > 0 {
			t.Logf("leader loss: %s", rec.describe(to.key))
		}
	}
	t.Logf("leader loss: backend errors by op %v; lease losses %d; stop took %v", errs, rec.leaseLost, stopTook.Round(time.Millisecond))
	for op, s := range samples {
		t.Logf("leader loss: %s error e.g. %s", op, strings.Join(s, " | "))
	}
	for _, f := range failures {
		t.Logf("leader loss: fault injection: %s", f)
	}
	t.Logf("leader loss: journal (started %s):\n\t%s", started.Format("15:04:05.000"), strings.Join(journal, "\n\t"))

	assert.Positive(t, changes, "the test induced leader changes")
	assert.Empty(t, dups, "no (slot, attempt) runs twice")
	assert.Empty(t, winners, "exactly one winner per (slot, attempt)")
	assert.Empty(t, overlaps, "a takeover starts only after the previous attempt stopped")
	assert.Empty(t, rerunOK, "a slot whose handler returned ok is not run again (its Finish must not be lost while the store is reachable)")
	for _, k := range acc.dropped {
		assert.Failf(t, "slot silently dropped", "%s", rec.describe(k))
	}
	assert.Greater(t, acc.ran, acc.due/2, "most slots ran: %v", acc)
}
