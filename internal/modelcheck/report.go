package modelcheck

import (
	"cmp"
	"fmt"
	"os"
	"slices"
	"sort"
	"strconv"
	"strings"
	"sync"
	"time"

	"github.com/anarchon/anarchon/backend"
)

// TB is what the reports need of a *testing.T.
type TB interface {
	Helper()
	Logf(format string, args ...any)
	Errorf(format string, args ...any)
}

// Seeds are the seeds a run checks.
type Seeds struct {
	List []uint64
	// Single: one seed was asked for; a failure prints its plan and whole trace.
	Single bool
	// Trace (ANARCHON_MODEL_TRACE, with a single seed): print them even without one.
	Trace bool
}

// SeedsFromEnv reads the seeds from the environment: prefix+"SEED"=K runs seed K
// alone; otherwise prefix+"SEEDS"=N (default def) seeds from prefix+"SEED_FROM"
// (default 1).
func SeedsFromEnv(prefix string, def int) (Seeds, error) {
	if s := os.Getenv(prefix + "SEED"); s != "" {
		seed, err := strconv.ParseUint(s, 10, 64)
		if err != nil {
			return Seeds{}, fmt.Errorf("%sSEED=%q: %w", prefix, s, err)
		}
		return Seeds{List: []uint64{seed}, Single: true, Trace: os.Getenv("ANARCHON_MODEL_TRACE") != ""}, nil
	}
	n := def
	if s := os.Getenv(prefix + "SEEDS"); s != "" {
		v, err := strconv.Atoi(s)
		if err != nil || v <= 0 {
			return Seeds{}, fmt.Errorf("%sSEEDS=%q: want a positive number", prefix, s)
		}
		n = v
	}
	from := uint64(1)
	if s := os.Getenv(prefix + "SEED_FROM"); s != "" {
		v, err := strconv.ParseUint(s, 10, 64)
		if err != nil {
			return Seeds{}, fmt.Errorf("%sSEED_FROM=%q: %w", prefix, s, err)
		}
		from = v
	}
	list := make([]uint64, n)
	for i := range list {
		list[i] = from + uint64(i)
	}
	return Seeds{List: list}, nil
}

// skipped is vs without the invariants ANARCHON_MODEL_SKIP names (a comma
// separated list, e.g. "11-absurd-refused"): to judge a change by the
// invariants that held before it (the mutants of backend/machine).
func skipped(vs []Violation) []Violation {
	skip := os.Getenv("ANARCHON_MODEL_SKIP")
	if skip == "" {
		return vs
	}
	names := strings.Split(skip, ",")
	return slices.DeleteFunc(slices.Clone(vs), func(v Violation) bool { return slices.Contains(names, v.Inv) })
}

// Summary adds up the seeds of one run.
type Summary struct {
	w     *World
	seeds Seeds

	mu      sync.Mutex
	failed  []uint64
	fails   map[string][]uint64 // invariant → seeds
	example map[string]string   // invariant → one example
	seen    map[string]int      // Harness.Seen, added up
	cov     map[string]int      // the pairs of the matrix met, added up
}

// NewSummary starts the summary of a run of seeds in w.
func NewSummary(w *World, seeds Seeds) *Summary {
	return &Summary{w: w, seeds: seeds, fails: map[string][]uint64{}, example: map[string]string{}, seen: map[string]int{}, cov: map[string]int{}}
}

func (s *Summary) replay(seed uint64) string { return fmt.Sprintf(s.w.Replay, seed) }

// Seed reports one seed's violations on t, which fails if there are any, and adds
// them to the summary. It is safe for parallel seeds.
func (s *Summary) Seed(t TB, h *Harness, vs []Violation) {
	t.Helper()
	vs = skipped(vs)
	s.mu.Lock()
	for k, n := range h.Seen() {
		s.seen[k] += n
	}
	for k, n := range h.cov {
		s.cov[k] += n
	}
	s.mu.Unlock()
	full := s.seeds.Single
	if len(vs) == 0 && !(full && s.seeds.Trace) {
		return
	}
	seed := h.plan.Seed
	var b strings.Builder
	fmt.Fprintf(&b, "replay: %s\n", s.replay(seed))
	for i, v := range vs {
		if i == 8 && !full {
			fmt.Fprintf(&b, "… and %d more violations\n", len(vs)-i)
			break
		}
		fmt.Fprintf(&b, "[%s] %s\n", v.Inv, v.Msg)
	}
	if full {
		b.WriteString(h.plan.String())
		b.WriteString(h.Trace())
	}
	if len(vs) > 0 {
		t.Errorf("%s", b.String())
	} else {
		t.Logf("%s", b.String())
	}

	s.mu.Lock()
	defer s.mu.Unlock()
	if len(vs) > 0 {
		s.failed = append(s.failed, seed)
	}
	seen := map[string]bool{}
	for _, v := range vs {
		if seen[v.Inv] {
			continue
		}
		seen[v.Inv] = true
		s.fails[v.Inv] = append(s.fails[v.Inv], seed)
		if _, ok := s.example[v.Inv]; !ok {
			s.example[v.Inv] = fmt.Sprintf("seed %d: %s\nreplay: %s\n%s%s", seed, v.Msg, s.replay(seed), h.plan.String(), h.traceText(v.keys, v.inst, 120))
		}
	}
}

