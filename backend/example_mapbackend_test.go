package backend_test

import (
	"context"
	"fmt"
	"os"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/anarchon/anarchon/backend"
	"github.com/anarchon/anarchon/backend/backendtest"
	"github.com/anarchon/anarchon/scheduler"
)

// docs/backends.md ("Writing your own backend") shows this file from the line after
// "page:begin" to the line before "page:end"; TestBackendsPageShowsMapBackend checks
// that it still does.

// page:begin

// mapBackend keeps claims and results in maps under one mutex. It coordinates
// schedulers within one process only, which makes it the contract in its simplest
// form; memory.Backend is the complete reading, with leases and pauses.
type mapBackend struct {
	mu      sync.Mutex
	claims  map[string]map[int64]backend.ClaimRecord // job → slot (Unix ms) → the winning claim
	manual  map[string][]backend.ClaimRecord
	results map[string][]backend.StoredResult
	ttl     map[string]time.Duration // job → how long its results are shown
}

func newMapBackend() *mapBackend {
	return &mapBackend{
		claims:  map[string]map[int64]backend.ClaimRecord{},
		manual:  map[string][]backend.ClaimRecord{},
		results: map[string][]backend.StoredResult{},
		ttl:     map[string]time.Duration{},
	}
}

func (b *mapBackend) Name() string { return "map" }

// DedupeWindow: claims are never forgotten here, so no instance is ever too late.
func (b *mapBackend) DedupeWindow() time.Duration { return backend.Forever }

func (b *mapBackend) Init(context.Context) error                          { return nil }
func (b *mapBackend) PrepareJob(context.Context, backend.JobLimits) error { return nil }
func (b *mapBackend) Close(context.Context) error                         { return nil }

// Claim is the one step that must be atomic; the mutex makes the check and the write
// one operation. The same claim sent again (same token) is still the winner.
func (b *mapBackend) Claim(_ context.Context, in backend.ClaimInput) (bool, error) {
	if err := backend.ValidateJobName(in.Job); err != nil || in.Token == "" {
		return false, fmt.Errorf("%w: a claim needs a valid job name and a token", backend.ErrInvalidClaim)
	}
	b.mu.Lock()
	defer b.mu.Unlock()
	slots := b.claims[in.Job]
	if slots == nil {
		slots = map[int64]backend.ClaimRecord{}
		b.claims[in.Job] = slots
	}
	if c, ok := slots[in.Slot.UnixMilli()]; ok {
		return c.Token == in.Token, nil
	}
	slots[in.Slot.UnixMilli()] = claimRecordOf(in)
	return true, nil
}

// RecordManualRun records a run from RunNow: no deduplication.
func (b *mapBackend) RecordManualRun(_ context.Context, in backend.ClaimInput) (time.Time, error) {
	b.mu.Lock()
	defer b.mu.Unlock()
	b.manual[in.Job] = append(b.manual[in.Job], claimRecordOf(in))
	return in.Slot, nil // the slot asked for is the one used
}

func (b *mapBackend) SaveResult(_ context.Context, job string, r backend.StoredResult, keep backend.Retention) error {
	b.mu.Lock()
	defer b.mu.Unlock()
	rs := append(b.results[job], r)
	if keep.Size > 0 && len(rs) > keep.Size {
		rs = rs[len(rs)-keep.Size:]
	}
	b.results[job] = rs
	b.ttl[job] = keep.TTL
	return nil
}

// History merges the job's claims and results with BuildHistory, so the records
// gain new fields with no change here. A result older than the job's history TTL
// is left out, and so is its claim.
func (b *mapBackend) History(_ context.Context, job string, limit int) ([]backend.RunRecord, error) {
	b.mu.Lock()
	defer b.mu.Unlock()
	var results []backend.StoredResult
	expired := map[string]bool{}
	for _, r := range b.results[job] {
		if ttl := b.ttl[job]; ttl > 0 && time.Since(r.FinishedAt) > ttl {
			expired[r.Token] = true
			continue
		}
		results = append(results, r)
	}
	var claims []backend.ClaimRecord
	for _, c := range b.manual[job] {
		if !expired[c.Token] {
			claims = append(claims, c)
		}
	}
	for _, c := range b.claims[job] {
		if !expired[c.Token] {
			claims = append(claims, c)
		}
	}
	return backend.BuildHistory(job, claims, results, limit), nil
}

func claimRecordOf(in backend.ClaimInput) backend.ClaimRecord {
	return backend.ClaimRecord{Slot: in.Slot, Token: in.Token, Instance: in.Instance, Attempt: in.Attempt,
		Manual: in.Manual, At: in.At, RequestedBy: in.RequestedBy}
}

// page:end

var _ backend.Backend = (*mapBackend)(nil)

// The rule of the contract on the smallest backend: of three instances claiming one
// slot, one wins, and its claim sent again wins again.
func ExampleBackend_writingYourOwn() {
	ctx := context.Background()
	b := newMapBackend()
	slot := time.Date(2030, 1, 1, 12, 0, 10, 0, time.UTC)
	claim := func(instance string) backend.ClaimInput {
		return backend.ClaimInput{Job: "tick", Slot: slot, Token: "token-" + instance, Instance: instance, Attempt: 1}
	}
	for _, instance := range []string{"a", "b", "c"} {
		won, err := b.Claim(ctx, claim(instance))
		if err != nil {
			panic(err)
		}
		fmt.Println(instance, "won:", won)
	}
	again, _ := b.Claim(ctx, claim("a"))
	fmt.Println("a again:", again)

	err := b.SaveResult(ctx, "tick", backend.StoredResult{Slot: slot, Token: "token-a", Instance: "a", Attempt: 1,
		Status: scheduler.StatusOK, StartedAt: slot, FinishedAt: slot.Add(time.Second)}, backend.Retention{Size: 100})
	if err != nil {
		panic(err)
	}
	runs, _ := b.History(ctx, "tick", 10)
	for _, r := range runs {
		fmt.Println(r.Slot.Format(time.TimeOnly), r.Instance, r.Status, r.Duration)
	}
	// Output:
	// a won: true
	// b won: false
	// c won: false
	// a again: true
	// 12:00:10 a ok 1s
}

// TestBackendsPageShowsMapBackend: docs/backends.md shows the map backend exactly as
// this file has it, so the page's code compiles and does what its example says.
func TestBackendsPageShowsMapBackend(t *testing.T) {
	src, err := os.ReadFile("example_mapbackend_test.go")
	require.NoError(t, err)
	_, code, ok := strings.Cut(string(src), "// page:begin\n\n")
	if ok {
		code, _, ok = strings.Cut(code, "\n// page:end\n")
	}
	require.True(t, ok, "example_mapbackend_test.go has its page:begin and page:end lines")
	page, err := os.ReadFile("../docs/backends.md")
	require.NoError(t, err)
	assert.Contains(t, string(page), "```go\n"+code+"```\n",
		"docs/backends.md shows the map backend as example_mapbackend_test.go has it: copy the code between page:begin and page:end into its go block")
}

// The map backend passes the conformance suite: one value is its one store, as a
// server is for the backends of separate processes.
func TestMapBackendConformance(t *testing.T) {
	shared := newMapBackend()
	backendtest.Run(t, func(*testing.T) backend.Backend { return shared })
}
