// Package backend is the contract between the scheduler and the stores its
// replicas share: what a backend implements, the records it keeps and the helpers
// it may use. Users of the scheduler do not need it; they pass a backend built by
// package jetstream, sqlbackend or memory to scheduler.Config. Package scheduler
// gives the types a user meets (Status, RunRecord, Pause, Clock, ...) the same
// names, so a user imports one package.
//
// # The contract
//
// A backend implements Backend. Claim must return true for exactly one token per
// (job, slot), however many instances try and however often they retry. It
// returns true again when the winning token repeats the claim. Everything else is
// optional and found by type assertion, so a wrapper keeps only the capabilities
// of the value it embeds:
//
//	Capability         Implemented by      Gives the scheduler
//	Backend            every backend       claims, results, history (required)
//	LeaseBackend       the backend         a RunStore: leases, backups and takeover,
//	                                       OverlapSkip, catch-up, hand-over at Stop
//	Settler            the RunStore        one record per attempt, stored with the
//	                                       state (else written beside, SaveResult)
//	RecordsUser        the Settler         a history it writes into (RecordWriter)
//	RecordWriter       the backend         the history a RecordsUser writes into
//	OnceRecorder       the backend         a record stored once, its one writer told
//	                                       (a deadline's event fired by one instance)
//	LeaseWatcher       the RunStore        backups woken when a lease ends (else polled)
//	ActiveLister       the RunStore        every job's unfinished runs in one reading at Start
//	EntryRunLister     the RunStore        runs of removed entries ended at Start
//	Retrier            the RunStore        retries any instance may claim (else in-process)
//	OverlapCanceller   the RunStore        OverlapCancelOther (else refused at registration)
//	OverlapBufferer    the RunStore        OverlapBufferOne/All (else refused at registration)
//	RunCounter         the RunStore        a fleet-wide run limit, WithMaxRuns (else refused)
//	BufferedRunCounter the RunStore        a run limit together with a buffer policy
//	RunCountReader     the RunStore        the runs a run limit leaves, exact in Preview
//	ClaimRecorder      the backend         a won lease's claim in History
//	RecordDecider      the ClaimRecorder   whether that record decides (mixed fleets)
//	EntryStore         the backend         schedule entries (else refused)
//	JobChecker         the backend         a job refused at registration, not at Start
//	JobWindower        the backend         a dedupe window per job
//	Pauser             the backend         stored pauses every instance honours
//	LastRunsReader     the backend         the last runs of many jobs in a few reads
//
// A RunStore keeps one stored decision per (job, slot), written before the
// claimer acts on it. Package backend/machine decides every transition; a store
// reads, asks the machine and writes the decision conditionally. Lease times are
// judged by the store's clock, never by comparing instance clocks.
//
// # Records and helpers
//
// ClaimInput and RunClaim are what an instance sends; StoredResult, ClaimRecord
// and Pause what a backend stores; RunRecord and ActiveRun what it reads back.
// BuildHistory merges claims and results into History's records. SummarizeRuns
// picks a job's last runs. ValidateJobName and TruncateText bound what is stored.
// DecidedOutcome answers a claim of a finished slot. The errors a backend returns
// (ErrInvalidClaim, ErrLeaseLost, ErrStaleToken, ErrClaimedElsewhere) are matched
// with errors.Is.
//
// # Testing a backend
//
// Package backend/backendtest is the conformance suite; package backend/memory
// is the reference reading of the contract, in process memory. A backend's tests
// run the suite with a constructor whose backends share one store, as separate
// processes share a server:
//
//	func TestConformance(t *testing.T) {
//		backendtest.Run(t, func(t *testing.T) backend.Backend { return newBackend(t) })
//		backendtest.RunLeases(t, func(t *testing.T) backend.RunStore { return newRunStore(t) })
//	}
//
// RunLeases checks a Settler's records too. A Settler whose history is its own
// backend's runs RunLeasesWithHistory instead. [Writing your own backend] walks
// through a complete backend and a run store on the machine.
//
// [Writing your own backend]: https://github.com/anarchon/anarchon/blob/main/docs/backends.md#writing-your-own-backend
package backend
