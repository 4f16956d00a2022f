package metrics

import (
	"errors"
	"fmt"
	"sync"
	"time"

	"github.com/anarchon/anarchon/internal/option"
	"github.com/prometheus/client_golang/prometheus"
)

// Metrics holds the scheduler's Prometheus collectors. Feed it with OnEvent (set as
// scheduler.Config.OnEvent, alone or through Chain) and expose it with Register.
// It is safe for concurrent use, and is itself a prometheus.Collector. Create it
// with New or Wire; the zero value is not usable.
type Metrics struct {
	claims        *prometheus.CounterVec   // job, outcome
	runs          *prometheus.CounterVec   // job, status, manual
	runDuration   *prometheus.HistogramVec // job
	slotLag       *prometheus.HistogramVec // job
	lateSlots     *prometheus.CounterVec   // job
	missedSlots   *prometheus.CounterVec   // job
	deadlines     *prometheus.CounterVec   // job
	skippedSlots  *prometheus.CounterVec   // job
	takeovers     *prometheus.CounterVec   // job
	leaseLosses   *prometheus.CounterVec   // job
	backendErrors *prometheus.CounterVec   // job, op
	lastSuccess   *prometheus.GaugeVec     // job
	nextSlot      *prometheus.GaugeVec     // job
	running       *prometheus.GaugeVec     // job
	pausedSlots   *prometheus.CounterVec   // job
	excludedSlots *prometheus.CounterVec   // job
	jobPaused     *prometheus.GaugeVec     // job
	jobConflict   *prometheus.GaugeVec     // job
	retries       *prometheus.CounterVec   // job
	failedSlots   *prometheus.CounterVec   // job
	cancelAsked   *prometheus.CounterVec   // job
	interval      *prometheus.GaugeVec     // job
	firstSeen     *prometheus.GaugeVec     // job
	entryRuns     *prometheus.CounterVec   // job, status
	entryFailed   *prometheus.CounterVec   // job
	entries       *prometheus.Desc         // state; read from an EntryCounter at collect
	jobEntries    *prometheus.Desc         // job, state; read from an EntryStater at collect
	members       *prometheus.Desc         // read from a Memberer at collect
	buildInfo     prometheus.Gauge         // version, goversion

	all []prometheus.Collector

	slots slotGaps // the job's own last slot, for interval

	entryMu  sync.Mutex
	counters []EntryCounter // CountEntries

	seen        sync.Map // job name → struct{}: the job's series are initialised
	seenAt      sync.Map // job name → struct{}: its first_seen is set
	seenEntries sync.Map // job name → struct{}: its entry series are initialised

	pauseMu sync.Mutex
	paused  map[string]bool // jobs paused on their own ("" : all jobs)
}

// Label names. Every label is bounded: job by the jobs the program registers, the
// others by fixed sets of values (see the package documentation).
const (
	labelJob     = "job_name"
	labelOutcome = "outcome"
	labelStatus  = "status"
	labelManual  = "manual"
	labelOp      = "op"
	labelState   = "state"
)

