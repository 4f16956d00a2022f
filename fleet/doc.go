// Package fleet operates a fleet of schedulers from anywhere over NATS: trigger a
// job, pause and resume it (or every job), read its history, and list every job with
// the replicas that declare it. Each replica serves a NATS micro service; any
// process on the same NATS account asks it, with Client or with the anarchon
// command (cmd/anarchon), or with nats req.
//
// # A replica
//
// Every replica registers its jobs, then serves them; Serve lists them itself
// (s.Jobs()) and follows the jobs registered or removed afterwards
// (Scheduler.RemoveJob): their endpoints are subscribed or drained, and the
// registry rewritten; a job whose subjects would overlap the fleet's is refused
// at its registration (ErrSubjectsOverlap, through Scheduler.AddJobCheck). A
// request that reaches a replica as it drops a job is answered 503
// (ErrUnavailable): ask again. To be seen by `anarchon watch`,
// a replica also publishes its scheduler events, with the hook Events returns,
// chained with its others (the hook is Config.OnEvent, set before scheduler.New):
//
//	events, err := fleet.Events(nc)
//	s, err := scheduler.New(scheduler.Config{Backend: b, OnEvent: scheduler.Chain(events, m.OnEvent)})
//	err = s.Every("reconcile", 10*time.Second, reconcile)
//	err = s.Cron("report", "0 9 * * MON-FRI", sendReport)
//	err = s.Start(ctx)
//	svc, err := fleet.Serve(ctx, nc, s, fleet.WithLogger(log))
//	defer s.Stop(context.WithoutCancel(ctx))
//	defer svc.Stop(context.WithoutCancel(ctx)) // first the service, then the scheduler
//
// # A client
//
//	c, err := fleet.NewClient(nc)
//	f, err := c.Jobs(ctx) // every replica's answer, summarised by job
//	_, err = c.Pause(ctx, "report", fleet.PauseRequest{Reason: "quarter close", By: "ana", For: "2h"})
//	r, err := c.Trigger(ctx, "reconcile", fleet.TriggerRequest{By: "ana", Wait: true})
//
// # Request headers
//
// WithRequestHeaders (NewClient) adds headers, made from each call's context, to
// every request a client sends, and WithRequestContext (Serve) turns a request's
// headers into the context the replica serves it with: a trigger's manual run
// carries that context's values in its handler. The module
// github.com/anarchon/anarchon/otel supplies both, to carry a W3C trace context
// from a trigger to the run's span; fleet itself sets and reads no such header.
//
// # Subjects
//
// Under a prefix (DefaultPrefix "anarchon"; WithPrefix, the same on replicas and
// clients), with <job> the job name as one subject token (JobToken: base64url without
// padding, so any name fits):
//
//	<prefix>.JOBS            every replica answers (no queue group)
//	<prefix>.PAUSEALL        one replica answers (queue group): stores the all-jobs pause
//	<prefix>.RESUMEALL       one replica answers: removes the all-jobs pause
//	<prefix>.CALENDARS.LIST  one replica answers: every calendar, summed up
//	<prefix>.CALENDARS.GET   one replica answers: one calendar, whole
//	<prefix>.CALENDARS.PUT   one replica answers: stores a calendar, created (rev 0)
//	                         or replaced if its revision is still rev (PutCalendar)
//	<prefix>.CALENDARS.DELETE one replica answers: removes a calendar
//	<prefix>.TRIGGER.<job>   one replica that declares the job: runs it now (RunNow)
//	<prefix>.BACKFILL.<job>  one replica that declares the job: runs its past slots
//	                         that never ran (Backfill)
//	<prefix>.PAUSE.<job>     one replica that declares the job: stores the job's pause
//	<prefix>.RESUME.<job>    one replica that declares the job: removes the job's pause
//	<prefix>.HISTORY.<job>   one replica that declares the job: the job's recent runs
//	<prefix>.ACTIVE.<job>    one replica that declares the job: its unfinished runs
//	<prefix>.PREVIEW.<job>   one replica that declares the job: its next slots, each
//	                         with what the fleet will do with it (Scheduler.Preview)
//	<prefix>.WHY.<job>       one replica that declares the job: what was decided for
//	                         one slot and by whom, and what is still open (Scheduler.Why)
//	<prefix>.ENTRIES.<job>.LIST   one replica that declares the job: a page of its
//	                              schedule entries (Scheduler.EntryViews)
//	<prefix>.ENTRIES.<job>.GET    one entry, with its payload and recent runs
//	<prefix>.ENTRIES.<job>.ADD    stores an entry (Scheduler.AddEntry)
//	<prefix>.ENTRIES.<job>.UPDATE replaces an entry if its revision is still the
//	                              one given (Scheduler.UpdateEntry)
//	<prefix>.ENTRIES.<job>.REMOVE removes an entry (Scheduler.RemoveEntry)
//	<prefix>.ENTRIES.<job>.TRIGGER runs one entry now (Scheduler.RunEntryNow)
//	<prefix>.EVENTS.<job>    published by replicas (Events), not a request: one
//	                         message per scheduler event; <job> is "-" for an
//	                         event of no single job (the all-jobs pause)
//
// The verbs are upper case, as in NATS's own API ($JS.API.STREAM.INFO), and no job
// stream can listen on them: the jetstream backend's subjects are
// <subject prefix>.<job token>.> with a token of lower-case letters, digits, '-' and
// '_' only. Serve checks it: a replica whose backend (a SubjectLister) listens on a
// subject that overlaps one of the fleet's, or the registry's bucket, is refused
// with ErrSubjectsOverlap, naming both subjects. A prefix may not start in a
// subject space NATS reserves ($JS, $KV, $SRV, any "$" name, _INBOX).
//
// Each replica subscribes to the per-job subjects of the jobs it declares only, in
// micro's queue group, so a request reaches one replica that declares the job, and a
// job no running replica declares gets NATS no-responders at once. Client then
// asks <prefix>.JOBS who is up and returns a *NoReplicaError that tells the two
// apart: `no replica declares job "X" (replicas up: a, b, c)` (it matches
// ErrUnknownJob too) or `no replica is up` (ErrNoReplica only).
// A pause is stored once in the backend the replicas share and every replica
// follows it, so one replica answering is enough. The micro service has the
// fleet-wide endpoints (jobs, pauseall, resumeall, calendars) and answers micro's own
// $SRV.PING, $SRV.INFO and $SRV.STATS subjects (nats micro info anarchon); its metadata has
// the instance, prefix, backend and number of jobs. The per-job endpoints are plain
// queue subscriptions served by a few workers, not micro endpoints: a micro
// endpoint costs a goroutine and its statistics, and a stop drains each in turn,
// which a replica of thousands of jobs (seven subscriptions each: a job's entry
// requests share one, routed by their last token) cannot afford; so
// $SRV.INFO and $SRV.STATS do not list or count them.
//
// Listing jobs is a scatter-gather on <prefix>.JOBS: the client sends one request
// and collects the answers for a short window (DefaultGatherWindow). It does not use
// micro's discovery ($SRV.INFO), because the answer must carry each replica's live
// view of the pauses, which static endpoint metadata cannot, and because $SRV
// subjects ignore the prefix, so two fleets in one account would answer together.
// The cost is the window: a replica slower than it is not listed.
//
// # Requests and replies
//
// Every request is one JSON object that names its format, "v":RequestVersion (1);
// Client sets it. A replica refuses (400) an empty body, a body without "v" and
// one whose "v" is newer than its own, saying what to send or that it needs an
// upgrade. Unknown fields are refused, so a misspelt field is an error rather than
// ignored. Times are RFC 3339.
//
// A replica acts only on what a client sent: it drops, unanswered (logged at
// debug), every message that JetStream sent instead, which a consumer's deliver
// subject or a request's reply subject can point at any subject of the fleet:
// a delivery (reply subject $JS.ACK.…, whatever the ack policy), a heartbeat or
// flow control message, a direct get's answer or a republished copy (headers
// Nats-Stream, Nats-Sequence, Nats-Subject, …), a stored key-value marker
// (KV-Operation, Nats-Marker-Reason).
//
//	jobs       request  JobsRequest {"v":1}
//	           reply    Replica   {"instance","version","backend","pause_supported",
//	                               "service_id","part","parts","jobs":[JobState]}
//	           JobState {"name","schedule","state":"active"|"paused"|"ended","pause":{...},
//	                     "next","last_run":{Run},"last_success":{Run},
//	                     "last_failure":{Run},"running":[ActiveRun],"running_more",
//	                     "view_error","entries_only","entries":{"active","paused",
//	                     "ended","failing":["<id>"],"failing_more","unchecked"}}
//	trigger    request  TriggerRequest {"v":1,"by":"ana","wait":true}
//	           replies  TriggerReply   {"state":"accepted","job","instance","by","at",
//	                                    "slot","token"}
//	                    then, with wait, {"state":"finished",...,"run":{Run}};
//	                    first {"state":"buffered",...} when buffered (buffer policies)
//	pause      request  PauseRequest {"v":1,"reason":"…","by":"ana","until":"2026-…Z"}
//	                    or {"v":1,"reason":"…","for":"90m"}
//	pauseall   reply    PauseReply   {"instance","pause":{"job","reason","by","at","until"}}
//	resume     request  ResumeRequest {"v":1,"by":"ana"}
//	resumeall  reply    ResumeReply   {"job","instance","still_paused":{...},
//	                                   "not_paused":true}
//	history    request  HistoryRequest {"v":1,"limit":50,"entry":"<id>","status":["error"],
//	                                    "since":T}
//	           reply    HistoryReply   {"job","entry","instance","limit","part","parts",
//	                                    "runs":[Run],"scanned","scan_limited"}
//	active     request  ActiveRequest {"v":1}
//	           reply    ActiveReply    {"job","instance","part","parts","runs":[ActiveRun]}
//	Run        {"job","entry","slot","instance","token","attempt","fence","manual",
//	            "requested_by","status","claimed_at","started_at","finished_at",
//	            "duration_ms","lag_ms","error"}
//	entries.LIST request EntriesRequest {"v":1,"after":"<id>","limit":50}
//	           reply    EntriesReply   {"job","instance","limit","entries":[EntryView],
//	                                    "next":"<id>"}
//	entries.GET request EntryRequest {"v":1,"id":"<id>","history":10}
//	           reply    EntryReply   {"job","instance","entry":EntryView,"history",
//	                                  "part","parts","runs":[Run]}
//	entries.ADD request  AddEntryRequest {"v":1,"id":"<id>",<EntrySpec>,"by":"ana"}
//	entries.UPDATE request UpdateEntryRequest {"v":1,"id":"<id>","rev":7,<EntrySpec>,"by"}
//	           reply    EntryChangeReply {"job","instance","by","entry":Entry}
//	entries.REMOVE request RemoveEntryRequest {"v":1,"id":"<id>","rev":7,"by"}
//	           reply    RemoveEntryReply {"job","instance","id","by"}
//	entries.TRIGGER request TriggerEntryRequest {"v":1,"id":"<id>","by":"ana","wait":true}
//	           replies  TriggerReply {"state",...,"entry":"<id>"} as a trigger's
//	EntrySpec  "every":"90m" | "cron":"0 9 * * *","zone":"Europe/Athens" | "at":T,
//	           "start","end","payload":"<base64>","paused","deadline":"30m",
//	           "dst_repeated":"first"|"last"|"both","dst_missing":"shift"|"skip",
//	           "calendars":["<name>"]
//	Entry      {"job","id",<EntrySpec>,"payload_size","revision","updated","by","user",
//	            "instance"}
//	EntryView  {<Entry>,"followed","next","last_run","last_success","last_failure"}
//	ActiveRun  {"job","slot","instance","token","attempt","fence","expires","live"}
//	calendars.LIST request CalendarsRequest {"v":1}
//	           reply    CalendarsReply {"instance","part","parts","calendars":[{"name","zone",
//	                                    "dates":3,"ranges":1,"yearly":2,"weekdays",
//	                                    "description","by","at","revision"}]}
//	calendars.GET request CalendarRequest {"v":1,"name":"<name>"}
//	           reply    CalendarReply {"instance","calendar":Calendar}
//	calendars.PUT request PutCalendarRequest {"v":1,"calendar":Calendar,"rev":7,"by":"ana"}
//	           reply    CalendarReply, the calendar as stored
//	calendars.DELETE request DeleteCalendarRequest {"v":1,"name":"<name>","rev":7,"by"}
//	           reply    DeleteCalendarReply {"instance","name","by"}
//	Calendar   {"name","zone":"Europe/Athens","dates":["2026-12-25"],
//	            "ranges":[{"from":"2026-08-01","to":"2026-08-15"}],"yearly":["01-01"],
//	            "weekdays":["saturday","sunday"],"description","by","at","revision"}
//	events     Event {"kind","job","entry","instance","at","slot","token","attempt","manual",
//	                  "outcome","status","duration_ms","lag_ms","next","op","error",
//	                  "pause"}
//
// Fields absent from a reply are zero: omitted, never null. New fields may be
// added; none is renamed or removed within a major version.
//
// No reply depends on fitting in one message. The replies that grow with the
// fleet (jobs, history, active) are sent in as many messages as it takes for each
// to fit in the connection's max payload: each is a reply of the same type with
// some of the items (jobs, runs) in order and "part" (1 to "parts") and "parts";
// a replica's jobs parts also carry its "service_id", which tells apart two
// replicas that answer as one instance. Client reads every part: a history or
// active reply missing parts when ctx ends is an error saying how many came; a
// replica whose jobs parts did not all arrive (no part for a gather window, or the
// deadline) is not listed, with a warning. The jobs view cuts the errors it
// repeats at MaxViewError bytes (1 KiB, with backend.TruncateText's mark) and
// lists at most MaxViewRunning runs in progress per job ("running_more" counts the
// others); history carries errors as stored, at most scheduler.MaxErrorText;
// Events cut theirs at MaxViewError.
//
// A job's schedule entries (scheduler.AddEntry) are stored in the backend and
// reached through a replica that declares the job. The entries reply is one page
// in one message: at most its limit (DefaultEntriesLimit, up to MaxEntriesLimit)
// and at most what a message holds, without the payloads (each entry's
// "payload_size" says how large it is; an entry request carries the payload,
// up to backend.MaxEntryPayload, 16 KiB); "next", when set, is the "after" of the
// next page. An update carries the revision it is based on ("rev", required): if
// another writer changed the entry first, nothing is stored and the reply is 412.
// A removal's rev 0 removes the entry whatever its revision. An entry of a job no
// replica declares is stored but never run, and no replica answers for it: the
// per-job subjects get no-responders, as for any job nobody declares (the jobs
// reply counts such entries per replica, "orphaned_entries", beside "entries",
// those it follows).
//
// Calendars (scheduler.PutCalendar) are stored once for the fleet and asked of
// any one replica. The list sums each calendar up (how many dates, ranges and
// yearly days); a calendar request carries it whole. A put with rev 0 creates
// the calendar (422 if one of that name is stored); another rev replaces the one
// stored with that revision (412 if another writer changed it first). Who asked
// (by) is stored with the calendar, with the NATS user the server named for the
// request (WithRequestInfo): "ana (NATS user ops)".
//
// The view of a job in the jobs reply is computed by each replica when asked: its
// pause and next slot (scheduler.JobInfo.Next, by its clock) from memory, then one
// read of the last run, last success and last failure of every job
// (scheduler.LastRuns: one batched read when the backend implements
// backend.LastRunsReader, else the last ViewHistoryLimit history records of each
// job) and one read per job of its unfinished runs (scheduler's Active: live
// leases, their holder and attempt). The reads of one jobs request are bounded
// together by a budget shorter than the gather window: a job whose reads fail or
// run out of time says so in view_error. Client.Jobs summarises the view as the
// first replica whose reads succeeded shows it (JobSummary.ViewFrom). On a backend
// with leases a manual run holds a lease like any run, so a triggered run is in
// active while it runs, and in history.
//
// A trigger runs on the replica that gets it, as a manual run, and is answered
// accepted once the run is recorded and its handler starts (scheduler.OnStart):
// the reply names the run (slot, token). A run that cannot start is answered with
// the error instead, and nothing ran: 409 when the job forbids overlap and a run of
// it is in progress, 429 when the replica already runs as many manual runs of the
// job as it allows. Under a buffer overlap policy a trigger that falls while a run
// of the job is in progress is answered buffered at once (scheduler.OnBuffered): it
// is stored and runs once that run ends, then accepted follows. A requester that waits gets a second reply on the same inbox
// when the run has ended (a plain request sees only the first). Who asked (by) is
// recorded with the run (Run.RequestedBy in history) and is in the replies and the
// replica's log. A resume of a job that is not paused (resumeall without an
// all-jobs pause) changes nothing and says so ("not_paused":true): the replica
// reads the stored pauses before it removes the pause. A pause's until or for is
// judged on the replica's clock. History's limit is
// DefaultHistoryLimit when absent and clamped to MaxHistoryLimit; the reply says
// which limit applied.
//
// # Errors
//
// A refused or failed request is answered with the micro error headers,
// Nats-Service-Error-Code and Nats-Service-Error (one line of text), and an
// ErrorBody {"code","error","instance"}. A refused request changes nothing.
//
//	400  bad request: an empty body, no "v" or a newer one, invalid JSON, an
//	     unknown field, no reason, until and for together, until in the past, a
//	     negative limit, text over 1 KiB, an entry that cannot be (its ID, its
//	     schedule, a payload over 16 KiB, an update without rev), a calendar
//	     that cannot be (its name, zone, days or weekdays, too many days), an
//	     entry subject whose last token is no operation
//	404  unknown job: never answered by a replica; Client reports so a job that no
//	     replica up declares (a *NoReplicaError)
//	409  a trigger of a job that forbids overlap while a run of it is in progress
//	410  no schedule entry of the job has that ID; no calendar has that name
//	412  an entry's or calendar's change based on a revision no longer stored:
//	     another writer changed it first
//	422  an add of an entry ID, or a create of a calendar name, already stored
//	429  a trigger while the replica runs as many manual runs of the job as it
//	     allows (scheduler.WithMaxManualRuns)
//	500  the replica failed (a backend call), with the error
//	501  not supported: the backend cannot store pauses (backend.Pauser),
//	     schedule entries (backend.EntryStore) or calendars
//	     (backend.CalendarStore)
//	503  unavailable: the scheduler is not started or stopping, the service stops,
//	     or the job was removed from the replica a moment ago (ask again: another
//	     replica may declare it)
//
// Client returns these as *ServiceError, which matches ErrBadRequest,
// ErrUnknownJob, ErrJobBusy, ErrEntryNotFound, ErrEntryConflict, ErrEntryExists,
// ErrCalendarNotFound, ErrCalendarConflict, ErrCalendarExists (from the calendar
// endpoints), ErrTooManyManualRuns, ErrReplicaFailed,
// ErrNotSupported and ErrUnavailable with errors.Is (and the scheduler's
// sentinels where one fits); no answer at all is ErrNoReplica (for a request
// about one job, a *NoReplicaError naming the replicas that are up).
//
// # Permissions
//
// Read and write are separate subjects, so NATS permissions split viewers from
// operators. Permissions(role, PermissionsConfig{...}) gives each role's, and
// `anarchon permissions ROLE` prints them as a nats-server configuration block:
//
//	viewer    publish   <prefix>.JOBS, <prefix>.HISTORY.*, <prefix>.ACTIVE.*,
//	                    <prefix>.PREVIEW.*, <prefix>.WHY.*, <prefix>.ENTRIES.*.LIST,
//	                    <prefix>.ENTRIES.*.GET, <prefix>.CALENDARS.LIST,
//	                    <prefix>.CALENDARS.GET,
//	                    $JS.API.DIRECT.GET.KV_<registry bucket>
//	          subscribe <its inbox prefix>.>, <prefix>.EVENTS.* (for watch)
//	operator  as a viewer, and publish <prefix>.TRIGGER.*, <prefix>.BACKFILL.*,
//	          <prefix>.PAUSE.*, <prefix>.RESUME.*, <prefix>.PAUSEALL, <prefix>.RESUMEALL,
//	          <prefix>.ENTRIES.*.ADD, <prefix>.ENTRIES.*.UPDATE, <prefix>.ENTRIES.*.REMOVE,
//	          <prefix>.ENTRIES.*.TRIGGER, <prefix>.CALENDARS.PUT, <prefix>.CALENDARS.DELETE
//	replica   subscribe every endpoint, $SRV.*, $SRV.*.anarchon,
//	          $SRV.*.anarchon.*, <its inbox prefix>.>
//	          publish   <prefix>.EVENTS.*, the registry's bucket API and its own
//	                    keys, and what its backend needs (jetstream.Permissions,
//	                    kvlease.Permissions); it answers requests on their
//	                    reply subjects (allow_responses), never on an inbox
//
// Each role has its own inbox prefix (InboxPrefix: _INBOX_viewer, _INBOX_operator,
// _INBOX_replica; nats.CustomInboxPrefix on its connections), so no role reads or
// answers the replies another waits for, and neither a viewer nor an operator may
// create a consumer: the registry is read with direct gets. A push consumer's
// deliver subject and a request's reply subject are not checked against anyone's
// permissions, which is why replicas also drop what JetStream sends them and
// refuse a request that is not a versioned JSON object. And as allow_responses
// lets a replica publish on whatever reply subject a request names, a replica
// answers only on inboxes (a first token beginning with _INBOX; NewClient refuses a
// connection whose inbox prefix does not) and drops any other request; and no role
// may send micro's $SRV requests (replicas only answer them), which micro answers
// on any reply subject.
//
// # Registry
//
// Serve also keeps the replica's Registration in a key-value bucket (Serve's
// WithRegistryBucket, DefaultRegistryBucket): rewritten every heartbeat
// (WithHeartbeat) with a per-message TTL of three heartbeats, removed at Stop, and
// expired by the server (with a marker every watcher sees) when the replica dies.
// An entry is one value while it is at most 64 KiB (format 1). A larger one (a
// replica of thousands of jobs) is written in format 2: a head of a few hundred
// bytes at the entry's key, rewritten every heartbeat, and the declarations in
// parts that each fit in a message, at <key>.<digest>.<n>, rewritten every sixth
// heartbeat with a TTL of twelve heartbeats; readers read the parts when the
// head's digest changes. A reader that knows format 1 only reads the heads and
// reports format 2 as a newer format (ErrRegistryFormat).
//
// Every replica watches its fleet's heads and reports each job that the replicas
// declare differently as a scheduler.EventJobConflict through Scheduler.Report
// (metrics: anarchon_job_conflict), and again with an empty Conflict once they
// agree. Client.Registry reads the entries with batched direct gets of the bucket's
// stream ($JS.API.DIRECT.GET.KV_<bucket>), not a watch, so a viewer needs no
// consumer; one written in a format newer than RegistryFormat is an error wrapping
// ErrRegistryFormat. WithoutRegistry serves without it, for an account without
// JetStream.
//
// # Guides
//
// [Operating a fleet] covers the service, the anarchon command and the permissions
// per role; [Compatibility] says what the protocol and the registry promise across
// versions.
//
// [Operating a fleet]: https://github.com/anarchon/anarchon/blob/main/docs/operating.md
// [Compatibility]: https://github.com/anarchon/anarchon/blob/main/docs/development.md#compatibility
package fleet
