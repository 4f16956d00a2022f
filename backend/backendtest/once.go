package backendtest

import (
	"fmt"
	"sync"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/anarchon/anarchon/backend"
)

// onceWriters is how many backend values write one record at once in
// RecordOnce.
const onceWriters = 8

// deadlineRecord is the record an instance judging slot writes when the slot
// has not ended ok by its deadline.
func deadlineRecord(slot time.Time, instance string) backend.StoredResult {
	return backend.StoredResult{
		Slot: slot, Token: backend.DeadlineToken(slot), Instance: instance, Attempt: 1,
		Status: backend.StatusDeadline, FinishedAt: time.Now().Truncate(time.Millisecond),
		Error: "not ended ok by its deadline (judged by " + instance + ")",
	}
}

// testRecordOnce: a backend.OnceRecorder stores a record of a slot and token
// once, and tells the one call that stored it. Deadline records are what the
// scheduler writes with it, from every instance that judges a slot: one of
// them, and only one, is told it stored it, even when they write at once from
// separate backend values. History shows the record once, as its own run
// beside the slot's attempt; another token of the slot is another record.
func testRecordOnce(t *testing.T, newBackend func(t *testing.T) backend.Backend) {
	b := setup(t, newBackend)
	once, ok := b.(backend.OnceRecorder)
	if !ok {
		t.Skipf("%T is not a backend.OnceRecorder", b)
	}
	job := JobName("once")
	l := prepare(t, b, job)
	ctx := Context(t)

	// Slot 0 ran (a claim and a result); its deadline record is another row.
	run := claim(job, slotAt(0), Token(), "runner")
	won, err := b.Claim(ctx, run)
	require.NoError(t, err)
	require.True(t, won)
	require.NoError(t, b.SaveResult(ctx, job, backend.StoredResult{
		Slot: run.Slot, Token: run.Token, Instance: run.Instance, Attempt: 1,
		Status: backend.StatusError, StartedAt: time.Now(), FinishedAt: time.Now(), Error: "boom",
	}, l.Retention))

	first := deadlineRecord(slotAt(0), "judge-a")
	stored, err := once.RecordOnce(ctx, job, first, l.Retention)
	require.NoError(t, err)
	require.True(t, stored, "the first write of a record stores it")
	// The same writer again may be told either: a store may take it for a
	// retry whose answer was lost (RecordOnce).
	_, err = once.RecordOnce(ctx, job, first, l.Retention)
	require.NoError(t, err)
	other := setup(t, newBackend)
	stored, err = other.(backend.OnceRecorder).RecordOnce(ctx, job, deadlineRecord(slotAt(0), "judge-b"), l.Retention)
	require.NoError(t, err)
	assert.False(t, stored, "another instance's write of the slot's record, from another backend value, is stored already")

	// Writers of one record at once, each from its own backend value: one wins.
	writers := make([]backend.OnceRecorder, onceWriters)
	for i := range writers {
		w, ok := setup(t, newBackend).(backend.OnceRecorder)
		require.True(t, ok)
		writers[i] = w
	}
	var (
		wg      sync.WaitGroup
		start   = make(chan struct{})
		results = make([]bool, onceWriters)
		errs    = make([]error, onceWriters)
	)
	for i, w := range writers {
		wg.Go(func() {
			<-start
			results[i], errs[i] = w.RecordOnce(ctx, job, deadlineRecord(slotAt(1), fmt.Sprintf("judge-%d", i)), l.Retention)
		})
	}
	close(start)
	wg.Wait()
	winner := -1
	for i := range writers {
		require.NoError(t, errs[i], "writer %d", i)
		if results[i] {
			assert.Equal(t, -1, winner, "writers %d and %d were both told they stored the record", winner, i)
			winner = i
		}
	}
	require.NotEqual(t, -1, winner, "one of %d writers of a record stores it", onceWriters)

	hist, err := b.History(ctx, job, 0)
	require.NoError(t, err)
	checkOnce(t, hist, slotAt(0), "judge-a")
	checkOnce(t, hist, slotAt(1), fmt.Sprintf("judge-%d", winner))
	r, ok := findToken(hist, run.Token)
	require.True(t, ok, "the slot's attempt is a record of its own: %+v", hist)
	assert.Equal(t, backend.StatusError, r.Status, "the attempt keeps its status beside the deadline record")
	assert.Len(t, hist, 3, "the attempt and two deadline records: %+v", hist)

	// Another token of a slot is another record.
	again := first
	again.Token = Token()
	stored, err = once.RecordOnce(ctx, job, again, l.Retention)
	require.NoError(t, err)
	assert.True(t, stored, "a record of another token of the slot is stored")
	hist, err = b.History(ctx, job, 0)
	require.NoError(t, err)
	_, ok = findToken(hist, again.Token)
	assert.True(t, ok, "the record of another token is shown: %+v", hist)
	checkOnce(t, hist, slotAt(0), "judge-a")

	if _, ok := b.(backend.EntryStore); !ok {
		return
	}
	// An entry's runs are recorded under its run name, apart from the job's.
	name := backend.EntryRunName(job, "e")
	stored, err = once.RecordOnce(ctx, name, deadlineRecord(slotAt(0), "judge-e"), l.Retention)
	require.NoError(t, err)
	assert.True(t, stored, "an entry's record of a slot is not its job's")
	stored, err = other.(backend.OnceRecorder).RecordOnce(ctx, name, deadlineRecord(slotAt(0), "judge-f"), l.Retention)
	require.NoError(t, err)
	assert.False(t, stored, "an entry's record again is stored already")
	hist, err = b.History(ctx, name, 0)
	require.NoError(t, err)
	require.Len(t, hist, 1, "the entry's history: %+v", hist)
	checkOnce(t, hist, slotAt(0), "judge-e")
	hist, err = b.History(ctx, job, 0)
	require.NoError(t, err)
	checkOnce(t, hist, slotAt(0), "judge-a")
}

// checkOnce checks that hist shows the deadline record of slot once, as
// instance wrote it.
func checkOnce(t *testing.T, hist []backend.RunRecord, slot time.Time, instance string) {
	t.Helper()
	token := backend.DeadlineToken(slot)
	var found []backend.RunRecord
	for _, r := range hist {
		if r.Token == token {
			found = append(found, r)
		}
	}
	require.Len(t, found, 1, "the deadline record of slot %v is shown once: %+v", slot, hist)
	r := found[0]
	assert.True(t, r.Slot.Equal(slot), "slot %v, want %v", r.Slot, slot)
	assert.Equal(t, backend.StatusDeadline, r.Status)
	assert.Equal(t, instance, r.Instance, "the record of the writer that stored it")
	assert.Equal(t, "not ended ok by its deadline (judged by "+instance+")", r.Error)
	assert.True(t, r.StartedAt.IsZero(), "a judgement never started: %v", r.StartedAt)
	assert.False(t, r.FinishedAt.IsZero(), "a judgement has its time")
}