// New returns the collectors, not yet registered anywhere. An invalid option is an
// error wrapping ErrInvalidOption; a nil Option is skipped.
func New(opts ...Option) (*Metrics, error) {
	cfg := defaultConfig()
	if err := option.Apply(&cfg, opts); err != nil {
		return nil, err
	}
	ns := cfg.namespace
	counter := func(name, help string, labels ...string) *prometheus.CounterVec {
		return prometheus.NewCounterVec(prometheus.CounterOpts{Namespace: ns, Name: name, Help: help}, labels)
	}
	gauge := func(name, help string) *prometheus.GaugeVec {
		return prometheus.NewGaugeVec(prometheus.GaugeOpts{Namespace: ns, Name: name, Help: help}, []string{labelJob})
	}
	histogram := func(name, help string, buckets []float64) *prometheus.HistogramVec {
		return prometheus.NewHistogramVec(prometheus.HistogramOpts{Namespace: ns, Name: name, Help: help, Buckets: buckets}, []string{labelJob})
	}
	m := &Metrics{
		claims: counter("claims_total",
			"Slots this instance tried to claim, by claim outcome (won, running, done, overlap, late, none, retry, other).",
			labelJob, labelOutcome),
		runs: counter("runs_total",
			"Handler runs on this instance that ended, by status and by whether RunNow started them.",
			labelJob, labelStatus, labelManual),
		runDuration: histogram("run_duration_seconds",
			"How long handlers ran on this instance, scheduled and manual runs.", cfg.durationBuckets),
		slotLag: histogram("slot_lag_seconds",
			"Start time minus slot time of scheduled runs on this instance (jitter included).", cfg.lagBuckets),
		lateSlots: counter("late_slots_total",
			"Slots this instance did not start because their start deadline (slot + max lateness) had passed.", labelJob),
		missedSlots: counter("missed_slots_total",
			"Slots this instance recorded missed: due while no instance could claim them (every one down, paused or cut off from the run store).", labelJob),
		deadlines: counter("deadline_missed_total",
			"Slots this instance recorded past their deadline (WithDeadline): not ended ok by then.", labelJob),
		skippedSlots: counter("skipped_slots_total",
			"Slots skipped because an earlier slot still held its lease and the job forbids overlap.", labelJob),
		takeovers: counter("takeovers_total",
			"Runs this instance took over from a holder whose lease expired or was released.", labelJob),
		leaseLosses: counter("lease_losses_total",
			"Runs on this instance whose lease was lost while the handler ran (its context was cancelled).", labelJob),
		backendErrors: counter("backend_errors_total",
			"Failed backend and run-store calls, by operation.", labelJob, labelOp),
		lastSuccess: gauge("last_success_timestamp_seconds",
			"Unix time at which a run of the job last finished with status ok on this instance."),
		nextSlot: gauge("next_slot_timestamp_seconds",
			"Unix time of the job's next slot, as this instance's scheduler computed it."),
		running: gauge("running_handlers",
			"Handlers of the job running on this instance now."),
		pausedSlots: counter("paused_slots_total",
			"Slots that fell while their job was paused, recorded paused by this instance (once per slot across the fleet).", labelJob),
		excludedSlots: counter("excluded_slots_total",
			"Slots that fell on a day of a calendar their job or entry names, recorded excluded by this instance (once per slot across the fleet).", labelJob),
		jobPaused: gauge("job_paused",
			"1 while the job is paused (on its own or with all jobs), as this instance's watch of the stored pauses says; else 0."),
		jobConflict: gauge("job_conflict",
			"1 while the replicas that declare the job declare it differently (schedule or options), as this instance's fleet registry watch says; else 0."),
		retries: counter("retries_total",
			"Failed attempts on this instance whose slot is tried again (WithRetry): the retry was stored, or planned in this process without leases.", labelJob),
		failedSlots: counter("failed_slots_total",
			"Slots whose attempt on this instance failed (error or timeout) with no retry to follow: final failures, once per slot across the fleet.", labelJob),
		cancelAsked: counter("cancel_requests_total",
			"Runs on this instance that a later slot of their job asked to end (overlap policy cancel-other); their handlers' contexts were cancelled.", labelJob),
		interval: gauge("job_interval_seconds",
			"Seconds between the job's last two slots of its own schedule, as this instance's scheduler walked them: an Every job's interval, a cron job's gap before its next slot."),
		firstSeen: gauge("job_first_seen_timestamp_seconds",
			"Unix time this instance first reported an event of the job (at Start, or at the job's registration after it)."),
		entryRuns: counter("entry_runs_total",
			"Handler runs of the job's schedule entries on this instance that ended, by status (also counted in runs_total).",
			labelJob, labelStatus),
		entryFailed: counter("entry_failed_slots_total",
			"Final failures of the job's schedule entries' slots on this instance (also counted in failed_slots_total).", labelJob),
		entries: prometheus.NewDesc(prometheus.BuildFQName(ns, "", "entries"),
			"Schedule entries this instance follows (followed) and stored entries of jobs it does not declare (orphaned), as the schedulers given to CountEntries say.",
			[]string{labelState}, nil),
		jobEntries: prometheus.NewDesc(prometheus.BuildFQName(ns, "", "job_entries"),
			"The job's schedule entries this instance follows, by state (active, paused, ended): one series per job and state, none per entry.",
			[]string{labelJob, labelState}, nil),
		members: prometheus.NewDesc(prometheus.BuildFQName(ns, "", "turn_members"),
			"Instances this one takes turns with (scheduler.Config.Turns), itself included, as the schedulers given to CountEntries see them; absent without turns or while the members are not known.",
			nil, nil),
		buildInfo: newBuildInfo(ns),
		slots:     slotGaps{last: map[string]time.Time{}},
		paused:    map[string]bool{},
	}
	m.all = []prometheus.Collector{
		m.claims, m.runs, m.runDuration, m.slotLag, m.lateSlots, m.missedSlots, m.deadlines, m.skippedSlots,
		m.takeovers, m.leaseLosses, m.backendErrors, m.lastSuccess, m.nextSlot, m.running,
		m.pausedSlots, m.excludedSlots, m.jobPaused, m.jobConflict, m.retries, m.failedSlots,
		m.cancelAsked, m.interval, m.firstSeen, m.entryRuns, m.entryFailed, m.buildInfo,
	}
	return m, nil
}

// Wire is New followed by Register: one call gives the collectors to r.
//
//	m, err := metrics.Wire(prometheus.DefaultRegisterer)
//	if err != nil { return err }
//	s, err := scheduler.New(scheduler.Config{Backend: b, OnEvent: m.OnEvent})
func Wire(r prometheus.Registerer, opts ...Option) (*Metrics, error) {
	m, err := New(opts...)
	if err != nil {
		return nil, err
	}
	if err := m.Register(r); err != nil {
		return nil, err
	}
	return m, nil
}

// Register registers all the collectors on r as one collector: either all are
// registered or none is. A nil r is an error wrapping ErrInvalidRegisterer;
// collectors already registered on r (this Metrics, or another one with the same
// namespace) are an error wrapping ErrAlreadyRegistered and the
// prometheus.AlreadyRegisteredError.
//
// To tell apart two schedulers that share a registry, register each Metrics (with
// the same namespace) on prometheus.WrapRegistererWith(prometheus.Labels{"scheduler":
// "billing"}, r).
func (m *Metrics) Register(r prometheus.Registerer) error {
	if r == nil {
		return fmt.Errorf("%w: Register needs a prometheus.Registerer, got nil (use prometheus.DefaultRegisterer or prometheus.NewRegistry())", ErrInvalidRegisterer)
	}
	if err := r.Register(m); err != nil {
		if are, ok := errors.AsType[prometheus.AlreadyRegisteredError](err); ok {
			return fmt.Errorf("%w: the anarchon collectors are already registered on this registerer: %w", ErrAlreadyRegistered, are)
		}
		return fmt.Errorf("metrics: register: %w", err)
	}
	return nil
}

// Describe implements prometheus.Collector.
func (m *Metrics) Describe(ch chan<- *prometheus.Desc) {
	for _, c := range m.all {
		c.Describe(ch)
	}
	ch <- m.entries
	ch <- m.jobEntries
	ch <- m.members
}

// Collect implements prometheus.Collector.
func (m *Metrics) Collect(ch chan<- prometheus.Metric) {
	for _, c := range m.all {
		c.Collect(ch)
	}
	m.collectEntries(ch)
}
