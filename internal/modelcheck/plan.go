package modelcheck

import (
	"cmp"
	"fmt"
	"math/rand/v2"
	"slices"
	"strings"
	"time"

	"github.com/anarchon/anarchon/backend"
	"github.com/anarchon/anarchon/scheduler"
)

// Job is one Every job with a lease, registered on every instance.
type Job struct {
	Name     string
	Interval time.Duration
	Lease    time.Duration
	MaxLate  time.Duration
	Skip     bool // OverlapSkip
	// CancelOther is OverlapCancelOther (with Skip false), on stores that
	// implement it (backend.OverlapCanceller).
	CancelOther bool
	// Buffer is, with Skip and CancelOther false, OverlapBufferOne (1) or
	// OverlapBufferAll with that cap (2 or more), on stores that implement
	// them (backend.OverlapBufferer); 0: neither.
	Buffer  int
	CatchUp backend.CatchUpPolicy
	Window  time.Duration // catch-up window
	MaxRun  time.Duration // scheduled handlers run for [0, MaxRun]
	// Retry is the job's retry policy (WithRetry) when the store is a
	// backend.Retrier; nil: none. Its scheduled attempts fail as Fail says.
	Retry   *scheduler.RetryPolicy
	Fail    Failing
	Timeout time.Duration // WithTimeout; 0: none
	// MaxRuns is the job's run limit (WithMaxRuns) on stores that count runs
	// (backend.RunCounter); 0: none.
	MaxRuns int
	// Spread is the job's spread window (WithSpread); 0: none. Its slots, and
	// each entry's, are moved by scheduler.SpreadOffset of their run name.
	Spread time.Duration
	// Deadline is the job's deadline (WithDeadline); 0: none. Its entries
	// have it too.
	Deadline time.Duration
	// Concurrency is, with Skip or Buffer, how many of its slots may run at
	// once (WithConcurrency); 0: one. Each entry has its own.
	Concurrency int
	// Calendar names the calendar Name (WithCalendars), on stores that keep
	// calendars (backend.CalendarStore); its entries name it too. ActCalendar
	// stores it, excluding every slot of the run, or deletes it.
	Calendar bool
	// Entries are the job's schedule entries (AddEntries), run with its
	// handler and policies on stores that keep entries (backend.EntryStore);
	// Declared jobs have no slots of their own (scheduler.Declare), the others
	// keep their Interval beside their entries. On other stores the job runs
	// every Interval alone.
	Entries  []EntryPlan
	Declared bool
	// Next is the job's options in the release a redeploy brings
	// (ActRedeploy); nil: the same.
	Next *Release
}

// Release is what a redeploy changes of a job's options: its lease, its max
// lateness and its overlap policy (Skip, CancelOther and Buffer as in Job).
type Release struct {
	Lease, MaxLate    time.Duration
	Skip, CancelOther bool
	Buffer            int
}

// Redeployed is j as the next release registers it.
func (j Job) Redeployed() Job {
	if j.Next == nil {
		return j
	}
	r := j.Next
	j.Lease, j.MaxLate, j.Skip, j.CancelOther, j.Buffer = r.Lease, r.MaxLate, r.Skip, r.CancelOther, r.Buffer
	if j.Buffer > 0 {
		j.MaxRun = min(j.MaxRun, j.Interval/2)
	}
	j.Next = nil
	return j
}

// Failing says which scheduled attempts of a job with a retry policy fail. Each
// decision is drawn with Mix from the seed, the job, the slot and the attempt
// number, so the same attempt fails the same way whichever instance runs it.
type Failing struct {
	P       float64 // an attempt fails
	Doomed  float64 // a slot fails every attempt
	NoRetry float64 // a failure is marked scheduler.NoRetry
	Hang    float64 // a failure waits for the job's Timeout (with one)
}

// AttemptFate is how a scheduled attempt's handler means to end.
type AttemptFate int

