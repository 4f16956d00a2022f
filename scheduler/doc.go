// Package scheduler runs scheduled jobs in a replicated service: every replica
// declares the same jobs, each scheduled slot of a job runs on exactly one replica,
// a backup takes over a run whose replica died, and every replica can read what
// ran, where and how it ended.
//
// The replicas agree through a backend, a store they share: package jetstream (NATS
// JetStream, with leases from package kvlease), the sqlbackend module (PostgreSQL,
// SQLite) or package backend/memory (one process, tests). This package holds the
// scheduler and the schedules and imports no NATS, SQL or Prometheus package;
// Prometheus metrics are in package metrics, and what a backend implements is in
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
// RunNow runs a job at once on this instance (a manual run, recorded as such), and
// History reads a job's recent runs from the backend, as every replica sees them.
// A job's schedule entries (AddEntry, docs/entries.md) are stored schedules of the
// job: RunEntryNow runs one at once, Backfill with BackfillEntry or
// BackfillAllEntries runs their past slots, and EntriesSummary sums them up.
//
// # A real fleet
//
// Replicas in separate processes share a store on a NATS JetStream server: the
// jetstream backend keeps claims and history in one stream per job, and a kvlease
// store keeps the leases. Only the backend changes:
//
//	nc, err := nats.Connect(url)                  // or connect.Context("prod")
//	js, err := natsjs.New(nc)                     // github.com/nats-io/nats.go/jetstream
//	runs, err := kvlease.New(js, kvlease.WithReplicas(3))
//	defer runs.Close()
//	b, err := jetstream.NewLeased(js, runs, jetstream.WithReplicas(3))
//	s, err := scheduler.New(scheduler.Config{Backend: b})
//
// jetstream.New(js) alone is a backend without leases: each slot is still claimed
// once, but there are no backups, and WithOverlap and WithCatchUp are refused at
// registration. Neither backend closes the connection it was given.
//
// # Guarantees
//
//   - Each slot runs once per fleet: for one (job, slot) the backend lets exactly
//     one replica win the claim, however many try and however often they retry.
//   - A dead holder's run is taken over: with leases, the replicas that lost the
//     claim stand by as backups, and one of them runs the slot (attempt 2, a larger
//     Run.Fence) once the holder's lease expires or Stop releases it.
//   - Every decision is stored before anyone acts on it: run, skipped (overlap
//     forbidden) or late (nobody started it before its deadline) is written to the
//     store first, and a replica that comes later follows the stored decision.
//
// What cannot be promised: a handler that ignores its context, or a process paused
// for longer than its lease, may still be working while a backup runs the same
// slot. Pass Run.Token and Run.Fence to the systems a handler writes to and make
// those writes conditional on them (a fencing token).
//
// # Slots
//
// A job's slots are pure values computed from its Schedule, the same on every
// replica, at millisecond precision: Every slots are multiples of the interval
// since the Unix epoch (IntervalSchedule); Cron slots come from the expression in
// its zone, UTC unless WithLocation or a CRON_TZ= prefix says otherwise, never the
// host's zone (CronSchedule, which also gives the daylight saving rules). For each
// slot a replica waits a random jitter (WithJitter), gives up if the slot is past
// its maximum lateness (WithMaxLate; reported late), claims it, and the winner runs
// the handler and stores the result. Invalid names, intervals, expressions and
// options are errors from Every and Cron, matched with errors.Is (ErrInvalidJobName,
// ErrInvalidSchedule, ErrInvalidOption, ErrWindowTooShort, ErrJobExists, ...).
//
// # Leases
//
// A backend with leases (backend.LeaseBackend) returns a run store, and the scheduler then
// claims every slot through it: the winner holds a lease (WithLease) that it renews
// while its handler runs, and the handler's context is cancelled, with cause
// ErrLeaseLost, as soon as the lease is lost. Leases make possible backups,
// WithOverlap(OverlapSkip) (a slot is skipped while another slot of the job still
// runs), WithCatchUp (slots missed while no replica was up run at Start) and
// hand-over at Stop. memory.Backend has leases; so does jetstream.NewLeased with a
// kvlease store.
//
// # Writing a backend
//
// The contract a backend implements, its optional capabilities and the records it
// stores are in package backend, with the conformance suite (backend/backendtest)
// and the reference reading in memory (backend/memory).
//
// # Events, metrics and logs
//
// Config.OnEvent receives every Event (scheduled, claimed, lost, late, skipped,
// started, finished, takeover, standby, lease lost, backend error) synchronously;
// the metrics package turns them into Prometheus metrics:
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
// Config.Clock is the scheduler's source of time (SystemClock by default), and
// memory.NewWithClock gives the memory backend the same clock, so a test can
// run hours of schedule without sleeping, with a clock of its own or under
// testing/synctest. A schedule's Next is a pure function and needs neither.
//
// # Guides
//
// [Concepts] explains slots, claims, leases, stored decisions, catch-up, pauses and
// manual runs at length; [Guarantees] says what is promised and what cannot be; and
// [Writing your own backend] gives the contracts with a complete example.
//
// [Concepts]: https://github.com/anarchon/anarchon/blob/main/docs/concepts.md
// [Guarantees]: https://github.com/anarchon/anarchon/blob/main/docs/guarantees.md
// [Writing your own backend]: https://github.com/anarchon/anarchon/blob/main/docs/backends.md#writing-your-own-backend
package scheduler
