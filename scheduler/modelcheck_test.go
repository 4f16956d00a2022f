package scheduler_test

// A randomised model check of the lease path, beyond the cases the scenario tests
// name.
//
// Every seed builds a small world under testing/synctest (virtual time): 3–5
// scheduler instances sharing one memory.Backend and its memory.RunStore (a
// backend.Settler), each with its own clock offset and its own faulty view of the
// store. The plan crosses every policy (overlap, retries, run limits, pauses,
// catch-up, backfills, manual runs, schedule entries) with every fault: lost,
// late and unanswered calls, crashes, held heartbeats, frozen processes, store
// restarts, cut and reconnecting entry watches, skewed clocks, a rolling
// redeploy that changes the jobs' options, entries removed and added again, and
// absurd option values. A quiet phase follows in which every instance slot is
// up and healthy, and then every instance is stopped with a generous deadline.
// The harness, the faults, the record and the invariants are
// internal/modelcheck's (its package doc lists them), shared with integration's
// TestModelCheckKV and sqlbackend's TestModelCheckSQL; with virtual time and a
// store in memory the record knows exactly when the store applied each call
// (modelcheck.Exact).
//
// Seeds: ANARCHON_MODEL_SEEDS=N runs seeds 1..N (default 500, from
// ANARCHON_MODEL_SEED_FROM), ANARCHON_MODEL_SEED=K runs seed K alone and prints its
// whole trace on failure (ANARCHON_MODEL_TRACE=1 prints it always);
// ANARCHON_MODEL_SKIP=inv,… leaves invariants out.

import (
	"context"
	"fmt"
	"math/rand/v2"
	"os"
	"strconv"
	"strings"
	"sync/atomic"
	"testing"
	"testing/synctest"
	"time"

	"github.com/anarchon/anarchon/backend/memory"
	"github.com/anarchon/anarchon/internal/modelcheck"
	"github.com/anarchon/anarchon/scheduler"
)

const (
	mcDefaultSeeds = 500
	// mcFaultPhase is how long faults are injected after the instances start.
	mcFaultPhase = 20 * time.Second
	// mcQuietPhase follows: every instance slot is up, no fault is injected. It is
	// longer than a lease plus the longest scheduled handler, twice over.
	mcQuietPhase = 12 * time.Second
)

// mcWorld: virtual time, so the record knows when the store applied each call,
// and generous waits, which cost no real time.
var mcWorld = &modelcheck.World{
	Name:        "model check",
	Replay:      "ANARCHON_MODEL_SEED=%d go test -race -run TestModelCheck ./scheduler/",
	Timing:      modelcheck.Exact,
	HistoryKeep: 100000,
	FinalStop:   60 * time.Second, // long enough for every handler
	StopSlack:   time.Second,
	CancelSlack: 100 * time.Millisecond,
	Faults: modelcheck.Faults{
		LostMin: 50 * time.Millisecond, LostSpread: 1450 * time.Millisecond,
		SlowMax:   400 * time.Millisecond,
		CrashHang: 30 * time.Second,
	},
	ManualMin: 10 * time.Second, ManualSpread: 20 * time.Second,
	PauseSlack: 10 * time.Millisecond,
}

func TestModelCheck(t *testing.T) {
	seeds, err := modelcheck.SeedsFromEnv("ANARCHON_MODEL_", mcDefaultSeeds)
	if err != nil {
		t.Fatal(err)
	}
	sum := modelcheck.NewSummary(mcWorld, seeds)
	start := time.Now()
	t.Cleanup(func() { sum.Report(t, time.Since(start)) })
	for _, seed := range seeds.List {
		t.Run("seed="+strconv.FormatUint(seed, 10), func(t *testing.T) {
			t.Parallel()
			var current atomic.Pointer[modelcheck.Harness]
			watchdog := time.AfterFunc(mcWallLimit, func() { mcLivelock(seed, current.Load()) })
			defer watchdog.Stop()
			synctest.Test(t, func(t *testing.T) {
				b := memory.NewWithClock(scheduler.SystemClock{})
				// Every instance of the seed shares the one store.
				h := modelcheck.New(mcWorld, mcNewPlan(seed), func(string) (modelcheck.Store, error) { return b, nil })
				current.Store(h)
				if err := h.Run(); err != nil {
					t.Fatalf("seed %d: %v", seed, err)
				}
				sum.Seed(t, h, h.Check(context.Background(), b, b.Runs()))
			})
		})
	}
}

// mcWallLimit is how much real time one seed may take. A seed takes well under a
// second; one that takes this long has stopped virtual time: some goroutine runs
// without ever waiting (a busy loop), so the bubble never idles and its clock never
// advances.
const mcWallLimit = time.Minute

