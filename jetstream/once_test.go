package jetstream

import (
	"testing"
	"time"

	natsjs "github.com/nats-io/nats.go/jetstream"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/anarchon/anarchon/backend"
	"github.com/anarchon/anarchon/embedded"
	"github.com/anarchon/anarchon/internal/natstest"
	"github.com/anarchon/anarchon/internal/natsutil"
)

// deadlineRec is a deadline record of slot k, as instance writes it.
func deadlineRec(k int, instance string) backend.StoredResult {
	return backend.StoredResult{Slot: slot(k), Token: backend.DeadlineToken(slot(k)), Instance: instance, Attempt: 1,
		Status: backend.StatusDeadline, FinishedAt: time.Now(), Error: "past its deadline"}
}

// A publish of RecordOnce that went unanswered may have stored the record: a
// duplicate answered to the call's next publish is read back, and it is the
// call's own when it carries the call's nonce. A duplicate met without an
// unanswered publish before is another writer's, with no read.
func TestRecordOnceAfterUnansweredPublish(t *testing.T) {
	s := natstest.Server(t, embedded.Options{})
	js := natstest.JetStream(t, natstest.Conn(t, s))
	b := newBackend(t, js)
	ctx := ctxFor(t)
	job := jobName("once")
	require.NoError(t, b.PrepareJob(ctx, limits(job)))
	st, err := b.lookup(ctx, job)
	require.NoError(t, err)
	keep := backend.Retention{Size: 50}
	rec := deadlineRec(1, "a")

	// The call's first publish was stored, its answer lost.
	mine := b.onceMsg(st, job, rec, keep, "nonce-a")
	ack, err := natsutil.Publish(ctx, js.Conn(), mine)
	require.NoError(t, err)
	require.False(t, ack.Duplicate)

	stored, err := b.publishOnce(ctx, st, b.onceMsg(st, job, rec, keep, "nonce-a"), "nonce-a", true)
	require.NoError(t, err)
	assert.True(t, stored, "the stored copy carries the call's nonce: the call stored it")
	stored, err = b.publishOnce(ctx, st, b.onceMsg(st, job, rec, keep, "nonce-b"), "nonce-b", true)
	require.NoError(t, err)
	assert.False(t, stored, "the stored copy is another call's")
	stored, err = b.publishOnce(ctx, st, b.onceMsg(st, job, rec, keep, "nonce-a"), "nonce-a", false)
	require.NoError(t, err)
	assert.False(t, stored, "a duplicate without an unanswered publish before is another writer's")

	hist, err := b.History(ctx, job, 0)
	require.NoError(t, err)
	require.Len(t, hist, 1, "one record: %+v", hist)
	assert.Equal(t, backend.StatusDeadline, hist[0].Status)
	assert.Equal(t, "a", hist[0].Instance)
}

// RecordOnce keeps what keep allows, as SaveResult does: the message expires
// after keep.TTL, and the results subject keeps keep.Size. A record written by
// WriteRecords (the same Nats-Msg-Id) is stored already.
func TestRecordOnceRetention(t *testing.T) {
	s := natstest.Server(t, embedded.Options{})
	js := natstest.JetStream(t, natstest.Conn(t, s))
	b := newBackend(t, js)
	ctx := ctxFor(t)
	job := jobName("once-keep")
	require.NoError(t, b.PrepareJob(ctx, limits(job)))
	keep := backend.Retention{Size: 2, TTL: time.Hour}
	for k := range 3 {
		stored, err := b.RecordOnce(ctx, job, deadlineRec(k, "a"), keep)
		require.NoError(t, err)
		require.True(t, stored, "slot %d", k)
	}
	st, err := b.lookup(ctx, job)
	require.NoError(t, err)
	m, err := natsutil.LeaderGet(ctx, js, st.names.stream, 1, st.results)
	require.NoError(t, err)
	assert.Equal(t, natsutil.TTLHeader(keep.TTL), m.Header.Get(natsjs.MsgTTLHeader), "the record expires after keep.TTL")
	hist, err := b.History(ctx, job, 0)
	require.NoError(t, err)
	require.Len(t, hist, keep.Size, "the newest keep.Size records: %+v", hist)
	assert.True(t, hist[0].Slot.Equal(slot(2)))
	assert.True(t, hist[1].Slot.Equal(slot(1)))

	written := deadlineRec(5, "w")
	require.NoError(t, b.WriteRecords(ctx, job, []backend.StoredResult{written}, keep))
	stored, err := b.RecordOnce(ctx, job, deadlineRec(5, "a"), keep)
	require.NoError(t, err)
	assert.False(t, stored, "a record WriteRecords wrote is stored already")
}
