package kvlease

import (
	"testing"
	"testing/synctest"
	"time"

	"github.com/nats-io/nats.go/jetstream"
)

// stuckWatcher is a watcher whose channel nats.go never closes: its connection
// closed under it.
type stuckWatcher struct {
	updates chan jetstream.KeyValueEntry
	stopped chan struct{}
}

func (w *stuckWatcher) Updates() <-chan jetstream.KeyValueEntry { return w.updates }
func (w *stuckWatcher) Stop() error                             { close(w.stopped); return nil }

// A stopped watcher's drain ends once nothing came for watcherDrainIdle, also
// when its channel is never closed; an update delivered meanwhile is taken.
func TestStopWatcherDrainEnds(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		w := &stuckWatcher{updates: make(chan jetstream.KeyValueEntry), stopped: make(chan struct{})}
		stopWatcher(w)
		<-w.stopped
		time.Sleep(watcherDrainIdle / 2)
		select {
		case w.updates <- nil: // a late delivery is drained, not left blocked
		case <-time.After(time.Second):
			t.Fatal("the drain took no update")
		}
		time.Sleep(watcherDrainIdle + time.Second)
		synctest.Wait()
		select {
		case w.updates <- nil:
			t.Fatal("the drain still runs")
		default:
		}
	})
}
