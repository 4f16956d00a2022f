package jetstream

import (
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/anarchon/anarchon/backend"
	"github.com/anarchon/anarchon/embedded"
	"github.com/anarchon/anarchon/internal/natstest"
)

// WriteRecords is repeat-safe: a record written again within the duplicate
// window is stored once (Nats-Msg-Id of job, slot and token), and one that
// finished longer ago than half the window is written only when History lacks
// it. A store whose run record still holds the records writes them again after
// a crash; History shows each attempt once.
func TestWriteRecordsRepeatSafe(t *testing.T) {
	s := natstest.Server(t, embedded.Options{})
	js := natstest.JetStream(t, natstest.Conn(t, s))
	b := newBackend(t, js)
	ctx := ctxFor(t)
	job := jobName("records")
	require.NoError(t, b.PrepareJob(ctx, limits(job)))
	keep := backend.Retention{Size: 50}
	now := time.Now()
	recs := []backend.StoredResult{
		{Slot: slot(1), Token: "a", Instance: "i", Attempt: 1, Status: backend.StatusLost, FinishedAt: now},
		{Slot: slot(1), Token: "b", Instance: "i", Attempt: 2, Status: backend.StatusOK, FinishedAt: now},
	}
	require.NoError(t, b.WriteRecords(ctx, job, recs, keep))
	require.NoError(t, b.WriteRecords(ctx, job, recs, keep), "a repeat")
	old := backend.StoredResult{Slot: slot(2), Token: "c", Attempt: 1, Status: backend.StatusLate, FinishedAt: now.Add(-time.Hour)}
	require.NoError(t, b.WriteRecords(ctx, job, []backend.StoredResult{old}, keep))
	require.NoError(t, b.WriteRecords(ctx, job, []backend.StoredResult{old}, keep), "past the window: History holds it")

	hist, err := b.History(ctx, job, 0)
	require.NoError(t, err)
	got := map[string]backend.Status{}
	for _, r := range hist {
		_, dup := got[r.Token]
		assert.False(t, dup, "one record per attempt: %+v", hist)
		got[r.Token] = r.Status
	}
	assert.Equal(t, map[string]backend.Status{"a": backend.StatusLost, "b": backend.StatusOK, "c": backend.StatusLate}, got)
}