// Report ends the run: a line when every seed passed, else the failed seeds per
// invariant with one example each, which fails t.
func (s *Summary) Report(t TB, took time.Duration) {
	t.Helper()
	s.mu.Lock()
	defer s.mu.Unlock()
	seeds := len(s.seeds.List)
	if len(s.failed) == 0 {
		t.Logf("%s: %d seeds, no violation (%v)%s\n%s", s.w.Name, seeds, took.Round(time.Millisecond), s.seenText(), coverageText(s.cov))
		return
	}
	var b strings.Builder
	slices.Sort(s.failed)
	fmt.Fprintf(&b, "%s: %d of %d seeds failed (%v)%s\n%s\n", s.w.Name, len(s.failed), seeds, took.Round(time.Millisecond), s.seenText(), coverageText(s.cov))
	invs := make([]string, 0, len(s.fails))
	for inv := range s.fails {
		invs = append(invs, inv)
	}
	sort.Strings(invs)
	for _, inv := range invs {
		seeds := s.fails[inv]
		slices.Sort(seeds)
		fmt.Fprintf(&b, "  %-16s %3d seeds: %s\n", inv, len(seeds), seedList(seeds, 30))
	}
	for _, inv := range invs {
		fmt.Fprintf(&b, "\n==== example for %s ====\n%s", inv, s.example[inv])
	}
	t.Errorf("%s", b.String())
}

// seenText lists what the checks met, e.g. "; retries granted 12, retries stored 13".
func (s *Summary) seenText() string {
	if len(s.seen) == 0 {
		return ""
	}
	names := make([]string, 0, len(s.seen))
	for k := range s.seen {
		names = append(names, k)
	}
	sort.Strings(names)
	for i, k := range names {
		names[i] = fmt.Sprintf("%s %d", k, s.seen[k])
	}
	return "; " + strings.Join(names, ", ")
}

func seedList(seeds []uint64, limit int) string {
	var parts []string
	for i, s := range seeds {
		if i == limit {
			parts = append(parts, fmt.Sprintf("… (%d more)", len(seeds)-limit))
			break
		}
		parts = append(parts, strconv.FormatUint(s, 10))
	}
	return strings.Join(parts, " ")
}

// Trace is everything recorded so far, in time order.
func (h *Harness) Trace() string { return h.traceText(nil, "", 0) }

// traceText lists the recorded entries in time order: those about keys (all when
// keys and inst are empty), those of inst, and the global ones (instance starts,
// stops, crashes, pauses). With a limit it keeps the first and the last lines.
func (h *Harness) traceText(keys []key, inst string, limit int) string {
	r := h.rec
	r.mu.Lock()
	entries := slices.Clone(r.entries)
	r.mu.Unlock()
	slices.SortStableFunc(entries, func(a, b entry) int { return cmp.Compare(a.at, b.at) })
	want := map[key]bool{}
	for _, k := range keys {
		want[k] = true
	}
	var lines []string
	for _, e := range entries {
		all := len(keys) == 0 && inst == ""
		global := e.key == key{}
		if !all && !global && !want[e.key] && (inst == "" || e.inst != inst) {
			continue
		}
		where := ""
		if e.key.job != "" {
			where = e.key.job
			if e.key.slot != 0 {
				where += " slot " + h.rel(e.key.slot)
			}
		}
		where = strings.ReplaceAll(where, backend.EntrySep, "/")
		lines = append(lines, fmt.Sprintf("  %10s %-4s %-24s %s", at(e.at), e.inst, where, e.text))
	}
	if limit > 0 && len(lines) > limit {
		// Keep the end of the story when it is long: the violation is usually there,
		// but keep the first lines (starts) too.
		const head = 20
		tail := lines[len(lines)-(limit-head):]
		lines = append(append(slices.Clone(lines[:head]), fmt.Sprintf("  … %d lines left out …", len(lines)-limit)), tail...)
	}
	clock := "virtual"
	if r.timing == Bounded {
		clock = "real"
	}
	return "trace (" + clock + " time since the seed began; instance; job and slot):\n" + strings.Join(lines, "\n") + "\n"
}

var runPrefixes struct {
	sync.Mutex
	n map[string]int
}

// RunPrefix is prefix at its first call in the process and prefix with a run
// number after: a test run again (go test -count) on the same server names
// its buckets and jobs apart.
func RunPrefix(prefix string) string {
	runPrefixes.Lock()
	defer runPrefixes.Unlock()
	if runPrefixes.n == nil {
		runPrefixes.n = map[string]int{}
	}
	runPrefixes.n[prefix]++
	if n := runPrefixes.n[prefix]; n > 1 {
		return fmt.Sprintf("%s%dr", prefix, n)
	}
	return prefix
}
