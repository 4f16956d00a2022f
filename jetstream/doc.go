// Package jetstream is an anarchon backend on NATS JetStream: claims are
// de-duplicated publishes, and every record of a job (claims, manual runs, results)
// lives in that job's own stream, which any replica reads back as history.
//
//	nc, _ := nats.Connect(url)
//	js, _ := natsjs.New(nc)
//	backend, err := jetstream.New(js, jetstream.WithReplicas(3))
//	sched, err := scheduler.New(scheduler.Config{Backend: backend})
//
// # Layout
//
// Each job has one stream, <stream prefix>_<job token> (default prefix "ANARCHON"),
// listening on <subject prefix>.<job token>.> (default prefix "anarchon").
//
//	anarchon.<token>.claim.<slot unix ms>  scheduled claims; Nats-Msg-Id = <token>:<slot ms>;
//	                                       Nats-TTL >= the duplicate window; also, made
//	                                       WithMixedFleet, the first attempt of a won lease
//	                                       (LeasedBackend.RecordClaim), marked "leased"
//	anarchon.<token>.result                results; the newest history-size kept
//	                                       (MaxMsgsPerSubject), Nats-TTL = history TTL if set;
//	                                       WriteRecords' and RecordOnce's with Nats-Msg-Id =
//	                                       <token>:<slot ms>:<run token>:result
//	anarchon.<token>.manual                RunNow runs, no de-duplication, bounded like results
//	anarchon.<token>.lease                 takeovers of leased runs (attempt > 1), and a first
//	                                       attempt that found another lease's claim; bounded
//	                                       like results; Nats-Msg-Id = <token>:<slot ms>:<run token>
//
// The runs of a schedule entry (backend.EntryRunName(job, id)) are recorded in
// their job's stream, on the same four subjects under the entry's own token.
//
//	anarchon.<token>.entry.<entry token>.claim.<slot unix ms>   Nats-Msg-Id = <token>.entry.<entry token>:<slot ms>
//	anarchon.<token>.entry.<entry token>.result                  (and .manual, .lease)
//
// The entry token is the ID escaped as job names are, never cut. So an entry has
// no stream of its own. Its claims are stored for its job's duplicate window. Its
// history is bounded by the job's history size, per entry (per subject). History
// of the job or of an entry reads only its own records. The entries
// themselves are the run store's (LeasedBackend implements backend.EntryStore
// when its run store does: kvlease.Store keeps them in its bucket); a plain
// Backend stores none, but records an entry's runs all the same. A release that
// predates entries reads an entry's record in its job's stream as foreign
// (skipped, logged, counted in SkippedRecords). Pauses and calendars are the
// run store's too (a kvlease store keeps them in its bucket); a plain Backend
// stores neither.
//
// Instances with and without leases share a job only during a rolling upgrade,
// made WithMixedFleet. A lease winner's RecordClaim then publishes the claim with
// the plain Claim's id before its handler. A plain claim stored first wins: the
// record fails with backend.ErrClaimedElsewhere, and the slot is not run again.
// A plain Claim that finds a leased claim loses. Without the option a won lease
// writes nothing before the handler. The job stream's metadata
// ("anarchon.claims") holds the claim mode of the last instance that prepared it.
// PrepareJob refuses a mode that would run slots twice here (ErrMixedFleet).
// docs/backends.md ("Mixed fleets") gives the steps.
//
// The job token is the job name with every byte outside [a-z0-9-] escaped as _xx.
// So any name (dots, spaces, wildcards, slashes, upper case, unicode) is one valid
// token. A name whose token would make the stream name longer than nats-server's
// 255 bytes is cut and ends with "_h" and a SHA-256 hash. The real name is in the
// stream's metadata ("anarchon.job") and in every record, which are JSON with a
// version field.
//
// # Why one stream per job
//
// A stream's duplicate window, per-subject limit and replicas apply to the whole
// stream. So a stream per job is what lets each job have its own dedupe window and
// history size. It also keeps one job's traffic from evicting another's history.
// The price is paid on the server, in memory and goroutines per stream. One shared
// stream with a subject per job would cost far less. Per-job streams suit the usual
// tens to hundreds of jobs. For thousands, size the server for them (the benchmark's
// stream-layout section, docs/benchmarks.md, measures it).
//
// # Guarantees and their limits
//
//   - A slot is won by exactly one token while its claim is remembered: the stream's
//     duplicate window (WindowFor). Claims are stored for at least that long, so the
//     server rebuilds its duplicate table after a restart (file storage only; memory
//     storage forgets on restart).
//   - Repeating a claim with the same token answers true again (the stored claim is
//     read from the stream leader and its token compared).
//   - Reads that decide ownership never use direct gets, which a lagging follower
//     of a replicated stream may answer. History and LastRuns do: job streams
//     answer direct gets (AllowDirect). A history read is one stream state
//     request and one or two batched direct gets. On R3 it may be a few
//     milliseconds behind the leader, which a history may be.
//   - History records older than a claim's lifetime (the window, or the job's
//     timeout if longer) are built from the result alone, without ClaimedAt; a
//     claimed run that never stored a result disappears from History then.
//
// # Guides
//
// [Backends] lists what the backend creates and the settings of a production server;
// [Benchmarks] is one run of the benchmark command.
//
// [Backends]: https://github.com/anarchon/anarchon/blob/main/docs/backends.md#nats-jetstream-and-kvlease
// [Benchmarks]: https://github.com/anarchon/anarchon/blob/main/docs/benchmarks.md
package jetstream