// The fates of an attempt.
const (
	FateOK      AttemptFate = iota
	FateError               // returns an error, early
	FateNoRetry             // returns an error marked scheduler.NoRetry
	FateHang                // waits until its context ends (the job's Timeout)
)

// Fate is how attempt of j's slot ends in seed: FateOK unless j has a retry
// policy.
func (j Job) Fate(seed uint64, slot time.Time, attempt int) AttemptFate {
	if j.Retry == nil {
		return FateOK
	}
	base := Mix(seed, 0x6661_696c, Str(j.Name), uint64(slot.UnixMilli()))
	if Unit(base) >= j.Fail.Doomed && Unit(Mix(base, uint64(attempt))) >= j.Fail.P {
		return FateOK
	}
	u := Unit(Mix(base, uint64(attempt), 2))
	switch {
	case u < j.Fail.NoRetry:
		return FateNoRetry
	case j.Timeout > 0 && u < j.Fail.NoRetry+j.Fail.Hang:
		return FateHang
	}
	return FateError
}

// ActKind is what an Action does to an instance slot.
type ActKind string

// The actions of a plan.
const (
	ActStart   ActKind = "start"   // start an instance if the slot has none up
	ActCrash   ActKind = "crash"   // the process dies: its calls hang and fail, its handlers end
	ActPause   ActKind = "pause"   // heartbeats are held for Dur
	ActFreeze  ActKind = "freeze"  // the whole process stops for Dur (freeze.go)
	ActStop    ActKind = "stop"    // Stop with a deadline of Dur
	ActRestart ActKind = "restart" // like start
	ActRunNow  ActKind = "runnow"  // RunNow of Jobs[Job]
	// ActPauseJob pauses Jobs[Job] for Dur through the instance (Scheduler.Pause
	// with an Until Dur from its clock's now).
	ActPauseJob ActKind = "pausejob"
	// ActAddEntry adds entry E.Entry of Jobs[Job] through the instance
	// (AddEntry), or through the store when the instance is down.
	ActAddEntry ActKind = "addentry"
	// ActUpdateEntry changes the entry through the instance (UpdateEntry on the
	// revision stored now), while instance slot E.Racer, when up, changes the
	// same revision at once.
	ActUpdateEntry ActKind = "updateentry"
	// ActRemoveEntry removes the entry through the instance (RemoveEntry), or
	// through the store when the instance is down.
	ActRemoveEntry ActKind = "removeentry"
	// ActBackfill backfills Jobs[Job] through the instance over the Dur before
	// its clock's now (Scheduler.Backfill), with BackfillRerun when Rerun.
	ActBackfill ActKind = "backfill"
	// ActRedeploy stops the instance (Stop with a deadline of Dur) and starts
	// it at once with the next release of the jobs (Job.Next); an instance
	// slot that is down starts with it next time.
	ActRedeploy ActKind = "redeploy"
	// ActCrashHolders crashes, like ActCrash, every instance up whose handler
	// runs a slot of entry E.Entry of Jobs[Job] at that instant (Slot is
	// unused): a holder that dies just after its entry was removed.
	ActCrashHolders ActKind = "crashholders"
	// ActCalendar stores, through the instance, the calendar of Jobs[Job]
	// (Job.Calendar), whose days hold every slot of the run; with Drop it
	// deletes it.
	ActCalendar ActKind = "calendar"
)

// Action is one step of the fault phase.
type Action struct {
	At   time.Duration // since the start of the fault phase
	Kind ActKind
	Slot int           // instance slot
	Dur  time.Duration // pause length (of heartbeats, or of a job), Stop's deadline
	Job  int           // RunNow's and PauseJob's job, an index into Plan.Jobs
	E    *EntryAct     // the entry actions' entry and change
	// Rerun: the backfill reruns slots that ran too.
	Rerun bool
	// Drop: ActCalendar deletes the calendar.
	Drop bool
}

// Window is a stretch of the fault phase in which an instance's store calls fail
// with probability P.
type Window struct {
	From, To time.Duration // since the start of the fault phase
	P        float64
}

