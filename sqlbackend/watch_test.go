package sqlbackend

import (
	"context"
	"database/sql"
	"testing"
)

// FuzzNotifyPayload: a notification's payload comes from the database; any text is
// read without a panic, and the payload of a change of (job, slot) wakes exactly
// that run's watchers, whatever the job's name holds.
func FuzzNotifyPayload(f *testing.F) {
	for _, s := range []string{"p", "e", "r:1800000000000:report", "r::", "r:-5:a:b", "r:x:y", "", "r:9223372036854775808:j"} {
		f.Add(s, "job ✓ a:b/c", int64(1_800_000_000_000))
	}
	f.Fuzz(func(t *testing.T, payload, job string, slot int64) {
		b, err := New(new(sql.DB), SQLite)
		if err != nil {
			t.Fatal(err)
		}
		h := b.hub
		mine, unsubscribe := h.subscribeRun(context.Background(), runKey{job, slot})
		defer unsubscribe()
		other, unsubscribeOther := h.subscribeRun(context.Background(), runKey{job + "x", slot})
		defer unsubscribeOther()
		h.deliver(payload) // any payload: no panic
		drain(mine)
		drain(other)
		h.changed(context.Background(), job, slot)
		select {
		case <-mine:
		default:
			t.Fatalf("a change of (%q, %d) did not wake its watcher", job, slot)
		}
		select {
		case <-other:
			t.Fatalf("a change of (%q, %d) woke the watcher of (%q, %d)", job, slot, job+"x", slot)
		default:
		}
	})
}

func drain(ch chan struct{}) {
	select {
	case <-ch:
	default:
	}
}
