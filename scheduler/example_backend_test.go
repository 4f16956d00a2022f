package scheduler_test

import (
	"context"
	"fmt"
	"sync/atomic"

	"github.com/anarchon/anarchon/scheduler"
)

// auditedBackend is a backend of one's own: it wraps the memory backend and counts
// the results stored through it (a real one would, say, also write them to an
// audit log). Embedding the concrete *scheduler.MemoryBackend keeps the memory
// backend's optional capabilities (leases through Runs, RecordClaim); embedding
// the scheduler.Backend interface instead would hide them.
type auditedBackend struct {
	*scheduler.MemoryBackend
	results atomic.Int64
}

func (b *auditedBackend) Name() string { return "audited" }

func (b *auditedBackend) SaveResult(ctx context.Context, job string, r scheduler.StoredResult, keep scheduler.Retention) error {
	b.results.Add(1)
	return b.MemoryBackend.SaveResult(ctx, job, r, keep)
}

// The optional capabilities are checked at compile time.
var (
	_ scheduler.Backend       = (*auditedBackend)(nil)
	_ scheduler.LeaseBackend  = (*auditedBackend)(nil)
	_ scheduler.ClaimRecorder = (*auditedBackend)(nil)
)

// A backend implements scheduler.Backend; the scheduler finds its optional
// capabilities by type assertion, so a wrapper must keep the ones it means to keep.
// The conformance suite checks a backend in its tests (it needs a *testing.T, so it
// cannot run in an example). Its constructor returns a new value each time, all of
// them sharing one store, as separate processes share a server:
//
//	func TestAuditedBackend(t *testing.T) {
//		shared := scheduler.NewMemoryBackend()
//		backendtest.Run(t, func(t *testing.T) scheduler.Backend {
//			return &auditedBackend{MemoryBackend: shared}
//		})
//	}
//
// and a run store's tests call backendtest.RunLeases the same way.
func ExampleBackend() {
	ctx := context.Background()
	clock := newStepClock(at(12, 0, 30))
	mem := scheduler.NewMemoryBackendWithClock(clock)
	for _, b := range []scheduler.Backend{mem, &auditedBackend{MemoryBackend: mem}, withoutLeases{mem}} {
		_, leases := b.(scheduler.LeaseBackend)
		_, recorder := b.(scheduler.ClaimRecorder)
		_, windower := b.(scheduler.JobWindower)
		fmt.Printf("%-7s leases=%-5v claim recorder=%-5v per-job window=%v\n", b.Name(), leases, recorder, windower)
	}

	b := &auditedBackend{MemoryBackend: mem}
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
	fmt.Println("results stored through the wrapper:", b.results.Load())
	// Output:
	// memory  leases=true  claim recorder=true  per-job window=false
	// audited leases=true  claim recorder=true  per-job window=false
	// memory  leases=false claim recorder=false per-job window=false
	// results stored through the wrapper: 1
}