// Plan is one seed's world and what happens to it.
type Plan struct {
	Seed        uint64
	Pre         time.Duration // time before the fault phase starts
	CallTimeout time.Duration
	Slots       int // instance slots
	FaultPhase  time.Duration
	QuietPhase  time.Duration
	Jobs        []Job
	Actions     []Action   // in the order of At (see SortActions)
	Flaky       [][]Window // per instance slot
	// Outages are stretches of the fault phase in which the store is down and
	// restarts (P unused): every instance's calls fail, lost on their way or
	// applied with their answer lost, and every watch is cut at the start.
	Outages []Window
	// Turns: the instances share out the slots (scheduler.Config.Turns) on a
	// store that keeps members.
	Turns bool
	// Skew bounds each instance's clock offset from the store's (the
	// harness's); zero: 500ms. Within the scheduler's allowance
	// (Config.MaxClockSkew, 2s by default) when at most half of it: two
	// instances are then at most the allowance apart.
	Skew time.Duration
}

func (p *Plan) skew() time.Duration {
	if p.Skew == 0 {
		return 500 * time.Millisecond
	}
	return p.Skew
}

// AddBackfills adds 0–2 backfills of a job in the fault phase, over the last
// 2–6 intervals before the call, now and then rerunning the slots that ran.
// Jobs declared for their entries only have no slot to backfill. It draws from
// a stream of its own, so that the rest of a seed's plan stays what it was.
func (p *Plan) AddBackfills() {
	r := rand.New(rand.NewPCG(p.Seed^0x6266_696c_6c, p.Seed))
	for range r.IntN(3) {
		i := r.IntN(len(p.Jobs))
		if p.Jobs[i].Declared {
			continue
		}
		p.Actions = append(p.Actions, Action{At: p.phaseAt(r, 0.25, 0.95), Kind: ActBackfill, Slot: r.IntN(p.Slots), Job: i,
			Dur: time.Duration(2+r.IntN(5)) * p.Jobs[i].Interval, Rerun: r.IntN(4) == 0})
	}
	p.SortActions()
}

// AddRedeploys gives a third of the plans a rolling redeploy in the fault
// phase: every instance slot is redeployed once, one after the other. The next
// release changes the lease, the max lateness or the overlap policy of half
// the jobs (one at least). The runs of the old release stay in the store. It
// draws from a stream of its own, so that the rest of a seed's plan stays.
func (p *Plan) AddRedeploys() {
	r := rand.New(rand.NewPCG(p.Seed^0x7265_6c65_6173, p.Seed))
	if r.IntN(3) != 0 {
		return
	}
	changed := false
	for i := range p.Jobs {
		j := &p.Jobs[i]
		if r.IntN(2) == 0 && (changed || i < len(p.Jobs)-1) {
			continue
		}
		changed = true
		iv := int(j.Interval / time.Millisecond)
		next := &Release{Lease: j.Lease, MaxLate: j.MaxLate, Skip: j.Skip, CancelOther: j.CancelOther, Buffer: j.Buffer}
		switch r.IntN(3) {
		case 0:
			next.Lease = MS(1000 + r.IntN(2001))
		case 1:
			next.MaxLate = MS(200 + r.IntN(iv-199))
		default:
			next.Skip, next.CancelOther, next.Buffer = false, false, 0
			switch r.IntN(5) {
			case 1:
				next.Skip = true
			case 2:
				next.CancelOther = true
			case 3:
				next.Buffer = 1
			case 4:
				next.Buffer = 2 + r.IntN(2)
			}
		}
		j.Next = next
	}
	at := p.phaseAt(r, 0.15, 0.3)
	for s := range p.Slots {
		p.Actions = append(p.Actions, Action{At: at, Kind: ActRedeploy, Slot: s, Dur: MS(r.IntN(2000))})
		at += p.phaseAt(r, 0.02, 0.08)
	}
	p.SortActions()
}