// mcLivelock reports a seed whose virtual time stopped, with the end of its trace,
// and ends the test binary (the bubble cannot be stopped from outside), so that the
// run fails at once with every goroutine's stack instead of at the test timeout.
func mcLivelock(seed uint64, h *modelcheck.Harness) {
	var b strings.Builder
	fmt.Fprintf(&b, "\nmodel check: seed %d made no progress in %v of real time: virtual time stopped, a goroutine spins without waiting (livelock)\n", seed, mcWallLimit)
	fmt.Fprintf(&b, "replay: "+mcWorld.Replay+"\n", seed)
	if h != nil {
		b.WriteString(h.Plan().String())
		lines := strings.Split(strings.TrimRight(h.Trace(), "\n"), "\n")
		if len(lines) > 80 {
			lines = append([]string{lines[0], "  … (earlier lines left out)"}, lines[len(lines)-79:]...)
		}
		b.WriteString(strings.Join(lines, "\n") + "\n")
	}
	fmt.Fprint(os.Stderr, b.String())
	panic(fmt.Sprintf("model check: seed %d livelocked (see above)", seed))
}

// ms is n milliseconds.
func ms(n int) time.Duration { return modelcheck.MS(n) }

// mcNewPlan draws seed's plan: 3–5 instances, 1–3 jobs, and what befalls them.
func mcNewPlan(seed uint64) *modelcheck.Plan {
	r := rand.New(rand.NewPCG(seed, seed^0x9e3779b97f4a7c15))
	p := &modelcheck.Plan{Seed: seed, Pre: ms(r.IntN(10000)), CallTimeout: time.Duration(1+r.IntN(3)) * time.Second, Slots: 3 + r.IntN(3),
		FaultPhase: mcFaultPhase, QuietPhase: mcQuietPhase}
	for i := range 1 + r.IntN(3) {
		iv := time.Duration(1+r.IntN(5)) * time.Second
		j := modelcheck.Job{
			Name:     fmt.Sprintf("job%d", i),
			Interval: iv,
			Lease:    ms(1000 + r.IntN(2001)),
			MaxLate:  ms(200 + r.IntN(int(iv/time.Millisecond)-199)),
			Skip:     r.IntN(3) == 0,
			Window:   ms(3000 + r.IntN(12000)),
			MaxRun:   ms(50 + r.IntN(int(2*iv/time.Millisecond))),
		}
		switch r.IntN(4) {
		case 0:
			j.CatchUp = scheduler.CatchUpLatest
		case 1:
			j.CatchUp = scheduler.CatchUpAll
		}
		// Some jobs that forbid overlap cancel the other run or buffer instead,
		// drawn apart from r so that every seed's other draws stay as they were.
		j.MixOverlap(seed, i)
		j.MixLimit(seed, i)
		j.MixSpread(seed, i)
		j.MixDeadline(seed, i)
		j.MixConcurrency(seed, i)
		j.MixCalendar(seed, i)
		p.Jobs = append(p.Jobs, j)
	}
	faultMS := int(mcFaultPhase / time.Millisecond)
	p.Flaky = make([][]modelcheck.Window, p.Slots)
	for s := range p.Slots {
		p.Actions = append(p.Actions, modelcheck.Action{At: ms(r.IntN(1000)), Kind: modelcheck.ActStart, Slot: s})
		if r.Float64() < 0.3 {
			p.Actions = append(p.Actions, modelcheck.Action{At: ms(1000 + r.IntN(faultMS-2000)), Kind: modelcheck.ActCrash, Slot: s})
		}
		for range r.IntN(3) {
			p.Actions = append(p.Actions, modelcheck.Action{At: ms(1000 + r.IntN(faultMS-2000)), Kind: modelcheck.ActPause, Slot: s, Dur: ms(200 + r.IntN(4000))})
		}
		if r.Float64() < 0.35 {
			at := ms(1500 + r.IntN(faultMS-3000))
			stop := modelcheck.Action{At: at, Kind: modelcheck.ActStop, Slot: s}
			if r.IntN(3) > 0 {
				stop.Dur = ms(r.IntN(2500))
			}
			p.Actions = append(p.Actions, stop)
			if r.IntN(2) == 0 { // a manual run that Stop has to cancel
				p.Actions = append(p.Actions, modelcheck.Action{At: at - ms(r.IntN(1500)), Kind: modelcheck.ActRunNow, Slot: s, Job: r.IntN(len(p.Jobs))})
			}
			if back := at + ms(r.IntN(4000)); back < mcFaultPhase {
				p.Actions = append(p.Actions, modelcheck.Action{At: back, Kind: modelcheck.ActRestart, Slot: s})
			}
		}
		for range r.IntN(3) {
			from := ms(r.IntN(faultMS - 1000))
			p.Flaky[s] = append(p.Flaky[s], modelcheck.Window{From: from, To: min(mcFaultPhase, from+ms(1000+r.IntN(7000))), P: 0.1 + 0.5*r.Float64()})
		}
	}
	for range r.IntN(3) {
		p.Actions = append(p.Actions, modelcheck.Action{At: ms(1000 + r.IntN(faultMS-2000)), Kind: modelcheck.ActRunNow, Slot: r.IntN(p.Slots), Job: r.IntN(len(p.Jobs))})
	}
	p.AddEdges(5 * time.Second)
	p.AddRetries()
	p.AddEntries()
	p.AddHolderCrashes()
	p.AddReadds()
	p.AddOutages()
	p.AddBackfills()
	p.AddRedeploys()
	p.AddFreezes()
	p.AddSkew(time.Second)
	p.AddCalendars()
	p.AddTurns()
	return p
}
