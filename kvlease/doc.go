// Package kvlease is a backend.RunStore (and backend.LeaseWatcher,
// backend.Retrier, backend.OverlapCanceller and backend.OverlapBufferer) on one
// NATS JetStream key-value bucket: the leases that give every scheduled run one
// holder at a time, backups that take over when the holder dies, retries any
// instance may run, overlap protection (skip, cancel the other, buffer), catch-up
// and hand-over. The NATS server judges every lease; instance clocks are never
// compared.
//
//	js, _ := jetstream.New(nc)
//	runs, err := kvlease.New(js, kvlease.WithReplicas(3))
//	if err != nil { ... }
//	if err := runs.Init(ctx); err != nil { ... } // creates or updates the bucket
//	defer runs.Close()
//
// # Bucket
//
// One bucket (DefaultBucket, "anarchon_leases"), created by Init as the stream
// KV_<bucket> with one message per key, per-message TTLs (AllowMsgTTL) and expiry
// markers that live one second (SubjectDeleteMarkerTTL). A replicated bucket has no
// direct gets, so every read is answered by the stream leader and never lags an
// acknowledged write (followers answering direct gets can); an R1 bucket keeps
// them, its only replica being the leader. It needs nats-server 2.11 or later; on
// 2.12 or later Init also turns on atomic batch publishes (AllowAtomicPublish),
// also on a bucket an older release created, for stores made WithAtomicBatches.
// Against an older server such a store writes one key at a time, as every store
// does by default.
//
// # Keys
//
// Each run (job, slot) has two keys, a job under a buffer overlap policy one
// more, and a job with a run limit (RunClaim.MaxRuns) one more:
//
//	lease.<job>.<slot>   the lease: {token, instance, lease_ms, cancel_slot_ms,
//	                     cancel_instance, cancel_token}; TTL = the lease
//	run.<job>.<slot>     the run record: {job, slot_ms, token, instance, attempt,
//	                     fence, previous, previous_token, reopened, retried,
//	                     buffer, last (the limit's last counted slot), state, status, lease_ms, keep_ms,
//	                     retry_delay_ms, retry_within_ms, cancel_slot_ms,
//	                     cancel_instance, cancel_token}; TTL = keep (at least
//	                     three leases while running; delay + within + keep in
//	                     state retry; none in state buffered)
//	buffer.<job>         the job's buffered slots and stored retries:
//	                     {slots: [{slot_ms, token, instance}] oldest first,
//	                     retries: [{slot_ms, token}]}; no TTL, purged when
//	                     empty
//	count.<job>          the job's counted runs: {runs, slots: the newest 64
//	                     counted slot_ms, last_ms}; no TTL, compare-and-set
//	                     only; written before the counted run's lease key (for
//	                     a job that forbids overlap, after the second look at
//	                     its other slots, before the run record), so that a
//	                     crash between the two leaves a slot counted that never
//	                     ran: the count errs high, never low
//
// <job> is the job name in unpadded base64url, so a name may hold any character
// (dots, spaces, unicode); <slot> is the slot's Unix time in milliseconds.
// Values are JSON with a format version "v".
//
// The runs of a schedule entry (backend.EntryRunName) have the same keys with two
// tokens for <job>, the job's and the entry ID's (each unpadded base64url):
// lease.<job>.<entry>.<slot>, run.<job>.<entry>.<slot>, buffer.<job>.<entry>,
// count.<job>.<entry>. A pattern with one token for the job (lease.<job>.*)
// matches none of them, and one of an entry's no other entry's, so overlap,
// buffers, run counts and Active are per entry; a release that predates entries
// reads such a key as not of its layout and passes over it. The entries
// themselves (backend.EntryStore) are keys of the same bucket:
//
//	entry.<job>.<entry>  the entry: {v, job, id, every, cron, zone, at, start,
//	                     end, payload, paused, updated, by}; no TTL; revision =
//	                     the key's revision. Create is a compare-and-set from
//	                     nothing stored (or from a removed entry's marker),
//	                     update one from the revision given, removal a purge at
//	                     the revision read, whose marker lives a day
//	                     (entryMarkerTTL): a watcher that reads it later than
//	                     that, disconnected meanwhile, misses the removal
//
// ListEntries lists the entry keys with one stream information request (of one
// job's, or every job's), sorts them and reads one page: its cost grows with the
// entries stored. WatchEntries is a KV watch of entry.>.
//
// A lease is live exactly while its key holds a value: the server deletes the value
// when its TTL runs out and leaves a marker (Nats-Marker-Reason: MaxAge); Release,
// Finish and Retry replace it by a purge marker. Markers expire after a second. Every TTL is
// rounded up to whole seconds, because the server counts TTLs in whole seconds and
// truncates.
//
// The run record says who the run belongs to and whether it finished. It outlives
// the lease, which is how a backup tells "the lease expired with the run unfinished"
// (a takeover) from "nothing was ever stored" (none, late, or a first claim) and
// from "finished" (done). While running, the holder's heartbeats refresh its TTL.
//
// Its state is running, finished, or retry: the last attempt failed and stored a
// retry (status error, the lease key purged), which may be claimed from the
// record's write (the server's timestamp on it) plus retry_delay_ms, until that
// plus retry_within_ms. A version that predates the retry state reads it, as any
// state it does not know, as done: during a rolling upgrade the older instances
// never run a stored retry, and the newer ones do.
//
// State buffered is a slot stored buffered (backend.OverlapBufferer): a decision to
// run it once nothing else holds the job, for the token and instance of the claim
// that buffered it, with no lease key, no deadline and no TTL. Its record stores
// attempt 1 and fence 0 (answers and Active say attempt 0): a release that
// predates the state refuses an attempt below 1 as corrupt, and reads the state,
// as any it does not know, as done. buffer says the run was claimed under a
// buffer policy, so that its Retry marks the buffer key.
//
// The cancel_* fields are a later slot's request that the run end
// (backend.OverlapCancelOther): the slot, instance and token of the claim that
// asked. The run record's are the stored request, kept once the run finished; the
// lease key's repeat them for the holder's heartbeat. A version that predates them
// ignores them: its holder keeps running until the run ends, and its claims take
// such a run over as any other (its heartbeats and refreshes may also drop the
// fields, which the next claim of the later slot stores again).
//
// # Transitions
//
// Every write is a compare-and-set on the key's last revision (the publish carries
// Nats-Expected-Last-Subject-Sequence, and Nats-TTL; kv.Update cannot carry a TTL,
// so writes are publishes to the key's subject). A lost race (10071, or 10164 on a
// replicated stream) makes the caller read both keys again and decide again.
//
// Claim reads the run record and the lease key (one direct get of both on a
// single-replica bucket, whose only replica is its leader; two leader reads on a
// replicated one):
//
//   - run stored buffered, or (under a buffer policy) listed in the job's buffer
//     key: see Buffered slots below.
//   - run decided (finished, skipped or late; or a state this version does not
//     know, a newer writer's, read as done): done with the stored status; the token
//     that stored a skipped or late decision is told overlap or late again.
//   - run waiting for its stored retry, by the server's clock: before the window,
//     retry (with how long until it opens); after it, stored finished error (CAS
//     from the revision read), done; within it, on to the cases below, where it
//     is taken over as the retry's attempt (marked retried). A lease key this
//     claim created for it meanwhile is purged when it answers.
//   - lease live for another token: running (holder and expiry from the lease).
//   - lease live for this token and the run record ours: won again (same attempt
//     and fence).
//   - otherwise, with no run record and no live lease: none for a takeover-only
//     claim; late when the server's clock is past the deadline, skipped when the
//     job forbids overlap and another of its slots (earlier or later) has an
//     established run (its run record unfinished, naming its live lease's token)
//     — each stored as a finished run record (CAS from the revision read) before
//     the claimer is answered, so no instance runs the slot afterwards;
//   - run unfinished with a cancel request, its holder's lease not live (ended,
//     or a stored retry): stored finished cancelled (CAS from the revision read,
//     the request kept), done. A lease key this claim holds is purged.
//   - a first claim under OverlapCancelOther (no run record) where only earlier
//     slots of the job have established runs (or the marker of a lease that ended
//     on an unfinished run): on each, the claim stores its request in the run
//     record unless one is stored (CAS from the revision read), then into the
//     holder's live lease key (CAS on its revision, same holder, a full lease's
//     TTL), and is answered running with WaitsFor the newest; its own slot stays
//     unstored (a lease key it created is purged). A later slot's busy run makes
//     it skipped, as under OverlapSkip. A claimer that dies between the two writes
//     leaves the request in the run record alone: the next claim of the later
//     slot (the scheduler repeats it) writes the lease key's half; until then the
//     holder is not told (with no further claim, as when the asking RunNow was
//     the only one, never), and a takeover still ends the run cancelled.
//   - else the claim writes the lease key (CAS from the revision read, which holds
//     no live lease, so among racing claimers exactly one succeeds), then the run
//     record (CAS from the revision read: attempt 1, or attempt+1 naming the
//     previous holder on a takeover). If the run record changed meanwhile (the
//     old holder finished it) the claim decides again, keeping its lease key. A
//     job that forbids overlap looks at its other slots again between the two
//     writes, and gives way to an established run or to a claim in flight whose
//     lease key has a lower revision: of two slots claimed at once exactly one
//     runs (overlap.go).
//     WithAtomicBatches writes both in one atomic batch instead: both stored or
//     neither, each compare-and-set checked by the server (slower on nats-server
//     2.15.3; see the option).
//
// # Buffered slots
//
// Under OverlapBufferOne and OverlapBufferAll a run holds its job (blocks) while
// busySlots counts it (an established run; a lease marker on an unfinished run;
// at a second look a claim in flight before this one), and while its stored retry
// is pending: Retry purges the lease key, so the Retry of a run claimed under a
// buffer policy (its record's buffer) first marks the retry in the buffer key.
// The buffer key is the fleet-wide count and order of the buffered slots,
// changed only by compare-and-set, so at most the cap are listed and they are
// listed oldest first. A slot enters the list before its run record says
// buffered, and leaves it before its record says anything else; so a claim reads
// the pair as
//
//   - listed, record buffered, or listed with no record (a claimer between its
//     two writes, or dead there): buffered. A claim that acts on an entry with no
//     record (its own slot's claim; a later slot's that would wait for it) first
//     writes the record, for the entry's token and instance (CAS from revision
//     0);
//   - not listed, record buffered: a claim took it off the list and is between
//     that and its run record, or died there (its lease key in flight, until it
//     expires): first in line, taken by the next claim once nothing blocks;
//   - listed, record in another state: stale (below), dropped by a claim that
//     reads it (a claim of a later buffered slot, or one at the cap).
//
// A claim under a buffer policy reads the busy slots (busySlots), then the buffer
// key, then the records of the retries it marks (a mark counts while that
// record is the marking token's, in state retry within its window; while it is
// still the token's running record the lease key speaks; otherwise the mark is
// dropped). Reading the lease keys first: a Retry marks before it purges, so a
// claim that finds the lease key purged finds the mark.
//
//   - first claim, no run record: its own slot listed is a buffered slot (below).
//     Otherwise none for takeover-only; late past the deadline; when something
//     blocks or any slot is listed, buffered: the slot is added to the list
//     (CAS; skipped instead, stored like OverlapSkip's, once the cap is reached,
//     the oldest four entries checked for staleness), then its record written
//     buffered (CAS from the revision read), and the claim answered buffered,
//     with WaitsFor the newest blocker, else the oldest earlier listed slot
//     (with neither, only later slots listed, it goes on at once as a claim of
//     the slot it buffered). With nothing blocking and nothing listed it is
//     claimed as under OverlapSkip (the lease key, the second look, the run
//     record), except that a claim giving way at the second look buffers its
//     slot instead of skipping it.
//   - claim of a buffered slot (any token, takeover-only, past its deadline):
//     another token's live lease is a claim taking it (running). Else, unless the
//     claim allows overlap (a paused job's, which takes it at once), it answers
//     buffered while something blocks or an earlier slot is listed (dropping that
//     one if stale, writing its record if it has none). Otherwise it writes the
//     lease key (CAS), looks again (overlap.go's second look; giving way leaves the
//     slot buffered), takes the slot off the list (CAS), and writes the run record
//     running (CAS from the buffered revision: attempt 1, a new fence). Any lost
//     race reads and decides again, keeping the lease key it wrote.
//   - Finish by the token that buffered the slot withdraws it: off the list, then
//     the record finished with the status given, then a purge of the lease key
//     (while no lease is live) for the slot's watches. Heartbeat finds no lease
//     (ErrLeaseLost), Retry no attempt (ErrStaleToken), Release nothing to end.
//
// Exactly one runs: every claim that runs a slot of the job writes its lease key
// and looks again before its run record, so the argument of overlap.go holds for
// buffered slots as for first claims; the list only decides which slot tries.
// Of racing claims of buffered slots, all but the oldest listed answer buffered
// at their first look, and a new slot's claim sees a listed slot, or, once it was
// taken off the list, its lease key (in flight at the second look, established
// after).
//
// A death between two writes: after listing, before the record: the slot is
// buffered (listed), counted, and its record is written by the next claim that
// acts on it; it runs in its turn. After taking it off the list, before the
// record says running: its lease key holds the job until it expires, then the next
// claim takes the slot (attempt 1). After the withdrawal's first write: the slot
// is first in line and runs (the Finish was never answered). After Retry's mark,
// before the record: the attempt's lease runs out and the run is taken over, as
// after any death; the mark, no longer the record's token's, is dropped. After the
// record in state retry, before the purge: the lease and the mark both hold the
// job. Stale entries come only from an overlap-allowing claim (a paused job's,
// which reads no buffer key) winning a slot between its buffering claim's two
// writes; that claim takes the entry off again when its record write loses to it,
// and a death there leaves it stale: it still counts (at most one more skipped or
// buffered slot) until dropped, and, were it never read for the run's keep, the
// run record forgotten, it would read as buffered again.
//
// Where this is weaker than the reference (backend/memory): a run whose lease
// ended holds the job while its marker is kept (a second, as under OverlapSkip),
// not for a lease; a stored retry holds it only for runs claimed under a buffer
// policy (their Retry marks it); after a death between two writes the slot first
// in line may run after a later one (never beside it); a withdrawal whose Finish
// died between its writes runs the slot instead.
//
// Active lists buffered slots with Buffered set, not live: their records, and the
// slots listed without one (read with the run records: on a single replica in
// the same request, on a replicated bucket one more read per call, for any job).
//
// A release that predates the buffer policies (a rolling upgrade) reads a buffered
// record as done: its instances never run a buffered slot and answer done to its
// claims (the newer ones run it); they ignore the buffer key, so their claims of
// the job's slots under another policy see neither the buffered slots nor the
// marked retries, and their rewrites of a run record (a heartbeat's refresh, a
// retry) drop its buffer field, so that run's next Retry marks nothing.
//
// Cost (requests counted at the server on one replica, TestBufferRoundTrips): a
// first claim of an overlap-allowing job is unchanged (its two chained writes,
// one round trip); under a buffer policy a first claim with nothing held costs 6
// (OverlapSkip 5: the buffer key's read), one buffered behind a run 7, a claim of
// a buffered slot that waits 5, one that takes it 10 right after the run before it
// finished (that run's lease marker, kept a second, costs two reads), a
// withdrawal 6, a Retry 4 (2 more than without the mark). A replicated bucket adds
// a read wherever both keys of a run are read. WatchRun with no live lease reads
// the run record too: in the same request on a single replica, one more read on
// a replicated bucket.
//
// A first claim of a slot the store has not answered before, that could decide
// nothing before writing (not takeover-only, overlap allowed, a deadline the cached
// estimate of the server's clock shows ahead), makes those two writes first, from
// revision 0, and reads only when one loses. On a single-replica bucket it sends
// them chained, in one round trip: the lease key's message carries a Nats-Msg-Id of
// the claim, and the run record's Nats-Expected-Last-Msg-Id names it, so the server
// stores the run record only right behind this claim's lease key (never for a
// claim whose lease write lost); when another write to the bucket came between the
// two, the run record is written again alone. A store with more than four first
// claims in flight (a burst at one instant, where writes come between each other's
// and the losers' refused run records cost the server a write each) writes them in
// turn, as does every store on a replicated bucket (nats-server 2.15.3 checks the
// last message id of a replicated stream when it applies the message, and a
// mismatch found then stops the stream). A claim that meets a running holder costs
// its lost writes and, when the store's shared watcher has not delivered the lease
// key at the revision the server's refusal names within 250 ms, one read of the
// lease key alone (running, without the holder's attempt and fence). A lease key it
// created for a slot that was decided meanwhile is purged.
//
// The lease key is the mutex, taken only when not live (a cancel request rewrites
// a live one for the same holder); the run record is the stored decision, written
// only by the lease key's holder, by the run's own holder finishing, by the claim
// that stores skipped or late, by a later slot's claim storing its cancel
// request (or ending the run cancelled), or by a claim storing a slot buffered
// (its own, or one listed without its record) and the token withdrawing it. A
// claimer that dies between the two writes leaves a lease key without a run
// record: others see
// running until it expires, then the next claim decides the slot like a first
// claim (won while its deadline allows, else stored late); the scheduler's backups
// make that claim, so the slot is never forgotten. A retry with the same token
// finds its own lease key and completes the claim.
//
// The fence of a new holder is the server's time in nanoseconds (the low end of the
// store's estimate of it), and always above the previous holder's fence of the
// run. Fences therefore grow per run across takeovers and stay above the fences
// handed out before the bucket was deleted and created again, or before a restart
// emptied a memory-storage bucket (stream sequences would start again at 1), as
// long as the server's clock does not go back further than the time since.
//
// Heartbeat is a CAS on the lease key carrying a new TTL; after expiry the key's
// last revision is the marker's, so an expired holder's heartbeat fails
// (backend.ErrLeaseLost) even if nobody took over. A lost CAS reads the lease key
// and, while the token holds it, writes it again from the value read, a cancel
// request included; a request in the lease key (or in a run record it read) makes
// it return a *backend.CancelError once the lease is extended. Finish is a CAS on the run
// record by its holder (accepted after expiry while nobody took over), then a purge
// of the lease key (CAS on its revision) published without waiting for an answer:
// the purge is best effort, the lease ends by its TTL anyway, so Finish is one round
// trip (for a run with a cancel request, whose lease key a claimer may have
// rewritten, the purge waits and reads on a lost race). WithAtomicBatches sends both in one atomic batch while the lease key is
// still the holder's last write.
// Release purges the lease key at the holder's revision; the run
// record stays unfinished, so the next claim takes over at once. Retry is a CAS of
// the run record by its holder to state retry, then a purge of the lease key (so
// a claim between the two finds the retry, never a run to take over at once); a
// repeat while the retry is pending only ends the lease again.
//
// # Time
//
// Lease expiry is the server's TTL. Expires in answers is the lease's last write
// time (the server's timestamp on the message) plus its lease. A claim's deadline
// is judged by the server's clock, estimated from StreamInfo.TimeStamp readings
// bracketed by local monotonic times: a reading is reused for ten seconds with a
// drift allowance, and taken again when the deadline is too close to call.
//
// # Watching
//
// WatchRun starts a KV watch on the run's two keys, then reads both from the stream
// leader: that reading is the baseline (no live lease: the channel closes at once),
// and the watch acts only on newer revisions. A watch's first values come from an
// ordered consumer, which on a replicated bucket may be served by a replica still
// behind the leader: they alone could miss a lease just written. After the baseline,
// an expiry marker, a purge, a new holder or a changed run record closes the
// channel; a heartbeat does not. With no live lease the run record is read too
// (with the lease key in one request on a single replica): a buffered slot's watch
// fires on any newer write of its lease key (a claim taking it; its withdrawal
// purges it), and has no timer. A cancel request written into the lease key
// closes it (the holder's own watch: it learns of the request at once). A timer
// at the lease's expected end (plus a second) is the safety net.
//
// All watches of a store share one watcher on the bucket's lease keys. A backup's
// watch takes the lease its own claim just read as its baseline (no read of its
// own), and Finish's purge carries the finished run record, so the backup's next
// claim of the slot is answered done from what the watcher saw, without a request:
// a finished record is final, and it was stored before the purge was sent.
//
// # Where the code is
//
// claim.go is the decision above, one function per case (decidedRun, running,
// wonAgain, resume, take); retry.go Retry and a claim's look at a stored retry
// (retryDue); blind.go the first claim written before reading;
// pair.go the lease key's and run record's two writes, by the strategy Init picks
// for the bucket (batched with WithAtomicBatches, else chained on a single replica,
// else in turn); overlap.go the looks at a job's other slots and the cancel
// requests of OverlapCancelOther; buffer.go the buffer policies; memory.go what a
// store remembers between calls (held leases, running hints, sightings, and the
// shared watcher of watch.go).
//
// # Guides
//
// [Leases] gives the rules every run store follows, and [Backends] the bucket's
// production settings.
//
// [Leases]: https://github.com/anarchon/anarchon/blob/main/docs/concepts.md#leases
// [Backends]: https://github.com/anarchon/anarchon/blob/main/docs/backends.md#on-a-production-server
package kvlease