// AddFreezes freezes, from a stream of its own (so that the rest of a seed's
// plan stays what it was), in a third of the plans 1–2 instances for 1–4s in
// the fault phase: often past their leases.
func (p *Plan) AddFreezes() {
	r := rand.New(rand.NewPCG(p.Seed^0x6672_6565_7a65, p.Seed))
	if r.IntN(3) != 0 {
		return
	}
	for range 1 + r.IntN(2) {
		p.Actions = append(p.Actions, Action{At: p.phaseAt(r, 0.05, 0.7), Kind: ActFreeze, Slot: r.IntN(p.Slots), Dur: MS(1000 + r.IntN(3000))})
	}
	p.SortActions()
}

// AddOutages gives, from a stream of its own (so that the rest of a seed's
// plan stays what it was), a third of the plans one outage of the store of
// 1–4s in the fault phase: a server restart, as every instance sees it.
func (p *Plan) AddOutages() {
	r := rand.New(rand.NewPCG(p.Seed^0x6f75_7461_6765, p.Seed))
	if r.IntN(3) != 0 {
		return
	}
	from := p.phaseAt(r, 0.05, 0.65)
	p.Outages = append(p.Outages, Window{From: from, To: from + min(MS(1000+r.IntN(3000)), p.FaultPhase*3/10), P: 1})
}

// AddSkew gives, from a stream of its own (so that the rest of a seed's plan
// stays what it was), a third of the plans clocks skewed up to max from the
// store's: max is at most half the scheduler's allowance, so that every two
// clocks stay within it.
func (p *Plan) AddSkew(max time.Duration) {
	r := rand.New(rand.NewPCG(p.Seed^0x736b_6577, p.Seed))
	if r.IntN(3) == 0 {
		p.Skew = max
	}
}

// SortActions puts the actions in the order of At, keeping the order of equals.
func (p *Plan) SortActions() {
	slices.SortStableFunc(p.Actions, func(a, b Action) int { return cmp.Compare(a.At, b.At) })
}

