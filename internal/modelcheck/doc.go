// Package modelcheck is the harness of the randomised model checks of the lease
// path. TestModelCheck in the scheduler package runs a memory.Backend under
// testing/synctest: 500 seeds in virtual time. TestModelCheckKV (integration)
// and TestModelCheckSQL (sqlbackend) run real stores in real time. They differ
// in the world they build and in what their clocks let them know. The rest
// lives here once: the plan of a seed, the driver, each instance's faulty view
// of the stores, the record, the invariants and the reports.
//
// # The plan
//
// A seed is a [Plan]: a few instance slots, 1–3 Every jobs with leases, a fault
// phase, then a quiet phase. Each job draws an overlap policy (allow, skip,
// cancel-other, buffer-one, buffer-all), a run limit ([Job.MixLimit]), a retry
// policy whose handlers fail some attempts ([Plan.AddRetries]) and a catch-up
// policy. In the fault phase instances crash, hold their heartbeats, stop,
// restart and call RunNow. Their store calls are lost, answered late, or
// applied with their answer lost. Each plan step draws from a stream of its
// own, so that adding one leaves the rest of a seed's plan as it was:
//
//   - [Plan.AddEdges]: job pauses, and instances started at one instant.
//   - [Plan.AddEntries]: jobs run through schedule entries, added, changed
//     (now and then by two instances racing on one revision) and removed.
//   - [Plan.AddHolderCrashes]: the holders of a removed entry's slot crash.
//   - [Plan.AddReadds]: an entry removed and added again with its ID while
//     a slot runs, its holders crashed now and then.
//   - [Plan.AddOutages]: the store restarts; every call fails, every watch
//     breaks.
//   - [Plan.AddSkew]: clocks skewed up to half the allowance.
//   - [Plan.AddBackfills]: backfills of past slots, now and then reruns.
//   - [Plan.AddRedeploys]: a rolling redeploy that changes a job's lease,
//     max lateness or overlap policy while the old runs are remembered.
//   - [Plan.AddFreezes]: a process frozen past its lease (freeze.go).
//
// Each instance start also registers one absurd option value ([AbsurdValues]).
// A quiet phase follows in which every slot has a healthy instance. Then every
// instance is stopped.
//
// # The faulty view
//
// Each instance sees the stores through a view that puts the faults in front
// of every call: Claim, Heartbeat, Settle, Finish, Release, Retry, Active,
// the entry calls and the watches. The view has the capabilities the store
// has: a Settler, a Retrier, a ClaimRecorder only when the store is one. The
// rest (ActiveLister, EntryRunLister, LeaseWatcher and the policy capabilities)
// are the store's, or what the scheduler does without them. A Settle is
// recorded like the call it replaces: a finish, a hand-over (a release) or a
// retry. An entry watch is cut (it fails), or reconnects: it misses changes,
// then says Resync, delivers what differs and Synced. A store that writes an
// attempt's end in two steps crashes between them only through its own tests.
//
// # The invariants
//
// [Harness.Run] carries the plan out; [Harness.Check] judges the record. The
// rules are those of backend.RunStore, backend.Settler, backend.Retrier,
// scheduler.RetryPolicy, backend.EntryStore and docs/concepts.md. Rules 1–9
// hold per run name: a job's, or each of its entries' apart.
//
//	1   at most one live handler per (job, slot) at any instant, retries included
//	1b  a job (an entry) that runs one slot at a time (or n: WithConcurrency)
//	    never has more live handlers at once; the later one's release decides
//	1c  a manual run is never granted again
//	1d  a run a later slot asked to end (cancel-other) is never granted
//	    again, but reopened by a backfill
//	2   Exact: an attempt is granted only after the previous lease ended in
//	    the store; a holder's handler returns before its lease ends.
//	    Bounded: a takeover is answered only after the previous handler
//	    returned, and not before the previous lease could end in the store.
//	    A frozen handler that ends as its process thaws ended at the freeze.
//	3   a slot runs, or is recorded skipped, late, missed or limit, never two of these;
//	    a backfill's run of such a slot is no second fate
//	3b  a slot is stored skipped only while another slot of the job was busy
//	    (n others, for a job that runs n at once)
//	3c  no scheduled handler starts while a pause of its job is in force
//	4   every attempt the store granted or decided has exactly one record in
//	    History, and every record is such an attempt's (Settler stores);
//	    per slot the last attempt's record holds the outcome; an earlier one
//	    is a retried failure, an attempt that did not end on its own, or one
//	    a backfill reopened; nothing starts after the ok; a slot the store
//	    finished ends with an outcome, cancelled or paused (lost only for a
//	    run that may not be taken over); every slot due in the quiet phase
//	    ends so; no run is left unfinished at the end, but an open retry or
//	    a draining buffer. No excuse for a dead holder, a removed entry, or
//	    a cancel-other run whose holder was killed.
//	4b  a write that ends an attempt and failed is written again while its
//	    instance lives
//	4c  a slot due in the quiet phase is not recorded late (but for
//	    cancel-other), nor paused while no pause of its job was in force
//	5   fences and attempt numbers strictly grow per slot
//	6   Stop cancels handlers when its context ends and returns soon after
//	7   a retry is stored only after a retryable failure below the policy's
//	    Attempts, no earlier than its backoff, and before the next slot while
//	    that is ahead (a backfill's by the policy alone); the next attempt is
//	    that retry, granted in its window; in the quiet phase a retry that
//	    fits is stored and granted
//	8   buffer policies: a buffered slot is never late or skipped (8a), is
//	    first granted oldest first (8b), a slot is skipped only while another
//	    was buffered (8c); no more slots are buffered at once than the cap
//	    (8d); a buffered slot left at the end only while draining
//	9   run limits: at most MaxRuns slots counted (9a), no limit answer before
//	    MaxRuns were counted but for claims that failed (9b)
//	10  schedule entries: one change applied per revision (10a); a slot is
//	    claimed first only on a version its instance followed (10b); a watch
//	    that is up sees a change within EntrySlack (10c); every attempt of a
//	    slot is of one incarnation, the one it was buffered for (10d); no
//	    takeover by an instance that saw
//	    the entry removed (10e); no slot claimed first while the view may be
//	    stale, from a watch's end or Resync to Synced (10f)
//	11  an absurd option value is refused at registration
//	12  deadlines: at most one deadline record per slot (12a), told at most
//	    once, by a replica that stored it (12b); a quiet slot is judged past
//	    its deadline exactly when it did not end ok by it (12c)
//
// [Timing] says what the record can know. Under synctest with a store in
// memory a call is applied at the instant the record sees it ([Exact]). Over a
// network it is applied between its send and its answer ([Bounded]).
// Sequence numbers order what the record saw, also at one instant.
//
// Everything random is drawn from the seed: the plan with math/rand/v2, and
// what is decided inside goroutines with [Mix] of the seed and the call. The
// goroutines' order still varies: a failing seed may need a few replays.
//
// The summary counts the matrix the seeds met: every policy against every
// fault, and every pair of policies (coverage.go). TestMachineMutants breaks
// each arrow of backend/machine in turn and shows the checks catch it.
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
