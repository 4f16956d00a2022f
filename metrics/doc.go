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
//	anarchon_skipped_slots_total             counter    job_name                    slots skipped: an earlier slot held its lease and overlap is forbidden
//	anarchon_takeovers_total                 counter    job_name                    runs this instance took over from an expired or released lease
//	anarchon_lease_losses_total              counter    job_name                    runs whose lease was lost while the handler ran
//	anarchon_backend_errors_total            counter    job_name, op                failed backend and run-store calls
//	anarchon_last_success_timestamp_seconds  gauge      job_name                    Unix time the last ok run finished on this instance
//	anarchon_next_slot_timestamp_seconds     gauge      job_name                    Unix time of the job's next slot
//	anarchon_running_handlers                gauge      job_name                    handlers of the job running now
//	anarchon_paused_slots_total              counter    job_name                    slots that fell while the job was paused, recorded paused here
//	anarchon_job_paused                      gauge      job_name                    1 while the job is paused, else 0
//	anarchon_job_conflict                    gauge      job_name                    1 while the replicas declare the job differently (fleet registry), else 0
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
// Slot lag includes the job's jitter: a job with WithJitter(d) spreads its lag
// over [0, d) by design. After a takeover the lag is measured from the slot, so it
// includes the time the first holder ran.
//
// To tell apart two schedulers in one process, register each Metrics on its own
// prometheus.WrapRegistererWith(prometheus.Labels{"scheduler": name}, r).
//
// # Alert rules
//
// Four examples, for a job "report" that runs every 10 minutes. Every rule
// aggregates over replicas: only the replica that ran a slot records it.
//
//  1. The job has not succeeded on any replica for three intervals. The companion
//     rule covers a fleet restarted since the last success, as the gauge starts
//     empty in a new process.
//  2. Backend errors keep coming (claims failing, results not saved, heartbeats
//     failing), and slots that replicas keep reaching after their deadline.
//  3. Slot lag p99 over all replicas above 5 seconds (keep the threshold above the
//     job's jitter).
//  4. A slot that failed for good: once per slot, after its last retry.
//
// As a Prometheus rule file (alerts.yml in this package's directory of the
// repository, with grafana-dashboard.json, a Grafana dashboard of every metric):
//
//	groups:
//	  - name: anarchon
//	    rules:
//	      # 1. no success for 3 intervals
//	      - alert: AnarchonJobNotSucceeding
//	        expr: |
//	          time() - max by (job_name) (anarchon_last_success_timestamp_seconds{job_name="report"}) > 3 * 600
//	        for: 5m
//	        annotations:
//	          summary: 'Job {{ $labels.job_name }} has not succeeded on any replica for 3 intervals'
//	      - alert: AnarchonJobNeverSucceeded
//	        expr: |
//	          max by (job_name) (anarchon_next_slot_timestamp_seconds{job_name="report"})
//	            unless on (job_name) anarchon_last_success_timestamp_seconds
//	        for: 30m
//	        annotations:
//	          summary: 'Job {{ $labels.job_name }} is scheduled but no replica has succeeded since they started'
//
//	      # 2. backend errors and late slots keep increasing
//	      - alert: AnarchonBackendErrors
//	        expr: sum by (job_name, op) (rate(anarchon_backend_errors_total[5m])) > 0
//	        for: 15m
//	        annotations:
//	          summary: '{{ $labels.op }} calls for job {{ $labels.job_name }} keep failing'
//	      - alert: AnarchonLateSlots
//	        expr: sum by (job_name) (increase(anarchon_late_slots_total[30m])) > 0
//	        annotations:
//	          summary: 'Replicas reached slots of {{ $labels.job_name }} after their deadline'
//
//	      # 3. slot lag p99 above 5s
//	      - alert: AnarchonSlotLagHigh
//	        expr: |
//	          histogram_quantile(0.99,
//	            sum by (job_name, le) (rate(anarchon_slot_lag_seconds_bucket[10m]))) > 5
//	        for: 15m
//	        annotations:
//	          summary: 'Job {{ $labels.job_name }} starts more than 5s after its slots (p99)'
//
//	      # 4. a slot failed for good: its last attempt failed and no retry follows (one
//	      # per slot, after the last retry of a job with WithRetry)
//	      - alert: AnarchonSlotFailed
//	        expr: sum by (job_name) (increase(anarchon_failed_slots_total{job_name="report"}[30m])) > 0
//	        annotations:
//	          summary: 'A slot of {{ $labels.job_name }} failed after its last attempt'
//
// # Guides
//
// [Metrics and alerts] has the metrics beside the rest of operating a fleet.
//
// [Metrics and alerts]: https://github.com/anarchon/anarchon/blob/main/docs/operating.md#metrics-and-alerts
package metrics
