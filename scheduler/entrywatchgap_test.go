package scheduler_test

import (
	"context"
	"errors"
	"sync"
	"testing"
	"testing/synctest"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/anarchon/anarchon/backend"
	"github.com/anarchon/anarchon/backend/memory"
	"github.com/anarchon/anarchon/scheduler"
)

// cutWatch is a memory backend whose entries watch can be cut: the watch
// running then ends with an error, and the next ones wait until mend.
type cutWatch struct {
	*memory.Backend
	mu     sync.Mutex
	cut    chan struct{} // closed: the running watch ends
	mended chan struct{} // closed: watches may run again
}

func newCutWatch(b *memory.Backend) *cutWatch {
	m := make(chan struct{})
	close(m)
	return &cutWatch{Backend: b, cut: make(chan struct{}), mended: m}
}

func (c *cutWatch) WatchEntries(ctx context.Context, fn func(backend.EntryChange)) error {
	c.mu.Lock()
	cut, mended := c.cut, c.mended
	c.mu.Unlock()
	select {
	case <-mended:
	case <-ctx.Done():
		return ctx.Err()
	}
	wctx, cancel := context.WithCancel(ctx)
	defer cancel()
	go func() {
		select {
		case <-cut:
			cancel()
		case <-wctx.Done():
		}
	}()
	err := c.Backend.WatchEntries(wctx, fn)
	if ctx.Err() == nil {
		return errors.New("entries watch cut")
	}
	return err
}

// cutNow ends the running watch; the next waits for mend.
func (c *cutWatch) cutNow() {
	c.mu.Lock()
	defer c.mu.Unlock()
	close(c.cut)
	c.cut, c.mended = make(chan struct{}), make(chan struct{})
}

func (c *cutWatch) mend() {
	c.mu.Lock()
	defer c.mu.Unlock()
	close(c.mended)
}

// An instance whose entries watch ended claims no entry slot until it has read
// the entries again: an entry removed meanwhile never runs on it, and the
// slots it gave up are reported late, not dropped in silence.
func TestEntryWatchGapHoldsFirstClaims(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		mem := memory.New()
		cw := newCutWatch(mem)
		runs := newEntryRuns()
		var mu sync.Mutex
		var late []scheduler.Event
		a := newScheduler(t, cw, "a", func(c *scheduler.Config) {
			c.OnEvent = func(e scheduler.Event) {
				if e.Kind == scheduler.EventLate && e.Entry != "" {
					mu.Lock()
					late = append(late, e)
					mu.Unlock()
				}
			}
		})
		b := newScheduler(t, mem, "b")
		for _, s := range []*scheduler.Scheduler{a, b} {
			require.NoError(t, s.Declare("report", runs.handler))
			require.NoError(t, s.Start(t.Context()))
			require.NoError(t, s.EntriesLoaded(t.Context()))
			t.Cleanup(func() { _ = s.Stop(context.Background()) })
		}
		e1, err := b.AddEntry(t.Context(), "report", "t1", scheduler.EntrySpec{Every: time.Second})
		require.NoError(t, err)
		time.Sleep(3500 * time.Millisecond)
		require.NotEmpty(t, runs.slots("t1"), "the entry runs while both follow the store")

		cw.cutNow()
		synctest.Wait()
		require.NoError(t, b.RemoveEntry(t.Context(), "report", "t1", e1.Revision))
		removed := time.Now()
		time.Sleep(5 * time.Second)
		for slot, who := range runs.slots("t1") {
			assert.False(t, time.UnixMilli(slot).After(removed), "slot %v of the removed entry ran on %v", time.UnixMilli(slot), who)
		}
		mu.Lock()
		assert.NotEmpty(t, late, "the slots given up while the view was stale are reported")
		for _, e := range late {
			assert.Equal(t, "report", e.Job)
			assert.Equal(t, "t1", e.Entry)
			assert.ErrorContains(t, e.Err, "not read again")
		}
		mu.Unlock()

		cw.mend()
		_, err = b.AddEntry(t.Context(), "report", "t2", scheduler.EntrySpec{Every: time.Second})
		require.NoError(t, err)
		time.Sleep(4 * time.Second)
		ran := map[string]bool{}
		for _, who := range runs.slots("t2") {
			for _, w := range who {
				ran[w] = true
			}
		}
		assert.NotEmpty(t, ran, "entries run again once the watch is back")
	})
}
