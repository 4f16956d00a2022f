// Package kvlease is a backend.RunStore and backend.Settler on one NATS
// JetStream key-value bucket. It has every optional capability of a run store:
// backups that take over when a holder dies, retries any instance may run, the
// overlap policies (skip, cancel the other, buffer), run limits, catch-up and
// hand-over. Package backend/machine makes every decision; this package reads
// a slot, asks the machine, and writes what it decides by compare-and-set. The
// NATS server judges every lease; instance clocks are never compared.
//
//	js, _ := jetstream.New(nc)
//	runs, err := kvlease.New(js, kvlease.WithReplicas(3))
//	if err != nil { ... }
//	if err := runs.Init(ctx); err != nil { ... } // creates or updates the bucket
//	defer runs.Close()
//	b, err := anarchonjs.NewLeased(js, runs) // its history takes runs' records
//
// # Bucket
//
// One bucket (DefaultBucket), the stream KV_<bucket>: one message per key,
// per-message TTLs, expiry markers kept a second. A replicated bucket answers no
// direct gets, so every read comes from the stream leader; an R1 bucket reads
// several keys in one direct get. Its layout is 2 (stream metadata); Init
// refuses a bucket of layout 1 that holds leases or run records
// (ErrOlderLayout).
//
// # Keys
//
// <run> is a run name in unpadded base64url (a job's one token, an entry's two),
// <slot> the slot's Unix milliseconds. Values are JSON with a version "v".
//
//	lease.<run>.<slot>  the lease: {token, instance, lease_ms, cancel}. TTL: the lease.
//	run.<run>.<slot>    the run record: {job, run: machine.Run, records, keep}.
//	                    TTL: until the machine forgets the run; none while
//	                    buffered or while records wait to be written.
//	job.<run>           the job key: {count, runs: [{s: slot, t: token, p: phase}]}.
//	                    No TTL.
//	entry.<job>.<id>    a schedule entry (backend.EntryStore). No TTL.
//	pause.<job>         a pause (backend.Pauser).
//	cal.<name>          a calendar (backend.CalendarStore), its name one token:
//	                    {v, name, dates, ...}. No TTL; its revision is the
//	                    calendar's Revision.
//	member.<instance>   a live instance (backend.Membership), its name one token:
//	                    {v, instance, group}. TTL: the beat's; a beat is a
//	                    plain put, Leave a purge.
//
// # Rules
//
//  1. Every write is a compare-and-set on the key's last revision, carrying its
//     TTL. A lost race reads again and asks the machine again.
//  2. A lease is live exactly while its key holds a value; the server expires it.
//  3. A slot's machine.Run is read in one place (view.runOf). It is the run
//     record, and a live lease key of its token makes its lease live. A live
//     lease key of another token is a claim between its writes. It is running
//     to others, and to its own token the state before it. With no record, a
//     slot the job key lists buffered is buffered.
//  4. The machine's now is the server's time, estimated from its readings,
//     read again when a deadline or window is too close to call.
//  5. A new lease writes its lease key, then the job key (when read), then the
//     run record. No run record names a token whose lease key was not written.
//  6. A claim reads the job key when the machine needs the job's other runs or
//     its count (a policy that runs one slot at a time, a run limit, a buffered
//     slot). It writes it when the decision starts a lease, buffers a slot or
//     counts. Of two decisions made on one reading of it, one is stored.
//  7. Buffering a slot writes the job key, then the run record: the job key is
//     the decision.
//  8. The job key lists a superset of the unfinished slots that read it. The
//     slots' own keys are their truth; a listed slot that holds nothing is
//     dropped by the next write of the job key.
//  9. A cancel request is written into the run record, then into the live lease
//     key; a claim of the asking slot writes a request found in the record alone.
//  10. A decision's records are stored in the run record with its state, then
//     written to the RecordWriter (UseRecords), then cleared without waiting.
//     Whoever reads the run record next and finds records writes them first.
//  11. Settle returns once its records are written; its lease key is purged
//     after them, without waiting (a hand-over waits).
//
// # Crash points
//
// A call that dies between two writes leaves:
//
//   - lease key, not the job key: the slot running to others until the key
//     expires, then decided as before the claim; nothing listed.
//   - job key, not the run record (a new lease): the job held while the lease
//     key lives; then the slot decided as before the claim, the count one high.
//   - job key, not the run record (buffered): the slot buffered.
//   - run record with a cancel request, not the lease key: the holder told at
//     the asking slot's next claim.
//   - run record with its records, not the history: the next reader writes them.
//   - history, not the cleared run record: written again, stored once
//     (jetstream's Nats-Msg-Id).
//   - run record, not the lease key's purge: the lease expires by its TTL.
//
// Nothing runs twice (rule 5), no count errs low (rules 6 and 7), nothing stays
// unfinished (a lease key expires; records are written by the next reader).
//
// # Requests
//
// Round trips to one server, as TestRoundTrips counts them:
//
//   - A first claim won: 2 (written before reading, chained in one round trip).
//   - A claim lost to a running holder: 2.
//   - A heartbeat: 1.
//   - Settle: 2 (the run record and the record).
//   - A claim after a finish the shared watcher saw: 0.
//   - A retry claimed: 5.
//   - A claim under a buffer policy: 4.
//
// # Watching
//
// All watches of a store share one watcher of the lease keys, started by the
// first WatchRun and stopped after 10 s with no watch and no read waiting on it
// (a store whose claims rarely stand by, under scheduler.Config.Turns, then
// receives no lease update of the bucket). WatchRun closes
// its channel when a claim could decide otherwise: the lease expires, is purged,
// changes holder or carries a cancel request; a buffered slot's on any write of
// its lease key. WatchEntries reads the entries again after a reconnect
// (backend.EntryChange.Resync), WatchCalendars and WatchMembers watch again and
// deliver the set if it changed.
//
// docs/backends.md gives the reasoning and the production settings.
package kvlease