func (p *Plan) String() string {
	var b strings.Builder
	fmt.Fprintf(&b, "seed %d: %d instances, call timeout %v, clocks within ±%v, fault phase from +%v for %v, then quiet %v, turns %v\n", p.Seed, p.Slots, p.CallTimeout, p.skew(), p.Pre, p.FaultPhase, p.QuietPhase, p.Turns)
	for _, j := range p.Jobs {
		fmt.Fprintf(&b, "  %s: every %v, lease %v, maxLate %v, overlap skip %v, cancel-other %v, buffer %d, catch-up %s/%v, handler ≤ %v, max runs %d\n", j.Name, j.Interval, j.Lease, j.MaxLate, j.Skip, j.CancelOther, j.Buffer, j.CatchUp, j.Window, j.MaxRun, j.MaxRuns)
		if len(j.Entries) > 0 {
			fmt.Fprintf(&b, "    entries (declared only: %v):", j.Declared)
			for _, e := range j.Entries {
				how := "by an instance"
				if e.Direct {
					how = "through the store before the instances start"
				}
				fmt.Fprintf(&b, " %s every %v (%s);", e.ID, e.Interval, how)
			}
			b.WriteByte('\n')
		}
		if r := j.Next; r != nil {
			fmt.Fprintf(&b, "    next release: lease %v, maxLate %v, overlap skip %v, cancel-other %v, buffer %d\n", r.Lease, r.MaxLate, r.Skip, r.CancelOther, r.Buffer)
		}
		if r := j.Retry; r != nil {
			fmt.Fprintf(&b, "    retry: %d attempts, backoff %v, max backoff %v, timeout %v; fails p=%.2f, doomed slots p=%.2f, no-retry p=%.2f, hangs p=%.2f\n",
				r.Attempts, r.Backoff, r.MaxBackoff, j.Timeout, j.Fail.P, j.Fail.Doomed, j.Fail.NoRetry, j.Fail.Hang)
		}
	}
	for _, a := range p.Actions {
		fmt.Fprintf(&b, "  +%v %s %c", (p.Pre + a.At).Round(time.Millisecond), a.Kind, 'A'+a.Slot)
		switch a.Kind {
		case ActPause:
			fmt.Fprintf(&b, " heartbeats for %v", a.Dur)
		case ActFreeze:
			fmt.Fprintf(&b, " the process for %v", a.Dur)
		case ActStop:
			fmt.Fprintf(&b, " with a %v deadline", a.Dur)
		case ActRunNow:
			fmt.Fprintf(&b, " %s", p.Jobs[a.Job].Name)
		case ActPauseJob:
			fmt.Fprintf(&b, " %s for %v", p.Jobs[a.Job].Name, a.Dur)
		case ActRedeploy:
			fmt.Fprintf(&b, " (stop deadline %v)", a.Dur)
		case ActCalendar:
			fmt.Fprintf(&b, " %s's calendar stored (dropped %v)", p.Jobs[a.Job].Name, a.Drop)
		case ActBackfill:
			fmt.Fprintf(&b, " %s over the last %v (rerun %v)", p.Jobs[a.Job].Name, a.Dur, a.Rerun)
		case ActAddEntry, ActRemoveEntry, ActCrashHolders:
			fmt.Fprintf(&b, " %s/%s", p.Jobs[a.Job].Name, p.Jobs[a.Job].Entries[a.E.Entry].ID)
			if a.E.Payload != "" {
				fmt.Fprintf(&b, " again, payload %q", a.E.Payload)
			}
		case ActUpdateEntry:
			fmt.Fprintf(&b, " %s/%s to every %v, payload %q", p.Jobs[a.Job].Name, p.Jobs[a.Job].Entries[a.E.Entry].ID, a.E.Every, a.E.Payload)
			if a.E.Racer >= 0 {
				fmt.Fprintf(&b, ", racing %c", 'A'+a.E.Racer)
			}
		}
		b.WriteByte('\n')
	}
	for _, w := range p.Outages {
		fmt.Fprintf(&b, "  store down (restarting) from +%v to +%v\n", p.Pre+w.From, p.Pre+w.To)
	}
	for s, ws := range p.Flaky {
		for _, w := range ws {
			fmt.Fprintf(&b, "  flaky %c from +%v to +%v, p=%.2f\n", 'A'+s, p.Pre+w.From, p.Pre+w.To, w.P)
		}
	}
	return b.String()
}

// AddEdges adds to p the faults at the edges of the state machine: pauses of a
// job in the fault phase, and now and then every instance started at the same
// instant. Their first claims then tie: a catch-up slot and the slot just due,
// of a job that forbids overlap. It draws from a stream of its own, so that
// the rest of a seed's plan stays what it was.
func (p *Plan) AddEdges(maxPause time.Duration) {
	r := rand.New(rand.NewPCG(p.Seed^0x7061_7573_6564, p.Seed))
	faultMS := int(p.FaultPhase / time.Millisecond)
	for range r.IntN(3) {
		p.Actions = append(p.Actions, Action{At: MS(500 + r.IntN(faultMS-1000)), Kind: ActPauseJob,
			Slot: r.IntN(p.Slots), Job: r.IntN(len(p.Jobs)), Dur: MS(1000 + r.IntN(int(maxPause/time.Millisecond)))})
	}
	if r.IntN(4) == 0 {
		var first time.Duration = -1
		for i, a := range p.Actions {
			if a.Kind == ActStart {
				if first < 0 {
					first = a.At
				}
				p.Actions[i].At = first
			}
		}
	}
	p.SortActions()
}

