package memory

import (
	"context"
	"sync"
	"time"

	"github.com/anarchon/anarchon/backend"
	"github.com/anarchon/anarchon/internal/backendutil"
)

// Backend keeps everything in process memory. It coordinates schedulers in the
// same process only, which makes it the backend for unit tests and the simplest
// reading of the contract. It never forgets a claim, so its window is Forever.
//
// Its run store (Runs) writes its records into it under the store's mutex: the
// store's mutex is taken before the backend's, never after.
type Backend struct {
	clock backend.Clock

	mu      sync.Mutex
	claims  map[memKey]backend.ClaimRecord
	results map[string][]backend.StoredResult
	manual  map[string][]backend.ClaimRecord
	// floor is, per job, the oldest slot whose result is still kept: older claims
	// are remembered for deduplication but no longer shown in history.
	floor map[string]time.Time
	// ttl is, per job, the history TTL its last write carried (absent: none).
	ttl map[string]time.Duration
	// pause holds the stored pauses (Pauser), created on first use.
	pause *memPauses
	// entries holds the schedule entries (EntryStore), created on first use.
	entries *memEntries
	// cals holds the calendars (CalendarStore), created on first use.
	cals *memCalendars
	// members holds the live instances (Membership), created on first use.
	members *memMembers

	runsOnce sync.Once
	runs     *RunStore
}

type memKey struct {
	job  string
	slot int64 // unix ms
}

// New returns an empty memory backend on the system clock.
func New() *Backend { return NewWithClock(backend.SystemClock{}) }

// NewWithClock returns an empty memory backend whose leases are judged by
// clock (the "store clock" of the lease rules).
func NewWithClock(clock backend.Clock) *Backend {
	b := &Backend{
		clock:   clock,
		claims:  make(map[memKey]backend.ClaimRecord),
		results: make(map[string][]backend.StoredResult),
		manual:  make(map[string][]backend.ClaimRecord),
		floor:   make(map[string]time.Time),
		ttl:     make(map[string]time.Duration),
	}
	return b
}

// Name returns "memory".
func (*Backend) Name() string { return "memory" }

// DedupeWindow returns Forever: claims are never forgotten.
func (*Backend) DedupeWindow() time.Duration { return backend.Forever }

// Init does nothing.
func (*Backend) Init(context.Context) error { return nil }

// PrepareJob does nothing.
func (*Backend) PrepareJob(context.Context, backend.JobLimits) error { return nil }

// Close does nothing.
func (*Backend) Close(context.Context) error { return nil }

// Claim is atomic under the backend's mutex: the first token for (job, slot) wins, and
// the same token asking again is told it won.
func (b *Backend) Claim(ctx context.Context, in backend.ClaimInput) (bool, error) {
	if err := ctx.Err(); err != nil {
		return false, err
	}
	if err := backendutil.CheckClaim("memory", in.Job, in.Token); err != nil {
		return false, err
	}
	k := memKey{in.Job, in.Slot.UnixMilli()}
	b.mu.Lock()
	defer b.mu.Unlock()
	if existing, ok := b.claims[k]; ok {
		return existing.Token == in.Token, nil
	}
	b.claims[k] = claimRecordOf(in, b.clock.Now())
	b.noteTTL(in.Job, in.HistoryTTL)
	return true, nil
}

// noteTTL remembers the job's history TTL, which History applies (0: none).
func (b *Backend) noteTTL(job string, ttl time.Duration) {
	if ttl > 0 {
		b.ttl[job] = ttl
	} else {
		delete(b.ttl, job)
	}
}

// RecordClaim records a claim won through the lease store, as a history record.
func (b *Backend) RecordClaim(ctx context.Context, in backend.ClaimInput) error {
	if err := ctx.Err(); err != nil {
		return err
	}
	if err := backendutil.CheckClaim("memory", in.Job, in.Token); err != nil {
		return err
	}
	b.mu.Lock()
	defer b.mu.Unlock()
	b.manual[in.Job] = append(b.manual[in.Job], claimRecordOf(in, b.clock.Now()))
	b.noteTTL(in.Job, in.HistoryTTL)
	return nil
}

// RecordManualRun records a RunNow run; it is never de-duplicated.
func (b *Backend) RecordManualRun(ctx context.Context, in backend.ClaimInput) (time.Time, error) {
	if err := ctx.Err(); err != nil {
		return time.Time{}, err
	}
	in.Manual = true
	b.mu.Lock()
	defer b.mu.Unlock()
	b.manual[in.Job] = append(b.manual[in.Job], claimRecordOf(in, b.clock.Now()))
	return in.Slot, nil
}

// SaveResult appends r and trims the job's results to keep.
func (b *Backend) SaveResult(ctx context.Context, job string, r backend.StoredResult, keep backend.Retention) error {
	if err := ctx.Err(); err != nil {
		return err
	}
	b.mu.Lock()
	defer b.mu.Unlock()
	b.saveLocked(job, r, keep)
	return nil
}

