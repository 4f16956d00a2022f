package modelcheck

import (
	"fmt"
	"math/rand/v2"
	"strconv"
	"sync"
	"time"

	"github.com/anarchon/anarchon/backend"
)

// RealTime shapes the plans of a model check on a real store in real time
// (RealTimePlan): how many instances, how long the fault and quiet phases last,
// the call timeout, and the prefix of the jobs' names.
type RealTime struct {
	Instances              int
	FaultPhase, QuietPhase time.Duration
	CallTimeout            time.Duration
	// JobPrefix names the jobs: <JobPrefix><seed>_j<i>.
	JobPrefix string
}

// RealTimePlan draws seed's plan for a real store: 1–2 jobs every 1–2s with
// leases of 1–2s, some forbidding overlap, some catching up. Each instance
// starts in the first 300ms. In the fault phase instances are crashed, paused,
// stopped and restarted, asked for a RunNow, and given flaky windows. The same
// seed gives the same plan.
func RealTimePlan(seed uint64, o RealTime) *Plan {
	r := rand.New(rand.NewPCG(seed, seed^0x6b76_6d6f_6465_6c21))
	ms := MS
	p := &Plan{Seed: seed, CallTimeout: o.CallTimeout, Slots: o.Instances, FaultPhase: o.FaultPhase, QuietPhase: o.QuietPhase,
		Flaky: make([][]Window, o.Instances)}
	for i := range 1 + r.IntN(2) {
		iv := time.Duration(1+r.IntN(2)) * time.Second
		j := Job{
			Name:     fmt.Sprintf("%s%d_j%d", o.JobPrefix, seed, i),
			Interval: iv,
			Lease:    time.Duration(1+r.IntN(2)) * time.Second,
			MaxLate:  ms(300 + r.IntN(int(iv/time.Millisecond)-299)),
			Skip:     r.IntN(3) == 0,
			Window:   ms(2000 + r.IntN(4000)),
			MaxRun:   ms(50 + r.IntN(int(iv/time.Millisecond))),
		}
		switch r.IntN(4) {
		case 0:
			j.CatchUp = backend.CatchUpLatest
		case 1:
			j.CatchUp = backend.CatchUpAll
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
	faultMS := int(o.FaultPhase / time.Millisecond)
	for s := range o.Instances {
		p.Actions = append(p.Actions, Action{At: ms(r.IntN(300)), Kind: ActStart, Slot: s})
		if r.Float64() < 0.3 {
			p.Actions = append(p.Actions, Action{At: ms(500 + r.IntN(faultMS-1000)), Kind: ActCrash, Slot: s})
		}
		if r.Float64() < 0.5 {
			p.Actions = append(p.Actions, Action{At: ms(500 + r.IntN(faultMS-1000)), Kind: ActPause, Slot: s, Dur: ms(300 + r.IntN(2500))})
		}
		if r.Float64() < 0.3 {
			at := ms(800 + r.IntN(faultMS-1500))
			stop := Action{At: at, Kind: ActStop, Slot: s}
			if r.IntN(3) > 0 {
				stop.Dur = ms(r.IntN(1500))
			}
			p.Actions = append(p.Actions, stop)
			if r.IntN(2) == 0 {
				p.Actions = append(p.Actions, Action{At: at - ms(r.IntN(700)), Kind: ActRunNow, Slot: s, Job: r.IntN(len(p.Jobs))})
			}
			if back := at + ms(r.IntN(2000)); back < o.FaultPhase {
				p.Actions = append(p.Actions, Action{At: back, Kind: ActRestart, Slot: s})
			}
		}
		for range r.IntN(3) {
			from := ms(r.IntN(faultMS - 500))
			p.Flaky[s] = append(p.Flaky[s], Window{From: from, To: min(o.FaultPhase, from+ms(500+r.IntN(2500))), P: 0.1 + 0.4*r.Float64()})
		}
	}
	p.AddCalendars()
	p.AddTurns()
	p.SortActions()
	return p
}

// SeedT is what RunSeeds needs of a *testing.T: the reports' TB, subtests of its
// own kind, and Fatalf.
type SeedT[T any] interface {
	TB
	Run(name string, f func(T)) bool
	Fatalf(format string, args ...any)
}

// RunSeeds runs every seed with run, at most concurrent at a time (a real-time
// check spends most of its time waiting), then reports each seed as a subtest
// "seed=K" of t (a setup error fails it; so do its violations) and the summary.
func RunSeeds[T SeedT[T]](t T, w *World, seeds Seeds, concurrent int, run func(seed uint64) (*Harness, []Violation, error)) {
	t.Helper()
	start := time.Now()
	type result struct {
		h   *Harness
		vs  []Violation
		err error // the world could not be set up
	}
	results := make([]result, len(seeds.List))
	sem := make(chan struct{}, max(concurrent, 1))
	var wg sync.WaitGroup
	for i, seed := range seeds.List {
		wg.Go(func() {
			sem <- struct{}{}
			defer func() { <-sem }()
			results[i].h, results[i].vs, results[i].err = run(seed)
		})
	}
	wg.Wait()
	sum := NewSummary(w, seeds)
	for i, r := range results {
		t.Run("seed="+strconv.FormatUint(seeds.List[i], 10), func(t T) {
			if r.err != nil {
				t.Fatalf("setup: %v", r.err)
			}
			sum.Seed(t, r.h, r.vs)
		})
	}
	sum.Report(t, time.Since(start))
}
