package backend_test

import (
	"context"
	"fmt"
	"sync/atomic"
	"time"

	"github.com/anarchon/anarchon/backend"
	"github.com/anarchon/anarchon/backend/memory"
	"github.com/anarchon/anarchon/scheduler"
	"github.com/anarchon/anarchon/stepclock"
)

// withoutLeases hides a backend's optional capabilities: embedding the Backend
// interface keeps only its methods, so the scheduler finds no RunStore.
type withoutLeases struct{ backend.Backend }

// auditedBackend is a backend of one's own: it wraps the memory backend and counts
// the history reads made through it (a real one would, say, log who read what). Embedding the concrete *memory.Backend keeps the memory
// backend's optional capabilities (leases through Runs, RecordClaim); embedding
// the backend.Backend interface instead would hide them.
type auditedBackend struct {
	*memory.Backend
	reads atomic.Int64
}

func (b *auditedBackend) Name() string { return "audited" }

func (b *auditedBackend) History(ctx context.Context, job string, limit int) ([]backend.RunRecord, error) {
	b.reads.Add(1)
	return b.Backend.History(ctx, job, limit)
}

// The optional capabilities are checked at compile time.
var (
	_ backend.Backend       = (*auditedBackend)(nil)
	_ backend.LeaseBackend  = (*auditedBackend)(nil)
	_ backend.ClaimRecorder = (*auditedBackend)(nil)
)

// A backend implements backend.Backend; the scheduler finds its optional
// capabilities by type assertion, so a wrapper must keep the ones it means to keep.
// The conformance suite checks a backend in its tests (it needs a *testing.T, so it
// cannot run in an example). Its constructor returns a new value each time, all of
// them sharing one store, as separate processes share a server:
//
//	func TestAuditedBackend(t *testing.T) {
//		shared := memory.New()
//		backendtest.Run(t, func(t *testing.T) backend.Backend {
//			return &auditedBackend{Backend: shared}
//		})
//	}
//
// and a run store's tests call backendtest.RunLeases the same way.
func ExampleBackend() {
	ctx := context.Background()
	clock := stepclock.New(at(12, 0, 30))
	mem := memory.NewWithClock(clock)
	for _, b := range []backend.Backend{mem, &auditedBackend{Backend: mem}, withoutLeases{mem}} {
		_, leases := b.(backend.LeaseBackend)
		_, recorder := b.(backend.ClaimRecorder)
		_, windower := b.(backend.JobWindower)
		fmt.Printf("%-7s leases=%-5v claim recorder=%-5v per-job window=%v\n", b.Name(), leases, recorder, windower)
	}

	b := &auditedBackend{Backend: mem}
	s, err := scheduler.New(scheduler.Config{Backend: b, Clock: clock})
	if err != nil {
		panic(err)
	}
	err = s.Cron("audit", "0 0 1 1 *", func(context.Context, scheduler.Run) error { return nil },
		scheduler.WithOverlap(scheduler.OverlapSkip)) // accepted: the backend has leases
	if err != nil {
		panic(err)
	}
	if err := s.Start(ctx); err != nil {
		panic(err)
	}
	defer s.Stop(ctx)
	if _, err := s.RunNow(ctx, "audit"); err != nil {
		panic(err)
	}
	recs, err := s.History(ctx, "audit", 10)
	if err != nil {
		panic(err)
	}
	// Start reads the job's history too, beside the loop (missed slots).
	fmt.Println("history read through the wrapper:", b.reads.Load() > 0, "- the manual run:", recs[0].Status)
	// Output:
	// memory  leases=true  claim recorder=true  per-job window=false
	// audited leases=true  claim recorder=true  per-job window=false
	// memory  leases=false claim recorder=false per-job window=false
	// history read through the wrapper: true - the manual run: ok
}

// at is 2030-01-01 (a Tuesday) at hh:mm:ss UTC: the examples' fixed times.
func at(hh, mm, ss int) time.Time { return time.Date(2030, 1, 1, hh, mm, ss, 0, time.UTC) }