// AddRetries gives some of p's jobs a retry policy, from a stream of its own (so
// that the rest of a seed's plan stays what it was): 2–4 attempts, a backoff of
// 5–35% of the interval (so that a first retry fits before the next slot), now and
// then a cap on its doubling and a handler timeout, and failures of some attempts
// (Failing). Jitter stays zero: the scheduler draws it from no seed, and a replay
// would not meet the same retry times.
func (p *Plan) AddRetries() {
	r := rand.New(rand.NewPCG(p.Seed^0x7265_7472_7921, p.Seed))
	for i := range p.Jobs {
		j := &p.Jobs[i]
		if r.IntN(2) == 0 {
			continue
		}
		iv := int(j.Interval / time.Millisecond)
		pol := &scheduler.RetryPolicy{Attempts: 2 + r.IntN(3), Backoff: MS(iv/20 + r.IntN(iv*3/10))}
		if r.IntN(3) == 0 {
			pol.MaxBackoff = pol.Backoff * 2
		}
		j.Retry = pol
		j.Fail = Failing{P: 0.2 + 0.5*r.Float64(), Doomed: 0.3 * r.Float64(), NoRetry: 0.1 * r.Float64()}
		if r.IntN(3) == 0 {
			j.Timeout = MS(iv/4 + r.IntN(iv))
			j.Fail.Hang = 0.3
		}
	}
}

// phaseAt draws a time in the fault phase, from its fraction from to its
// fraction to.
func (p *Plan) phaseAt(r *rand.Rand, from, to float64) time.Duration {
	f := float64(p.FaultPhase)
	return time.Duration(from*f + r.Float64()*(to-from)*f).Round(time.Millisecond)
}

// MS is n milliseconds.
func MS(n int) time.Duration { return time.Duration(n) * time.Millisecond }

// ---- deterministic randomness for decisions taken inside goroutines ----

// Mix hashes its parts into one well-spread number (splitmix64 steps).
func Mix(parts ...uint64) uint64 {
	h := uint64(0x243f6a8885a308d3)
	for _, x := range parts {
		h ^= x
		h += 0x9e3779b97f4a7c15
		z := h
		z = (z ^ (z >> 30)) * 0xbf58476d1ce4e5b9
		z = (z ^ (z >> 27)) * 0x94d049bb133111eb
		h = z ^ (z >> 31)
	}
	return h
}

// Str hashes s (FNV-1a) for Mix.
func Str(s string) uint64 {
	h := uint64(14695981039346656037)
	for i := 0; i < len(s); i++ {
		h ^= uint64(s[i])
		h *= 1099511628211
	}
	return h
}

// Unit maps a hash to [0, 1).
func Unit(h uint64) float64 { return float64(h>>11) / (1 << 53) }

// merged is j judged with both of its releases (j and next): a policy holds
// if one release has it, the longest lease, lateness and handler stand.
func (j Job) merged(next Job) Job {
	j.Skip = j.Skip || next.Skip
	j.CancelOther = j.CancelOther || next.CancelOther
	j.Buffer = max(j.Buffer, next.Buffer)
	j.Lease, j.MaxLate, j.MaxRun = max(j.Lease, next.Lease), max(j.MaxLate, next.MaxLate), max(j.MaxRun, next.MaxRun)
	j.Next = nil
	return j
}

// Exclusive reports whether the job runs one slot at a time (OverlapSkip,
// OverlapCancelOther or a buffer policy).
func (j Job) Exclusive() bool { return j.Skip || j.CancelOther || j.Buffer > 0 }

// MixOverlap turns half of the jobs that skip overlap into jobs that cancel
// the other run, and a third of those left into jobs that buffer: one, or all
// with a cap of 2 or 3. Their handlers run at most half their interval, so
// that a buffer drains. It draws apart from the plan's generator, with Mix. i
// is the job's index in the plan.
func (j *Job) MixOverlap(seed uint64, i int) {
	if !j.Skip {
		return
	}
	if Mix(seed, 0x636e_636c, uint64(i))%2 == 0 {
		j.Skip, j.CancelOther = false, true
		return
	}
	if b := Mix(seed, 0x6266_6672, uint64(i)) % 9; b < 3 {
		j.Skip, j.Buffer = false, int(b)+1
		j.MaxRun = min(j.MaxRun, j.Interval/2)
	}
}

