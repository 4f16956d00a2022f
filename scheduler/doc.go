// Package scheduler runs scheduled jobs in a replicated service. Every replica
// declares the same jobs, and each scheduled slot of a job runs on exactly one
// replica. A backup takes over a run whose replica died, and every replica can
// read what ran, where and how it ended.
//
// The replicas agree through a backend, a store they share: package jetstream (NATS
// JetStream, with leases from package kvlease), the sqlbackend module (PostgreSQL,
// SQLite) or package backend/memory (one process, tests). This package holds the
// scheduler and the schedules. It imports no NATS, SQL or Prometheus package.
// Prometheus metrics are in package metrics; what a backend implements is in
// package backend.
//
// # A minimal program
//
// One scheduler per process, jobs registered before Start, a graceful Stop:
//
//	b := memory.New() // one process only; see "A real fleet" below
//	s, err := scheduler.New(scheduler.Config{Backend: b, Instance: "replica-1"})
//	if err != nil {
//		return err
//	}
//	err = s.Every("reconcile", 10*time.Second, func(ctx context.Context, run scheduler.Run) error {
//		// ctx is cancelled on timeout, on lease loss and on a hard stop;
//		// context.Cause(ctx) says which.
//		return reconcile(ctx, run.Token, run.Fence) // the attempt's fencing token
//	}, scheduler.WithJitter(time.Second), scheduler.WithTimeout(time.Minute))
//	if err != nil {
//		return err // bad names, intervals and options fail here, not at run time
//	}
//	athens, _ := time.LoadLocation("Europe/Athens")
//	err = s.Cron("report", "0 9 * * MON-FRI", sendReport, scheduler.WithLocation(athens))
//	if err != nil {
//		return err
//	}
//	if err := s.Start(ctx); err != nil {
//		return err
//	}
//	defer s.Stop(context.WithoutCancel(ctx)) // give it a deadline to bound the wait
//
// RunNow runs a job at once on this instance: a manual run, recorded as such.
// History reads a job's recent runs from the backend, as every replica sees them.
// A job's schedule entries (AddEntry, docs/entries.md) are stored schedules of the
// job: RunEntryNow runs one at once, Backfill with BackfillEntry or
// BackfillAllEntries runs their past slots, and EntriesSummary sums them up.
//
// # A real fleet
//
// Replicas in separate processes share a store on a NATS JetStream server. The
// jetstream backend keeps claims and history in one stream per job; a kvlease
// store keeps the leases. Only the backend changes:
//
//	nc, err := nats.Connect(url)                  // or connect.Context("prod")
//	js, err := natsjs.New(nc)                     // github.com/nats-io/nats.go/jetstream
//	runs, err := kvlease.New(js, kvlease.WithReplicas(3))
//	defer runs.Close()
//	b, err := jetstream.NewLeased(js, runs, jetstream.WithReplicas(3))
//	s, err := scheduler.New(scheduler.Config{Backend: b})
//
// jetstream.New(js) alone is a backend without leases. Each slot is still claimed
// once, but there are no backups, and WithOverlap and WithCatchUp are refused at
// registration. Neither backend closes the connection it was given.
//
// # Guarantees
//
//   - Each slot runs once per fleet. For one (job, slot) the backend lets exactly
//     one replica win the claim, however many try and however often they retry.
//   - A dead holder's run is taken over. With leases, the replicas that lost the
//     claim stand by as backups. One of them runs the slot (attempt 2, a larger
//     Run.Fence) once the holder's lease expires or Stop hands it over.
//   - Every decision is stored before anyone acts on it. Run, skipped, late or
//     paused is written to the store first; a replica that comes later follows it.
//   - Every attempt ends with one terminal record in History. A run store that is
//     a backend.Settler stores it with the state that ends the attempt.
//
// What cannot be promised: a handler that ignores its context may still be
// working while a backup runs the same slot. So may a process paused for longer
// than its lease. Pass Run.Token and Run.Fence to the systems a handler writes to,
// and make those writes conditional on them (a fencing token).
//
// # Slots
//
// A job's slots are pure values computed from its Schedule, the same on every
// replica, at millisecond precision. Every slots are multiples of the interval
// since the Unix epoch (IntervalSchedule). Cron slots come from the expression in
// its zone: UTC unless WithLocation or a CRON_TZ= prefix says otherwise, never the
// host's zone. CronSchedule gives the daylight saving rules. For each slot a
// replica waits a random jitter (WithJitter) and claims it; the winner runs the
// handler. A slot nobody started by its maximum lateness (WithMaxLate) is late.
// Invalid names, intervals, expressions and options are errors from Every and
// Cron, matched with errors.Is (ErrInvalidJobName, ErrInvalidSchedule,
// ErrInvalidOption, ErrWindowTooShort, ErrJobExists, ...).
//
// # Leases
//
// A backend with leases (backend.LeaseBackend) returns a run store, and the
// scheduler claims every slot through it. The winner holds a lease (WithLease)
// that it renews while its handler runs. The handler's context is cancelled, with
// cause ErrLeaseLost, as soon as the lease is lost. Leases make possible backups,
// the overlap policies (WithOverlap), catch-up (WithCatchUp), stored retries,
// run limits, Backfill and hand-over at Stop. memory.Backend has leases; so do
// sqlbackend and jetstream.NewLeased with a kvlease store.
//
// # One loop
//
// Every slot passes one loop, whatever asked for it: the schedule, catch-up, an
// adoption at Start, a stored retry, Backfill, RunNow or a schedule entry. The
// loop claims the slot and stands by while the store says to wait. It runs a won
// attempt under its lease and ends it with one settle call. The run store decides
// each step (package backend/machine), by its own clock; the instance follows its
// answers. A store that does not answer is asked again for as long as it
// remembers the slot, counted from its last answer.
//
// # Writing a backend
//
// Package backend holds the contract a backend implements, its optional
// capabilities and the records it stores. Package backend/machine decides every
// run store's transitions. The conformance suite is backend/backendtest, and
// backend/memory is the reference reading.
//
// # Events, metrics and logs
//
// Config.OnEvent receives every Event synchronously: scheduled, claimed, lost,
// late, skipped, started, finished, takeover, standby, lease lost, backend error,
// and more. The metrics package turns them into Prometheus metrics:
//
//	m, err := metrics.Wire(prometheus.DefaultRegisterer)
//	s, err := scheduler.New(scheduler.Config{Backend: b, OnEvent: m.OnEvent})
//
// Chain feeds several hooks, for example metrics and LogEvents (a slog line per run
// started, finished, skipped or late). Config.Logger receives the scheduler's own
// logs; it is silent by default.
//
// # Time and tests
//
// Config.Clock is the scheduler's source of time (SystemClock by default).
// memory.NewWithClock gives the memory backend the same clock. So a test can run
// hours of schedule without sleeping, with a clock of its own or under
// testing/synctest. A schedule's Next is a pure function and needs neither.
//
// # Guides
//
// [Concepts] explains slots, claims, leases, a slot's life, catch-up, pauses and
// manual runs at length. [Guarantees] says what is promised and what cannot be.
// [Writing your own backend] gives the contracts with a complete example.
//
// [Concepts]: https://github.com/anarchon/anarchon/blob/main/docs/concepts.md
// [Guarantees]: https://github.com/anarchon/anarchon/blob/main/docs/guarantees.md
// [Writing your own backend]: https://github.com/anarchon/anarchon/blob/main/docs/backends.md#writing-your-own-backend
package scheduler
