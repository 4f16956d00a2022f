// Package metrics exposes what a scheduler does as Prometheus metrics: claims by
// outcome, runs by status, run duration, slot lag, late and skipped slots,
// takeovers, lease losses, backend errors, and per-job last-success and next-slot
// times. It is fed by the scheduler's event hook, so the scheduler itself imports
// no Prometheus package.
//
// One call creates and registers the collectors; the hook goes into the
// scheduler's Config:
//
//	m, err := metrics.Wire(prometheus.DefaultRegisterer)
//	if err != nil {
//		return err
//	}
//	s, err := scheduler.New(scheduler.Config{
//		Backend: backend,
//		OnEvent: scheduler.Chain(m.OnEvent, scheduler.LogEvents(logger)), // or just m.OnEvent
//	})
//
// New and Register do the same in two steps. Register adds every collector or
// none; a nil registerer is an error wrapping ErrInvalidRegisterer, and
// registering the same collectors twice is an error wrapping ErrAlreadyRegistered.
//
// # Metrics
//
// Every metric is per process: the replica that ran a slot is the one that counts
// it, and Prometheus adds the instance label when it scrapes. Aggregate over
// replicas in queries (sum by (job_name), max by (job_name)).
//
//	name                                     type       labels                      meaning
//	anarchon_claims_total                    counter    job_name, outcome           slots this instance tried to claim, by outcome
//	anarchon_runs_total                      counter    job_name, status, manual    handler runs that ended on this instance
//	anarchon_run_duration_seconds            histogram  job_name                    handler run time (scheduled and manual runs)
//	anarchon_slot_lag_seconds                histogram  job_name                    start time − slot time of scheduled runs
//	anarchon_late_slots_total                counter    job_name                    slots not started: their deadline (slot + max lateness) had passed
//	anarchon_missed_slots_total              counter    job_name                    slots recorded missed here: due while no instance could claim them
//	anarchon_deadline_missed_total           counter    job_name                    slots recorded here as not ended ok by their deadline (WithDeadline)
//	anarchon_skipped_slots_total             counter    job_name                    slots skipped: an earlier slot held its lease and overlap is forbidden
//	anarchon_takeovers_total                 counter    job_name                    runs this instance took over from an expired or released lease
//	anarchon_lease_losses_total              counter    job_name                    runs whose lease was lost while the handler ran
//	anarchon_backend_errors_total            counter    job_name, op                failed backend and run-store calls
//	anarchon_last_success_timestamp_seconds  gauge      job_name                    Unix time the last ok run finished on this instance
//	anarchon_next_slot_timestamp_seconds     gauge      job_name                    Unix time of the job's next slot
//	anarchon_running_handlers                gauge      job_name                    handlers of the job running now
//	anarchon_paused_slots_total              counter    job_name                    slots that fell while the job was paused, recorded paused here
//	anarchon_excluded_slots_total            counter    job_name                    slots on a day of a calendar the job or entry names, recorded excluded here
//	anarchon_job_paused                      gauge      job_name                    1 while the job is paused, else 0
//	anarchon_job_conflict                    gauge      job_name                    1 while the replicas declare the job differently (fleet registry), else 0
//	anarchon_retries_total                   counter    job_name                    failed attempts whose slot is tried again (WithRetry)
//	anarchon_cancel_requests_total           counter    job_name                    runs a later slot asked to end (OverlapCancelOther)
//	anarchon_failed_slots_total              counter    job_name                    final failures: the last attempt failed, no retry follows
//	anarchon_job_interval_seconds            gauge      job_name                    seconds between the job's last two slots of its own schedule
//	anarchon_job_first_seen_timestamp_seconds gauge     job_name                    Unix time this instance first reported an event of the job
//	anarchon_entry_runs_total                counter    job_name, status            runs of the job's schedule entries that ended (in runs_total too)
//	anarchon_entry_failed_slots_total        counter    job_name                    final failures of the job's entries' slots (in failed_slots_total too)
//	anarchon_entries                         gauge      state                       entries followed and orphaned (CountEntries)
//	anarchon_job_entries                     gauge      job_name, state             a job's entries active, paused and ended (CountEntries)
//	anarchon_build_info                      gauge      version, goversion          always 1: the anarchon module's version and Go's
//
// The prefix is "anarchon" unless WithNamespace says otherwise. Label values:
//
//   - job_name: the job's name as registered. The label is not called "job"
//     because Prometheus attaches its own job label to every scraped series and
//     would rename ours to exported_job.
//   - outcome: won (this instance runs the slot), running (another instance holds
//     it; this one stands by as a backup), done (another instance has it or ran
//     it), overlap, late, none, and other for an outcome this version does not
//     know. A backup counts twice: running when it starts waiting, then won or
//     done when the wait ends.
//   - status: ok, error, timeout, cancelled, lost, superseded, and other for a
//     status this version does not know.
//   - manual: "true" for runs started by RunNow, "false" for scheduled runs. Both
//     count in runs_total and run_duration_seconds and set last_success; only
//     scheduled runs have a slot lag.
//   - op: the scheduler call that failed: claim, save_result, heartbeat, finish,
//     release, record_claim, record_manual_run, watch (the scheduler may add
//     more; anything that is not a short lower-case identifier becomes other).
//
// No metric carries a slot, token, attempt or instance label, so the number of
// series depends only on the number of jobs. The first time a job is seen (at
// Start) its runs_total{status="ok"|"error",manual="false"}, late, skipped,
// takeover and lease-loss counters, backend_errors_total{op="claim"|"save_result"}
// and running_handlers are created at zero, so rate() and increase() see their
// first increment.
//
// A job's own schedule and its schedule entries' are told apart: next_slot,
// job_interval_seconds and last_success follow the job's own slots and runs
// (manual runs included), not its entries'; an entry's runs and final failures
// count in runs_total and failed_slots_total too, and in entry_runs_total and
// entry_failed_slots_total, with the job's name and no series per entry. A job
// of entries only has no next slot, interval or last success of its own.
// job_interval_seconds is known from the job's second slot after Start (the gap
// from the first), and is dropped, with next_slot, once the job's run limit is
// reached.
//
// Slot lag includes the job's jitter: a job with WithJitter(d) spreads its lag
// over [0, d) by design. After a takeover the lag is measured from the slot, so it
// includes the time the first holder ran.
//
// To tell apart two schedulers in one process, register each Metrics on its own
// prometheus.WrapRegistererWith(prometheus.Labels{"scheduler": name}, r).
//
// # Alert rules
//
// alerts.yml, beside this package in the repository, is a Prometheus rule file
// that holds for every job as it is: a job's thresholds come from its own
// interval, job_interval_seconds, which every replica exports from the job's
// schedule. Each alert carries a severity label and a runbook_url annotation
// (the runbooks are in docs/operating.md). The main rule says no replica has
// recorded a success of the job for 3 of its intervals, counted from its last
// success or from when the replicas up now began following the job:
//
//	groups:
//	  - name: anarchon
//	    rules:
//	      - alert: AnarchonJobNotSucceeding
//	        expr: |
//	          (
//	            time()
//	              - (
//	                max by (job_name) (anarchon_last_success_timestamp_seconds)
//	                  or
//	                min by (job_name) (anarchon_job_first_seen_timestamp_seconds)
//	              )
//	            > 3 * max by (job_name) (anarchon_job_interval_seconds)
//	          )
//	          and on (job_name)
//	            max by (job_name) (anarchon_next_slot_timestamp_seconds)
//	              > time() - max by (job_name) (anarchon_job_interval_seconds)
//	          unless on (job_name)
//	            max by (job_name) (anarchon_job_paused) == 1
//	        for: 5m
//	        labels:
//	          severity: critical
//
// The others: a slot failed for good (failed_slots_total, which retried
// attempts and runs cancelled by a policy do not count), backend errors, late
// slots, a lease lost while a run went on, slot lag p99 above 5s, replicas
// declaring a job differently, and a job paused for a day.
// grafana-dashboard.json beside it is a Grafana dashboard of every metric.
//
// # Guides
//
// [Metrics and alerts] has the metrics beside the rest of operating a fleet.
//
// [Metrics and alerts]: https://github.com/anarchon/anarchon/blob/main/docs/operating.md#metrics-and-alerts
package metrics