// WriteRecords appends recs to the job's results as SaveResult does
// (backend.RecordWriter); a record stored already (the same slot, token and
// status) is not stored again.
func (b *Backend) WriteRecords(ctx context.Context, job string, recs []backend.StoredResult, keep backend.Retention) error {
	if err := ctx.Err(); err != nil {
		return err
	}
	b.mu.Lock()
	defer b.mu.Unlock()
	for _, r := range recs {
		if !b.storedLocked(job, r) {
			b.saveLocked(job, r, keep)
		}
	}
	return nil
}

// RecordOnce appends rec to job's results as SaveResult does, unless they hold
// a result of its slot and token already (backend.OnceRecorder); it reports
// whether it appended it. One mutex makes concurrent calls take turns, so the
// first one stores it. A result trimmed by keep is forgotten. A record without
// a token is refused (backend.ErrInvalidClaim).
func (b *Backend) RecordOnce(ctx context.Context, job string, rec backend.StoredResult, keep backend.Retention) (bool, error) {
	if err := ctx.Err(); err != nil {
		return false, err
	}
	if err := backendutil.CheckClaim("memory", job, rec.Token); err != nil {
		return false, err
	}
	b.mu.Lock()
	defer b.mu.Unlock()
	for _, r := range b.results[job] {
		if r.Token == rec.Token && r.Slot.Equal(rec.Slot) {
			return rec.Instance != "" && r.Instance == rec.Instance, nil // a retry of its own write
		}
	}
	b.saveLocked(job, rec, keep)
	return true, nil
}

// storedLocked reports whether job's results hold r's slot, token and status.
func (b *Backend) storedLocked(job string, r backend.StoredResult) bool {
	rs := b.results[job]
	for i := len(rs) - 1; i >= 0; i-- { // a repeat is most likely recent
		if rs[i].Token == r.Token && rs[i].Status == r.Status && rs[i].Slot.Equal(r.Slot) {
			return true
		}
	}
	return false
}

// saveLocked appends r and trims the job's results to keep.
func (b *Backend) saveLocked(job string, r backend.StoredResult, keep backend.Retention) {
	b.noteTTL(job, keep.TTL)
	rs := append(b.results[job], r)
	stored := len(rs)
	if keep.TTL > 0 {
		cut := b.clock.Now().Add(-keep.TTL)
		kept := rs[:0]
		for _, x := range rs {
			if !x.FinishedAt.Before(cut) {
				kept = append(kept, x)
			}
		}
		rs = kept
	}
	if keep.Size > 0 && len(rs) > keep.Size {
		rs = append([]backend.StoredResult(nil), rs[len(rs)-keep.Size:]...)
	}
	b.results[job] = rs
	if len(rs) < stored && len(rs) > 0 {
		oldest := rs[0].Slot
		for _, x := range rs {
			if x.Slot.Before(oldest) {
				oldest = x.Slot
			}
		}
		b.floor[job] = oldest
		kept := b.manual[job][:0]
		for _, c := range b.manual[job] {
			if !c.Slot.Before(oldest) {
				kept = append(kept, c)
			}
		}
		b.manual[job] = kept
	}
}

// History merges claims and results with BuildHistory.
func (b *Backend) History(ctx context.Context, job string, limit int) ([]backend.RunRecord, error) {
	if err := ctx.Err(); err != nil {
		return nil, err
	}
	b.mu.Lock()
	var cut time.Time // records older than the history TTL are not shown
	if ttl := b.ttl[job]; ttl > 0 {
		cut = b.clock.Now().Add(-ttl)
	}
	var claims []backend.ClaimRecord
	for _, c := range b.manual[job] {
		if !c.At.Before(cut) {
			claims = append(claims, c)
		}
	}
	floor := b.floor[job]
	for k, c := range b.claims {
		if k.job == job && !c.Slot.Before(floor) && !c.At.Before(cut) {
			claims = append(claims, c)
		}
	}
	var results []backend.StoredResult
	for _, r := range b.results[job] {
		if !r.FinishedAt.Before(cut) {
			results = append(results, r)
		}
	}
	b.mu.Unlock()
	return backend.BuildHistory(job, claims, results, limit), nil
}

func claimRecordOf(in backend.ClaimInput, at time.Time) backend.ClaimRecord {
	if !in.At.IsZero() {
		at = in.At
	}
	return backend.ClaimRecord{
		Slot:        in.Slot,
		Token:       in.Token,
		Instance:    in.Instance,
		Attempt:     max(in.Attempt, 1),
		Manual:      in.Manual,
		Backfill:    in.Backfill,
		At:          at,
		RequestedBy: in.RequestedBy,
	}
}
