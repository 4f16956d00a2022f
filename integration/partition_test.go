package integration

import (
	"fmt"
	"strings"
	"testing"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/anarchon/anarchon/scheduler"
)

// Three instances on a 3-node cluster (R3 job streams, R3 lease bucket), each
// connected only to its own node. Instance C's node is stopped for about 8 s, which
// cuts C off, while three jobs run every second; then it is restarted.
//
// C is cut off while it runs a long handler, so a backup takes that run over.
//
// Invariants: A and B keep every slot running while C is cut off, except slots in
// the first partitionGrace after the cut (claims in flight through the stopped node);
// the backup starts C's run only after C's handler was told its lease was lost (its
// context cancelled); when C returns it does not run again what already ran: no slot
// has two attempt-1 runs, and C starts no slot that another instance had already
// finished.
func TestPartitionedReplica(t *testing.T) {
	c := faultCluster(t)
	urls := c.ClientURLs()
	rec := newFaultRecorder()
	const interval, lease = time.Second, 2 * time.Second
	const partitionGrace = 2 * time.Second
	jobs := []string{"pt-0", "pt-1", "pt-2"}
	const longJob = "pt-2"
	streams := []string{faultBucketStream}
	for _, j := range jobs {
		streams = append(streams, faultJobStream(j))
	}

	var ins []*faultInstance
	for i := range 3 {
		name := fmt.Sprintf("pt-%c", 'a'+i)
		// Its own node only: when that node stops, the instance is cut off.
		nc := faultDial(t, name, urls[i], nats.IgnoreDiscoveredServers())
		in := newFaultInstance(t, nc, name, 3, rec, 0)
		for _, j := range jobs {
			// pt-2 runs much longer than its lease (it heartbeats, and C is still in
			// it when its lease ends); the others are short.
			h := rec.handler(100*time.Millisecond, 600*time.Millisecond)
			if j == longJob {
				h = rec.handler(5*time.Second, 6*time.Second)
			}
			// Jitter spreads the claims, so that each instance wins its share.
			require.NoError(t, in.sched.Every(j, interval, h, scheduler.WithLease(lease), scheduler.WithJitter(300*time.Millisecond)))
		}
		ins = append(ins, in)
	}
	faultStartAll(t, ins)
	_, err := faultWaitLeaders(t, c, streams, nil, 15*time.Second)
	require.NoError(t, err)
	const cNode = 2
	cName := ins[cNode].name

	started := time.Now()
	// Cut C off while it runs a long handler (it holds that run's lease), after a
	// few seconds of normal running.
	sleepCtx(t, 3*time.Second)
	var held faultKey
	for deadline := time.Now().Add(15 * time.Second); held.job == "" && time.Now().Before(deadline); {
		held = rec.runningOn(cName, longJob, 200*time.Millisecond)
		if held.job == "" {
			sleepCtx(t, 20*time.Millisecond)
		}
	}
	require.NotEmpty(t, held.job, "C ran a slot of %s within 15 s", longJob)
	leadersBefore := faultLeaders(c, streams)
	require.NoError(t, c.StopNode(cNode))
	cut := time.Now()
	sleepCtx(t, 8*time.Second)
	back := time.Now()
	require.NoError(t, c.RestartNode(ctxT(t, 45*time.Second), cNode))
	restarted := time.Now()
	// C reconnects by itself; wait for it, then let it run with the others.
	deadline := time.Now().Add(15 * time.Second)
	for !ins[cNode].nc.IsConnected() && time.Now().Before(deadline) {
		sleepCtx(t, 50*time.Millisecond)
	}
	require.True(t, ins[cNode].nc.IsConnected(), "C reconnected to its node")
	reconnected := time.Now()
	sleepCtx(t, 5*time.Second)
	ended := time.Now()

	due := faultDue(jobs, interval, started, ended)
	during := faultDue(jobs, interval, cut, back)
	open, stopTook, history := faultSettle(t, rec, ins, jobs, due)

	acc := rec.account(due, history)
	accDuring := rec.account(during, history)
	var missedAfterGrace []faultKey
	for _, k := range accDuring.missed {
		if time.UnixMilli(k.slot).Sub(cut) >= partitionGrace {
			missedAfterGrace = append(missedAfterGrace, k)
		}
	}
	dups := rec.duplicates()
	// C must not start a slot that another instance had already finished.
	var cReruns []string
	for _, k := range due {
		xs := rec.execsOf(k)
		for _, x := range xs {
			if x.run.Instance != cName {
				continue
			}
			for _, p := range xs {
				if p.run.Instance != cName && !p.end.IsZero() && p.cancelled.IsZero() && p.end.Before(x.start) {
					cReruns = append(cReruns, fmt.Sprintf("%s attempt %d on %s, %v after %s finished attempt %d",
						k, x.run.Attempt, cName, x.start.Sub(p.end).Round(time.Millisecond), p.run.Instance, p.run.Attempt))
				}
			}
		}
	}
	takeovers := rec.takeoversSeen(time.Now())
	var overlaps, rerunOK []faultTakeover
	for _, to := range takeovers {
		switch {
		case to.overlap > 0 && !to.noPrev:
			overlaps = append(overlaps, to)
		case to.prevOK:
			rerunOK = append(rerunOK, to)
		}
	}
	errs, samples := rec.errors()

	t.Logf("partition: %s (node %d) cut off for %v (restart took %v more, reconnected %v after the restart); leaders before the cut %v; %d open slots when stopping",
		cName, cNode, back.Sub(cut).Round(time.Millisecond), restarted.Sub(back).Round(time.Millisecond),
		reconnected.Sub(restarted).Round(time.Millisecond), leadersBefore, open)
	t.Logf("partition: during the partition %v; missed: %s; missed after the first %v: %d",
		accDuring, faultOffsets(accDuring.missed, cut), partitionGrace, len(missedAfterGrace))
	t.Logf("partition: whole run %v; %d duplicates; %d runs of C re-running a finished slot", acc, len(dups), len(cReruns))
	t.Logf("partition: runs by instance before the cut %v, during %v, after C returned %v",
		rec.runsBy(started, cut), rec.runsBy(cut, back), rec.runsBy(back, ended))
	t.Logf("partition: C was cut off while running %s; %d takeovers: %d overlapping a live previous attempt, %d re-running a slot C had finished but could not report",
		held, len(takeovers), len(overlaps), len(rerunOK))
	for _, to := range takeovers {
		t.Logf("partition: takeover %v", to)
	}
	t.Logf("partition: backend errors by op %v; lease losses %d; stop took %v", errs, rec.leaseLost, stopTook.Round(time.Millisecond))
	for op, s := range samples {
		t.Logf("partition: %s error e.g. %s", op, strings.Join(s, " | "))
	}

	assert.Empty(t, dups, "no (slot, attempt) runs twice")
	assert.Empty(t, rec.multipleWinners(), "exactly one winner per (slot, attempt)")
	assert.Empty(t, cReruns, "C, back, does not run a slot that already finished")
	assert.Empty(t, overlaps, "a backup takes over only after the cut-off holder's handler was told its lease is lost")
	for _, k := range missedAfterGrace {
		assert.Failf(t, "A and B missed a slot while C was cut off", "%s (%+.1fs after the cut)", rec.describe(k), time.UnixMilli(k.slot).Sub(cut).Seconds())
	}
	for _, k := range acc.dropped {
		assert.Failf(t, "slot silently dropped", "%s", rec.describe(k))
	}
	assert.Positive(t, rec.runsBy(cut, back)[ins[0].name]+rec.runsBy(cut, back)[ins[1].name], "A and B ran slots during the partition")
}
