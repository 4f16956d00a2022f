package integration

import (
	"fmt"
	"strings"
	"testing"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/anarchon/anarchon/embedded"
	"github.com/anarchon/anarchon/internal/natstest"
	"github.com/anarchon/anarchon/scheduler"
)

// Three instances reach the server through a TCP proxy that drops every connection
// every 300–700 ms: half the time a plain cut, half the time a lost acknowledgement —
// the proxy lets an instance's next write to the lease bucket (a lease key or run
// record, during a claim, a heartbeat or a finish) reach the server, swallows the
// answer and then cuts the connection. Half of those are armed just before a slot
// starts, to catch its claims. Two jobs run every second on leases for about 15 s.
//
// Invariants: exactly one winner per (slot, attempt) and no handler runs twice for
// one attempt — a claim retried after a lost answer, with the same token, never
// makes a second winner; every won claim starts exactly one handler; and no takeover
// starts while the attempt before it still runs.
func TestLostAcks(t *testing.T) {
	srv := natstest.Server(t, embedded.Options{Listen: "127.0.0.1:0"})
	proxy := startFaultProxy(t, strings.TrimPrefix(srv.ClientURL(), "nats://"))
	rec := newFaultRecorder()
	const interval, lease = time.Second, 2 * time.Second
	// A call whose answer was lost waits for its whole timeout: nats.go does not fail
	// requests in flight when it reconnects, and kvlease sends each request once.
	// With the default (10 s) the retry of a claim would come long after the slot's
	// deadline; 400 ms makes the retry, with the same token, happen while the first
	// try's lease key is live, which is the path under test.
	const callTimeout = 400 * time.Millisecond
	jobs := []string{"ack-0", "ack-1"}

	var ins []*faultInstance
	for i := range 3 {
		name := fmt.Sprintf("ack-%c", 'a'+i)
		// Only the proxy's address: the instances must not find the server's own.
		nc := faultDial(t, name, proxy.URL(), nats.IgnoreDiscoveredServers())
		in := newFaultInstance(t, nc, name, 1, rec, callTimeout)
		for _, j := range jobs {
			require.NoError(t, in.sched.Every(j, interval, rec.handler(50*time.Millisecond, 800*time.Millisecond), scheduler.WithLease(lease)))
		}
		ins = append(ins, in)
	}
	faultStartAll(t, ins)

	started := time.Now()
	proxy.dropEvery(300*time.Millisecond, 700*time.Millisecond, interval)
	sleepCtx(t, 15*time.Second)
	proxy.Heal()
	healed := time.Now()

	due := faultDue(jobs, interval, started, healed)
	open, stopTook, history := faultSettle(t, rec, ins, jobs, due)

	acc := rec.account(due, history)
	dups := rec.duplicates()
	winners := rec.multipleWinners()
	takeovers := rec.takeoversSeen(time.Now())
	overlaps, rerunOK, phantom := classifyTakeovers(takeovers)
	// Every handler start was a won claim, and every won claim one handler start.
	var unmatched []string
	for _, k := range due {
		byAttempt := map[int]int{}
		for _, x := range rec.execsOf(k) {
			byAttempt[x.run.Attempt]++
		}
		won := rec.wins(k)
		for a, n := range byAttempt {
			if won[a] != n {
				unmatched = append(unmatched, fmt.Sprintf("%s attempt %d: %d won claims (not counting wins released unrun), %d handler starts: %s", k, a, won[a], n, rec.describe(k)))
			}
		}
		for a, n := range won {
			if byAttempt[a] != n {
				unmatched = append(unmatched, fmt.Sprintf("%s attempt %d: %d won claims (not counting wins released unrun), %d handler starts: %s", k, a, n, byAttempt[a], rec.describe(k)))
			}
		}
	}
	errs, samples := rec.errors()

	t.Logf("lost acks: %v of drops: %d drops (%d with lost acknowledgements), %d connections cut; %d lease-bucket writes reached the server unacknowledged (%d requests in all), %d replies swallowed; %d open slots when stopping",
		healed.Sub(started).Round(time.Millisecond), proxy.drops.Load(), proxy.lostAckDrops.Load(), proxy.cut.Load(),
		proxy.lostWrites.Load(), proxy.requestsInWindow.Load(), proxy.swallowedReplies.Load(), open)
	rec.mu.Lock()
	wonAfterErr := rec.wonAfterErr
	rec.mu.Unlock()
	t.Logf("lost acks: slots %v; %d handler runs; %d duplicates; %d multiple winners; %d claim errors retried (EventBackendError op claim), %d slots won by a retry after a failed claim",
		acc, rec.runsOf(due), len(dups), len(winners), errs["claim"], wonAfterErr)
	t.Logf("lost acks: %d takeovers: %d after the previous handler stopped, %d of an attempt whose claimer never got its answer, %d overlapping a live previous attempt, %d re-running a slot whose handler had returned ok",
		len(takeovers), len(takeovers)-len(phantom)-len(overlaps)-len(rerunOK), len(phantom), len(overlaps), len(rerunOK))
	t.Logf("lost acks: missed slots: %s", faultOffsets(acc.missed, started))
	for _, to := range takeovers {
		t.Logf("lost acks: takeover %v", to)
	}
	t.Logf("lost acks: backend errors by op %v; lease losses %d; stop took %v", errs, rec.leaseLost, stopTook.Round(time.Millisecond))
	for op, s := range samples {
		t.Logf("lost acks: %s error e.g. %s", op, strings.Join(s, " | "))
	}
	for _, k := range acc.dropped {
		t.Logf("lost acks: dropped %s", rec.describe(k))
	}

	assert.Positive(t, proxy.lostWrites.Load(), "the proxy lost acknowledgements of lease writes")
	assert.Positive(t, errs["claim"], "claims failed and were retried")
	assert.Empty(t, dups, "no handler runs twice for one (slot, attempt)")
	assert.Empty(t, winners, "exactly one winner per (slot, attempt)")
	assert.Empty(t, unmatched, "every won claim started one handler")
	assert.Empty(t, overlaps, "a takeover starts only after the previous attempt stopped")
	assert.Positive(t, acc.ran, "slots ran: %v", acc)
}
