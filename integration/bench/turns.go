package main

import (
	"context"
	"fmt"
	"strings"
	"time"
)

// turnsFleets are the fleet sizes section 8 compares.
var turnsFleets = []int{3, 10}

// turnsLead is how long after Start section 8's window opens: past the 10 s a
// kvlease store's shared lease watch runs on after the stand-bys of the start,
// when the instances do not see each other yet (but in a quick run).
func turnsLead(cfg config) time.Duration {
	if cfg.quick {
		return cfg.warmup
	}
	return cfg.warmup + 12*time.Second
}

// turnsRun is one run of section 8: a fleet size, with or without turns.
type turnsRun struct {
	instances int
	turns     bool
	l         *loadResult
	err       string
}

// runTurns is section 8: the same jobs on 3 and on 10 instances with leases,
// every instance claiming every slot, then taking turns (Config.Turns).
func runTurns(ctx context.Context, cfg config, step func(string) func()) []turnsRun {
	var out []turnsRun
	for _, n := range turnsFleets {
		for _, turns := range []bool{false, true} {
			c := cfg
			c.instances, c.turns = n, turns
			name := fmt.Sprintf("8. turns: %d instances, turns %v", n, turns)
			done := step(name)
			l, err := runFleet(ctx, c, fleet{jobs: cfg.turnsJobs, interval: loadInterval, window: cfg.turnsDuration, span: span{lead: turnsLead(cfg), settle: cfg.warmup}}, true)
			r := turnsRun{instances: n, turns: turns, l: l}
			if err != nil {
				r.err = err.Error()
			}
			out = append(out, r)
			done()
			settledProc()
		}
	}
	return out
}

// claimsPerSlot is the claims the fleet sent per slot of the window: won, lost
// and stood by for (each stand-by claims again when it ends).
func (l *loadResult) claimsPerSlot() float64 {
	var n int64
	for k, v := range l.events {
		if k == "claimed" || strings.HasPrefix(k, "lost") {
			n += v
		}
	}
	return float64(n) / float64(max(l.slotsDue, 1))
}

func (l *loadResult) msgsPerSlot() float64 {
	return float64(l.clientMsgs.out+l.clientMsgs.in) / float64(max(l.slotsDue, 1))
}

// turnsMarkdown is section 8's table: one column per run.
func turnsMarkdown(runs []turnsRun) string {
	var b strings.Builder
	var ok []*loadResult
	for _, r := range runs {
		if r.err != "" {
			fmt.Fprintf(&b, "**failed** (%d instances, turns %v): %s\n\n", r.instances, r.turns, r.err)
			continue
		}
		r.l.name = fmt.Sprintf("%d instances", r.instances)
		if r.turns {
			r.l.name += ", turns"
		} else {
			r.l.name += ", every instance claims"
		}
		ok = append(ok, r.l)
	}
	if len(ok) == 0 {
		return b.String()
	}
	t, row := runColumns("metric", ok)
	row("slots due / runs", func(l *loadResult) string { return fmt.Sprintf("%d / %d", l.slotsDue, l.runs) })
	row("duplicates / missed (must be 0)", func(l *loadResult) string {
		return fmt.Sprintf("%d / %d %s", l.dups, l.missed, mark(l.dups == 0 && l.missed == 0))
	})
	row("claims per slot (won, lost and stood by)", func(l *loadResult) string { return fmt.Sprintf("%.2f", l.claimsPerSlot()) })
	row("client messages per slot, out / in / total", func(l *loadResult) string {
		return perOp(l.clientMsgs.out, l.slotsDue) + " / " + perOp(l.clientMsgs.in, l.slotsDue) + fmt.Sprintf(" / %.2f", l.msgsPerSlot())
	})
	row("JetStream API requests per slot, by kind (publishes not counted)", func(l *loadResult) string { return l.apiLine() })
	row("slot lag p50 / p99", func(l *loadResult) string {
		if len(l.lag) == 0 {
			return "n/a"
		}
		return dur(l.lag.pct(50)) + " / " + dur(l.lag.pct(99))
	})
	row("CPU per slot (whole process: server + the instances)", func(l *loadResult) string { return dur(l.cpuPerSlot()) })
	row("scheduler events of the window's slots", func(l *loadResult) string { return l.eventsLine() })
	b.WriteString(t.String())
	return b.String()
}

// turnsGoals adds section 8's goals to t.
func turnsGoals(t *table, runs []turnsRun) {
	by := map[int]*loadResult{}
	for _, r := range runs {
		if r.turns && r.err == "" {
			by[r.instances] = r.l
		}
	}
	small, large := by[turnsFleets[0]], by[turnsFleets[1]]
	if small == nil || large == nil {
		t.add("turns", "not measured")
		return
	}
	ratio := large.msgsPerSlot() / small.msgsPerSlot()
	t.add(fmt.Sprintf("turns: client messages per slot, %d instances within 10 %% of %d", turnsFleets[1], turnsFleets[0]),
		fmt.Sprintf("%s %.2f vs %.2f (×%.3f)", mark(ratio <= 1.1), large.msgsPerSlot(), small.msgsPerSlot(), ratio))
	for _, l := range []*loadResult{small, large} {
		t.add(fmt.Sprintf("turns, %d instances: ≤ 2.1 claims per slot", l.instances), fmt.Sprintf("%s %.2f", mark(l.claimsPerSlot() <= 2.1), l.claimsPerSlot()))
		t.add(fmt.Sprintf("turns, %d instances: duplicates = 0, missed = 0", l.instances), fmt.Sprintf("%s %d, %d", mark(l.dups == 0 && l.missed == 0), l.dups, l.missed))
		if len(l.lag) > 0 {
			t.add(fmt.Sprintf("turns, %d instances: lag p99 ≤ 250 ms", l.instances), fmt.Sprintf("%s %s", mark(l.lag.pct(99) <= 250*time.Millisecond), dur(l.lag.pct(99))))
		}
		t.add(fmt.Sprintf("turns, %d instances: CPU per slot ≤ 300 µs (server included)", l.instances), fmt.Sprintf("%s %s", mark(l.cpuPerSlot() <= 300*time.Microsecond), dur(l.cpuPerSlot())))
	}
}
