package modelcheck

import (
	"fmt"
	"slices"
	"sort"
	"strings"
	"time"

	"github.com/anarchon/anarchon/backend"
)

// The matrix the model check covers: every policy a job can have, and every
// fault, met in one seed by one job. A fault of a store call counts for the
// job (or entry) the call was about; a fault of an instance, of the store or
// of the clocks counts for every job the seed runs.
var (
	// MatrixPolicies are a job's, as registered (either release of a redeploy).
	MatrixPolicies = []string{"allow", "skip", "cancel-other", "buffer-one", "buffer-all", "retries", "run limit",
		"catch-up", "entries", "pause", "manual runs", "backfill", "spread", "deadline", "concurrency", "calendar"}
	// MatrixFaults are what befalls a job's calls, its instances or the store.
	MatrixFaults = []string{"request lost", "answer late", "applied, answer lost", "crash", "frozen past its lease",
		"heartbeats held", "store restart", "watch cut", "watch reconnect (Resync)", "clock skew at the allowance",
		"redeploy", "entry removed and added again"}
	// optionalFaults are met only with a store that says where it writes
	// twice (World.CrashBetweenWrites).
	optionalFaults = []string{"crash between two writes"}
)

// faultHit records that a fault struck a call of in's about job (a run name;
// empty: every job).
func (r *record) faultHit(job, fault string) {
	r.mu.Lock()
	defer r.mu.Unlock()
	r.faultHitLocked(job, fault)
}

func (r *record) faultHitLocked(job, fault string) {
	if r.hits == nil {
		r.hits = map[string]map[string]bool{}
	}
	job = backend.JobOf(job)
	if r.hits[job] == nil {
		r.hits[job] = map[string]bool{}
	}
	r.hits[job][fault] = true
}

// name is how the matrix names a call's fault.
func (f fault) name() string {
	switch f {
	case lostRequest:
		return "request lost"
	case slow:
		return "answer late"
	case lostAnswer:
		return "applied, answer lost"
	}
	return ""
}

// coverage adds to c.cov the pairs of the matrix this seed met: "policy ×
// fault" and "policy + policy" (two policies of one job).
func (c *checker) coverage() {
	h := c.h
	p := h.plan
	global := map[string]bool{}
	for _, in := range c.instances() {
		if len(in.freezes()) > 0 {
			global["frozen past its lease"] = true
		}
		if in.dead.Load() {
			global["crash"] = true
		}
		if in.paused() > 0 {
			global["heartbeats held"] = true
		}
		if in.release {
			global["redeploy"] = true
		}
	}
	if len(p.Outages) > 0 {
		global["store restart"] = true
	}
	if p.skew() >= time.Second {
		global["clock skew at the allowance"] = true
	}
	for _, w := range c.rec.watches {
		if w.resync {
			global["watch reconnect (Resync)"] = true
		}
	}
	c.cov = map[string]int{}
	for _, j := range p.Jobs {
		pol := c.policies(j)
		faults := map[string]bool{}
		for f := range global {
			faults[f] = true
		}
		for f := range c.rec.hits[j.Name] {
			faults[f] = true
		}
		for f := range c.rec.hits[""] {
			faults[f] = true
		}
		if len(h.job(j).Entries) > 0 {
			for _, w := range c.rec.watches {
				if !w.synced && !w.resync && !w.disconnected {
					faults["watch cut"] = true
				}
			}
			if c.readded(j.Name) {
				faults["entry removed and added again"] = true
			}
		}
		for _, a := range pol {
			for f := range faults {
				c.cov[a+" × "+f]++
			}
			for _, b := range pol {
				if a < b {
					c.cov[a+" + "+b]++
				}
			}
		}
	}
}

// policies are j's policies as its instances registered them.
func (c *checker) policies(j Job) []string {
	set := map[string]bool{}
	for _, r := range []Job{c.h.job(j), c.h.job(j.Redeployed())} {
		switch {
		case r.Skip:
			set["skip"] = true
		case r.CancelOther:
			set["cancel-other"] = true
		case r.Buffer == 1:
			set["buffer-one"] = true
		case r.Buffer > 1:
			set["buffer-all"] = true
		default:
			set["allow"] = true
		}
		set["retries"] = set["retries"] || r.Retry != nil
		set["run limit"] = set["run limit"] || r.MaxRuns > 0
		set["catch-up"] = set["catch-up"] || r.CatchUp != backend.CatchUpNone
		set["entries"] = set["entries"] || len(r.Entries) > 0
		set["spread"] = set["spread"] || r.Spread > 0
		set["deadline"] = set["deadline"] || r.Deadline > 0
		set["concurrency"] = set["concurrency"] || r.slots() > 1
		set["calendar"] = set["calendar"] || r.Calendar && c.calendarStored(j.Name)
	}
	for _, a := range c.h.plan.Actions {
		if a.Kind == ActPauseJob || a.Kind == ActRunNow || a.Kind == ActBackfill {
			if c.h.plan.Jobs[a.Job].Name == j.Name {
				set[map[ActKind]string{ActPauseJob: "pause", ActRunNow: "manual runs", ActBackfill: "backfill"}[a.Kind]] = true
			}
		}
	}
	out := make([]string, 0, len(set))
	for k, ok := range set {
		if ok {
			out = append(out, k)
		}
	}
	sort.Strings(out)
	return out
}

// readded reports whether an entry of job was removed and created again.
func (c *checker) readded(job string) bool {
	removed := map[string]bool{}
	for _, w := range c.rec.entryWrites {
		switch {
		case w.err != nil || w.e.Job != job:
		case w.op == "delete":
			removed[w.e.RunName()] = true
		case w.op == "create" && removed[w.e.RunName()]:
			return true
		}
	}
	return false
}

// coverageText is the summary's account of the matrix: how many of its pairs
// the seeds met, and which they never met.
func coverageText(cov map[string]int) string {
	var missing []string
	n, hit := 0, 0
	for _, a := range MatrixPolicies {
		for _, f := range MatrixFaults {
			n++
			if cov[a+" × "+f] > 0 {
				hit++
			} else {
				missing = append(missing, a+" × "+f)
			}
		}
	}
	pn, phit := 0, 0
	for i, a := range MatrixPolicies {
		for _, b := range MatrixPolicies[i+1:] {
			x, y := min(a, b), max(a, b)
			if overlapKind(a) && overlapKind(b) {
				continue // one job has one overlap policy per release
			}
			pn++
			if cov[x+" + "+y] > 0 {
				phit++
			} else {
				missing = append(missing, x+" + "+y)
			}
		}
	}
	slices.Sort(missing)
	txt := fmt.Sprintf("matrix: %d of %d policy × fault pairs and %d of %d pairs of policies met", hit, n, phit, pn)
	for _, f := range optionalFaults {
		met := 0
		for _, a := range MatrixPolicies {
			if cov[a+" × "+f] > 0 {
				met++
			}
		}
		txt += fmt.Sprintf("; %s met with %d of %d policies", f, met, len(MatrixPolicies))
	}
	if len(missing) > 24 {
		missing = append(missing[:24], fmt.Sprintf("… (%d more)", len(missing)-24))
	}
	if len(missing) > 0 {
		txt += "; never met: " + strings.Join(missing, ", ")
	}
	return txt
}

func overlapKind(p string) bool {
	switch p {
	case "allow", "skip", "cancel-other", "buffer-one", "buffer-all":
		return true
	}
	return false
}