// MixSpread gives, drawn apart from the plan's generator with Mix, a quarter of
// the jobs a spread window of 100ms to 1s (at most the shortest interval of a
// job or an entry). i is the job's index in the plan.
func (j *Job) MixSpread(seed uint64, i int) {
	if b := Mix(seed, 0x7370_7264, uint64(i)) % 36; b < 9 {
		j.Spread = time.Duration(100+b*100) * time.Millisecond
	}
}

// MixConcurrency lets, drawn apart from the plan's generator with Mix, a
// third of the jobs that skip or buffer run two or three slots at once. i is
// the job's index in the plan.
func (j *Job) MixConcurrency(seed uint64, i int) {
	if !j.Skip && j.Buffer == 0 {
		return
	}
	if b := Mix(seed, 0x636f_6e63, uint64(i)) % 6; b < 2 {
		j.Concurrency = int(b) + 2
	}
}

// slots is how many of the job's slots may run at once.
func (j Job) slots() int {
	if j.Concurrency > 1 && (j.Skip || j.Buffer > 0) {
		return j.Concurrency
	}
	return 1
}

// MixDeadline gives, drawn apart from the plan's generator with Mix, a quarter
// of the jobs a deadline of a half to three intervals after the slot (past its
// spread window): handlers that run up to MaxRun end on both sides of it. i is
// the job's index in the plan.
func (j *Job) MixDeadline(seed uint64, i int) {
	if b := Mix(seed, 0x646c_696e, uint64(i)) % 40; b < 10 {
		j.Deadline = max(j.Interval/2+time.Duration(b)*j.Interval/4, j.Spread+100*time.Millisecond)
	}
}

// MixCalendar names, drawn apart from the plan's generator with Mix, a
// calendar for a quarter of the jobs. i is the job's index in the plan.
func (j *Job) MixCalendar(seed uint64, i int) {
	if b := Mix(seed, 0x6361_6c65, uint64(i)) % 8; b < 2 {
		j.Calendar = true
	}
}

// AddCalendars adds to p, for each job that names a calendar, one to three
// actions that store or delete it in turn, through random instances, in the
// fault phase. It draws from a stream of its own.
func (p *Plan) AddCalendars() {
	r := rand.New(rand.NewPCG(p.Seed^0x6361_6c65_6e64, p.Seed))
	faultMS := int(p.FaultPhase / time.Millisecond)
	added := false
	for i, j := range p.Jobs {
		if !j.Calendar {
			continue
		}
		at := 200 + r.IntN(faultMS/2)
		for k := range 1 + r.IntN(3) {
			if at >= faultMS-200 {
				break
			}
			p.Actions = append(p.Actions, Action{At: MS(at), Kind: ActCalendar, Slot: r.IntN(p.Slots), Job: i, Drop: k%2 == 1})
			at += 1000 + r.IntN(faultMS/2)
			added = true
		}
	}
	if added {
		p.SortActions()
	}
}

// AddTurns has half the seeds' instances share out the slots
// (scheduler.Config.Turns). It draws from a stream of its own.
func (p *Plan) AddTurns() {
	p.Turns = Mix(p.Seed, 0x7475_726e)%2 == 0
}

// CalendarName is the name of the calendar of the job named job.
func CalendarName(job string) string { return "mc " + job }

// offset is the spread offset of the run name's slots (0 without a spread).
func (j Job) offset() int64 {
	return scheduler.SpreadOffset(j.Name, j.Spread).Milliseconds()
}

// MixLimit gives, drawn apart from the plan's generator with Mix, a third of the
// jobs a run limit of 2 to 9 slots (WithMaxRuns). i is the job's index in the
// plan.
func (j *Job) MixLimit(seed uint64, i int) {
	if b := Mix(seed, 0x6c69_6d74, uint64(i)) % 24; b < 8 {
		j.MaxRuns = int(b) + 2
	}
}
