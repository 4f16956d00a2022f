// Package modelcheck is the harness of the randomised model checks of the lease path:
// TestModelCheck in the scheduler package (a memory.Backend under testing/synctest,
// 500 seeds in virtual time) and TestModelCheckKV in integration (kvlease and the
// JetStream LeasedBackend on an embedded nats-server, in real time). The two differ
// in the world they build and in what their clocks let them know; the rest lives
// here once: the plan of a seed, the driver that carries it out, each instance's
// faulty view of the stores, the record of everything that happened, the invariant
// checks and the reports.
//
// A seed is a [Plan]: a few instance slots, 1–3 Every jobs with leases, and a fault
// phase in which instances crash, pause their heartbeats, stop (with or without a
// deadline), restart and call RunNow while their store calls are lost, answered
// late or not at all. Some jobs run through schedule entries ([Plan.AddEntries]):
// declared only, or Every jobs with entries too, with 1–3 entries added through
// the store or by an instance as the fault phase begins, some changed in it (now
// and then by two instances racing on one revision) and some removed, the
// instances running a slot of a removed entry crashing just after, now and then
// ([Plan.AddHolderCrashes]). Their entry calls go through the faults too, and
// their watch cannot begin or is cut while an instance is flaky or dead; a store that is no backend.EntryStore runs those
// jobs every Interval without entries. An entry's runs are judged like a job's,
// per run name (backend.EntryRunName) and slot. Some jobs have a run limit ([Job.MixLimit]), and some a retry policy ([Plan.AddRetries]), and their
// handlers fail some attempts (an error, one marked NoRetry, a timeout); the
// faulty store view forwards Retry with the faults of Finish and Release, and a
// store that is no backend.Retrier runs the jobs without retries. A quiet phase
// follows in which every slot has a healthy instance, then every instance is
// stopped. [Harness.Run] carries the plan out; [Harness.Check] judges the record
// against the lease rules (the documentation of backend.RunStore and
// backend.Retrier, scheduler.RetryPolicy, backend.EntryStore; docs/concepts.md).
// Rules 1–9 hold per run name: a job's, or each of its entries' apart.
//
//	1   at most one live handler per (job, slot) at any instant, retries included
//	1b  a job (an entry) with OverlapSkip, OverlapCancelOther or a buffer policy
//	    never has two live handlers at once (any slots)
//	2   Exact: a new attempt is granted only after the previous attempt's lease
//	    ended in the store (expired, released, finished, or ended by a Retry),
//	    and a holder's handler returned before its lease ended.
//	    Bounded: a takeover is answered only after the previous holder's handler
//	    returned, and not before the previous lease could have ended in the store
//	3   a slot's fate is one of run, skipped, late — never two, and it never runs
//	    after it was recorded skipped or late
//	3b  a slot is stored skipped only while another slot of the job was busy (a
//	    tie that skips both slots fails it)
//	3c  no scheduled handler of a job, nor of its entries, starts while a pause
//	    of the job is in force on every clock, takeovers and retries included
//	4   per slot in History one final outcome: the last attempt's record is the
//	    only terminal one (ok, error, timeout, skipped, late) but for failures
//	    whose retry was stored; every earlier attempt's record is such a failure
//	    or an attempt that was lost (lost, superseded, cancelled, paused,
//	    running); no attempt is granted or starts after the slot's ok; every slot
//	    due in the quiet phase ends with a terminal record (an entry's: the
//	    slots of its last version from 3s after its last write, none once it
//	    was removed; a declared job has none of its own); and no unfinished run
//	    is left in the run store's Active list at the end, but for a retry whose
//	    window was still open at the final Stop: a removed entry's run too, which
//	    nobody follows, is ended (cancelled, not run again) by an instance that
//	    saw the removal or started after it, once its holder's lease ended
//	4b  a write that completes a slot and failed for its caller is written again
//	    while its instance lives
//	5   fences and attempt numbers strictly grow per slot across attempts
//	6   Stop cancels handlers (scheduled and RunNow) when its context ends, returns
//	    soon after, and no handler of the instance runs after Stop returned
//	7   a retry is stored only after a retryable failure (an error not marked
//	    NoRetry, or a timeout) of an attempt below the policy's Attempts; the
//	    window it asks for starts no earlier than the backoff after the handler
//	    returned and ends before the job's next slot (an entry's: the latest of
//	    its versions') by the asking instance's clock, counted from its call; the next attempt is that retry (answered
//	    Retried), granted within the window the store keeps, so never before the
//	    stored retry time and never after the next slot but for the time the
//	    Retry took to reach the store; no other attempt is answered Retried. In
//	    the quiet phase a retryable failure whose retry fits before the next slot
//	    stores it and the retry is granted, so that a slot whose handler fails
//	    every attempt runs Attempts attempts (jobs that forbid overlap, changed
//	    entries, and slots a pause reaches, are left out)
//	8   jobs that buffer (OverlapBufferOne, OverlapBufferAll): a slot answered
//	    buffered is never recorded late or skipped (8a); buffered slots are
//	    first granted oldest first (8b); a slot is stored skipped only while
//	    another was buffered (8c, in place of 3b); and a buffered slot left at
//	    the end (4) is excused only while its buffer was still draining
//	9   jobs with a run limit (WithMaxRuns, [Plan] jobs' MaxRuns): the slots
//	    counted fleet-wide (first won or buffered by a counting claim) are at
//	    most MaxRuns (9a); no slot is answered limit before MaxRuns were
//	    counted, but for slots whose counting claim failed or was answered late
//	    (9b: a store may count a slot it did not run); once the limit is
//	    reached, slots due in the quiet phase may have no record (4: every loop
//	    ended). An entry counts apart from its job and from its other entries
//	10  schedule entries:
//	10a of the changes based on one revision of an entry the store applies at
//	    most one; of two instances changing one revision at once, when both
//	    calls reached the store, exactly one is applied and the other answered
//	    ErrEntryConflict; a caller is told what the store answered (nil, or an
//	    error matching ErrEntryConflict) unless the answer was lost
//	10b an instance's first claim of an entry's slot (not a takeover of a run
//	    stored before) is of a slot of a version of the entry its watch had
//	    delivered: on its interval, after its Updated, and due by the
//	    instance's clock no later than when its watch delivered the version's
//	    replacement or removal; an entry's handler runs with the payload of a
//	    version its instance followed
//	10c an instance whose entry watch is up (its last reading ended Synced and
//	    the watch did not end meanwhile) sees an entry's change or removal
//	    within World.EntrySlack (a second by default) of the store applying
//	    it. With 10b: no slot of a removed entry due more than EntrySlack plus
//	    the instance's clock offset after the removal was stored is claimed
//	    first, but by an instance whose watch was down, which sees the removal
//	    when it reads the entries again. A run in progress, its takeovers and
//	    retries go on: 10b does not judge them
//
// [Timing] says what the record can know. Under synctest with a store in memory a
// call is applied at the instant the record sees it, so a lease's end in the store
// is known exactly ([Exact]). Over a network a call is applied somewhere between its
// send and its answer, so the record keeps bounds and the checks allow for them
// ([Bounded]). Sequence numbers order what the record saw, also at one instant.
//
// Everything random is drawn from the seed: the plan with math/rand/v2, and what is
// decided inside goroutines (a call's fault, a handler's length) with [Mix] of the
// seed and the call, so that a seed draws the same whatever the goroutines' order.
//
// A minimal use, in a test:
//
//	seeds, err := modelcheck.SeedsFromEnv("ANARCHON_MODEL_", 500)
//	world := &modelcheck.World{Name: "model check", Replay: "…", Timing: modelcheck.Exact, …}
//	sum := modelcheck.NewSummary(world, seeds)
//	for _, seed := range seeds.List {
//		b := memory.New()
//		h := modelcheck.New(world, newPlan(seed), func(string) (modelcheck.Store, error) { return b, nil })
//		if err := h.Run(); err != nil { … }
//		sum.Seed(t, h, h.Check(ctx, b, b.Runs()))
//	}
//	sum.Report(t, time.Since(start))
package modelcheck
