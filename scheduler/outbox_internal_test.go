package scheduler

import (
	"context"
	"sync/atomic"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/anarchon/anarchon/backend/memory"
)

var sink atomic.Int64

// Each job's records are written by one worker, oldest first, each exactly once,
// also a record added just as the worker popped the job's last one (a second
// worker for the job would write it twice, and could pop the one behind it
// unwritten). This drives that window with the internal outbox (a is written;
// while its worker moves on, b is added, then c while b is being written), as the
// window has no call to hook.
func TestOutboxRecordAddedAsTheLastIsPoppedIsWrittenOnce(t *testing.T) {
	s, err := New(Config{Backend: memory.New(), Instance: "A"})
	require.NoError(t, err)
	require.NoError(t, s.Every("job", time.Hour, func(context.Context, Run) error { return nil }))
	j := s.jobs["job"]

	var twice, never, iterations int
	deadline := time.Now().Add(3 * time.Second)
	for i := 0; time.Now().Before(deadline) && i < 400000 && never == 0 && twice == 0; i++ {
		iterations++
		s.out = outbox{}
		s.out.init()
		var wa, wb, wc atomic.Int32
		var aDone atomic.Bool
		added := make(chan struct{})
		spin := (i * 7) % 400
		release := make(chan struct{})
		b := &pendingWrite{j: j, op: "save_result", write: func(context.Context) error {
			wb.Add(1)
			<-release // b's write takes a while (a slow store)
			return nil
		}}
		c := &pendingWrite{j: j, op: "save_result", write: func(context.Context) error {
			wc.Add(1)
			return nil
		}}
		go func() {
			defer close(added)
			defer close(release)
			// Busy until a's write returns, then add b at varying instants after
			// it: some fall between the worker's pop and its next look.
			for !aDone.Load() {
			}
			for k := 0; k < spin; k++ {
				sink.Add(1)
			}
			s.out.add(s, b)
			// c comes while b is being written.
			for wb.Load() == 0 {
			}
			for end := time.Now().Add(200 * time.Microsecond); time.Now().Before(end) && wb.Load() < 2; {
			}
			s.out.add(s, c)
		}()
		s.out.add(s, &pendingWrite{j: j, op: "save_result", write: func(context.Context) error {
			wa.Add(1)
			aDone.Store(true)
			return nil
		}})
		<-added
		ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
		left := s.out.drain(ctx)
		cancel()
		require.Zero(t, left, "iteration %d: records left", i)
		for _, n := range []int32{wa.Load(), wb.Load(), wc.Load()} {
			switch {
			case n > 1:
				twice++
			case n == 0:
				never++
			}
		}
		if wa.Load() != 1 || wb.Load() != 1 || wc.Load() != 1 {
			t.Logf("iteration %d (spin %d): a written %d, b %d, c %d times", i, spin, wa.Load(), wb.Load(), wc.Load())
		}
	}
	t.Logf("%d iterations", iterations)
	require.Zero(t, never, "a record counted as stored was never written")
	require.Zero(t, twice, "a record was written by two workers of one job")
}
