package scheduler_test

import (
	"context"
	"fmt"
	"runtime"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/anarchon/anarchon/backend"
	"github.com/anarchon/anarchon/backend/memory"
	"github.com/anarchon/anarchon/scheduler"
)

// BenchmarkEntriesFollowed loads b.N entries, every 10 minutes, into a started
// scheduler and reports the heap it holds per entry it follows (the store's own
// copy, in the same process, is not counted).
func BenchmarkEntriesFollowed(b *testing.B) {
	mem := memory.New()
	ctx := context.Background()
	for i := range b.N {
		_, err := mem.CreateEntry(ctx, backend.Entry{Job: "report", ID: fmt.Sprintf("tenant-%07d", i),
			EntrySpec: backend.EntrySpec{Every: 10 * time.Minute, Payload: []byte(`{"tenant":42}`)}, Updated: time.Now()})
		require.NoError(b, err)
	}
	s, err := scheduler.New(scheduler.Config{Backend: mem, Instance: "bench"})
	require.NoError(b, err)
	require.NoError(b, s.Declare("report", func(context.Context, scheduler.Run) error { return nil }))
	before := heap()
	b.ResetTimer()
	start := time.Now()
	require.NoError(b, s.Start(ctx))
	require.NoError(b, s.EntriesLoaded(ctx))
	b.StopTimer()
	loaded := time.Since(start)
	after := heap()
	followed, _ := s.EntryCounts()
	require.Equal(b, b.N, followed)
	b.ReportMetric(float64(after-before)/float64(b.N), "B/entry")
	b.ReportMetric(loaded.Seconds()*1e6/float64(b.N), "µs-load/entry")
	require.NoError(b, s.Stop(ctx))
	runtime.KeepAlive(mem)
}

func heap() int64 {
	runtime.GC()
	runtime.GC()
	var m runtime.MemStats
	runtime.ReadMemStats(&m)
	return int64(m.HeapAlloc)
}

// BenchmarkEntriesSummary100k sums up a job of 100,000 entries followed (the
// row of a job of entries in a jobs reply, with nothing failing to read).
func BenchmarkEntriesSummary100k(b *testing.B) {
	mem := memory.New()
	ctx := context.Background()
	for i := range 100_000 {
		_, err := mem.CreateEntry(ctx, backend.Entry{Job: "report", ID: fmt.Sprintf("tenant-%07d", i),
			EntrySpec: backend.EntrySpec{Every: 10 * time.Minute, Paused: i%10 == 0}, Updated: time.Now()})
		require.NoError(b, err)
	}
	s, err := scheduler.New(scheduler.Config{Backend: mem, Instance: "bench"})
	require.NoError(b, err)
	require.NoError(b, s.Declare("report", func(context.Context, scheduler.Run) error { return nil }))
	require.NoError(b, s.Start(ctx))
	defer func() { require.NoError(b, s.Stop(ctx)) }()
	require.NoError(b, s.EntriesLoaded(ctx))
	b.ResetTimer()
	for b.Loop() {
		sum, err := s.EntriesSummary(ctx, "report")
		require.NoError(b, err)
		require.Equal(b, 90_000, sum.Active)
	}
}
