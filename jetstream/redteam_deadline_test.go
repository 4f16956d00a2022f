package jetstream

import (
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/anarchon/anarchon/backend"
	"github.com/anarchon/anarchon/backend/machine"
)

// A deadline record is a result without a claim, so a History whose newest
// runs include one cannot tell it has "limit runs whose claims it has seen"
// (enough) and reads on to 4*limit+32 messages: each History of a job that
// misses deadlines (the judge's own reads, the status page, the CLI) read about
// three times the bytes and one more request (measured: History(100) 92 kB in
// 2 requests without, 275 kB in 3 with).
func TestRedteamDeadlineRecordWidensHistoryReads(t *testing.T) {
	type cost struct{ reqs, bytes uint64 }
	costs := map[bool]map[int]cost{}
	for _, judged := range []bool{false, true} {
		costs[judged] = map[int]cost{}
		js, b, l, ctx := retainedJob(t, "widen", backend.Retention{Size: 2000})
		runs(t, b, l, 1000, func(int) backend.Status { return backend.StatusOK })
		if judged {
			stored, err := b.RecordOnce(ctx, l.Job, backend.StoredResult{
				Slot: slot(995), Token: backend.DeadlineToken(slot(995)), Instance: "j", Attempt: 1,
				Status: backend.StatusDeadline, FinishedAt: time.Now(), Error: "not ended ok by its deadline",
			}, l.Retention)
			require.NoError(t, err)
			require.True(t, stored)
		}
		for _, limit := range []int{20, 100} {
			before := js.Conn().Stats()
			hist, err := b.History(ctx, l.Job, limit)
			require.NoError(t, err)
			after := js.Conn().Stats()
			require.Len(t, hist, limit)
			c := cost{after.OutMsgs - before.OutMsgs, after.InBytes - before.InBytes}
			costs[judged][limit] = c
			t.Logf("judged=%v History(%d): %d requests, %d bytes received", judged, limit, c.reqs, c.bytes)
		}
	}
	for _, limit := range []int{20, 100} {
		plain, judged := costs[false][limit], costs[true][limit]
		assert.LessOrEqual(t, judged.reqs, plain.reqs, "History(%d): a deadline record costs no more requests", limit)
		assert.Less(t, judged.bytes, plain.bytes*3/2, "History(%d): a deadline record does not widen the read", limit)
	}
}

// Probe (passes; the store behaviour behind the scheduler's
// TestRedteamDeadlineJudgeReadMissesTheSlotBehindABackfill): History finds runs
// by arrival, so 40 runs of old slots (a Backfill of last week's failures)
// written after slot 9 ended ok fill a read of 28 (the judge's depth for a slot
// one deadline back): it holds old slots and not slot 9. The deadline judge took
// such a read as holding every record of slot 9 (its oldest record is older)
// and judged it "not started"; a deeper read finds it.
func TestRedteamDeadlineHistoryByArrivalHidesTheSlotBehindABackfill(t *testing.T) {
	_, b, l, ctx := retainedJob(t, "backfilled", backend.Retention{Size: 200})
	runsOf(t, b, l, "a", 0, 10, func(int) backend.Status { return backend.StatusOK }) // slot 9 ended ok
	runsOf(t, b, l, "a", -1000, -960, func(int) backend.Status { return backend.StatusOK })
	judged := slot(9)
	recs, err := b.History(ctx, l.Job, 28)
	require.NoError(t, err)
	require.Len(t, recs, 28)
	assert.True(t, recs[len(recs)-1].Slot.Before(judged), "the read holds slots older than 9")
	why, missed := machine.Deadline(recs, judged, judged.Add(time.Minute))
	assert.True(t, missed, "and none of slot 9's records: %s", why)
	recs, err = b.History(ctx, l.Job, 200)
	require.NoError(t, err)
	_, missed = machine.Deadline(recs, judged, judged.Add(time.Minute))
	assert.False(t, missed, "a deeper read holds slot 9's ok record")
}
