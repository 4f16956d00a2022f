package anarchontest

import (
	"context"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/anarchon/anarchon/backend"
	"github.com/anarchon/anarchon/backend/memory"
)

// liveMembers returns the members b holds now.
func liveMembers(t *testing.T, b *memory.Backend) []backend.Member {
	t.Helper()
	ctx, cancel := context.WithCancel(t.Context())
	var got []backend.Member
	require.NoError(t, b.WatchMembers(ctx, func(all []backend.Member) { got = all; cancel() }))
	return got
}

// A process's Beat, Leave and WatchMembers go through its faults: a lost
// answer of a beat or a leave was applied, a partition refuses them and cuts
// a running watch.
func TestViewMembershipFaults(t *testing.T) {
	mem := memory.New()
	r := &Replica{name: "replica-1", cut: make(chan struct{})}
	p := &proc{r: r, reaped: make(chan struct{})}
	p.killCtx, p.killCause = context.WithCancelCause(context.Background())
	p.fr.init()
	v := &view{p: p, mem: mem}
	ctx := t.Context()
	m := backend.Member{Instance: "replica-1", Group: "g"}

	assert.True(t, OpBeat.Write())
	assert.True(t, OpLeave.Write())
	assert.False(t, OpWatchMembers.Write())

	r.LoseAnswers(1, OpBeat)
	require.ErrorIs(t, v.Beat(ctx, m, time.Minute), ErrAnswerLost)
	assert.Equal(t, []backend.Member{m}, liveMembers(t, mem), "a beat whose answer was lost is stored")

	r.LoseAnswers(1) // the next write
	require.ErrorIs(t, v.Leave(ctx, m.Instance), ErrAnswerLost)
	assert.Empty(t, liveMembers(t, mem), "a leave whose answer was lost is applied")

	r.LoseAnswers(1, OpWatchMembers)
	require.ErrorIs(t, v.WatchMembers(ctx, func([]backend.Member) {}), ErrAnswerLost)

	r.Partition()
	require.ErrorIs(t, v.Beat(ctx, m, time.Minute), ErrPartitioned)
	assert.Empty(t, liveMembers(t, mem), "a partitioned beat is not stored")
	require.ErrorIs(t, v.WatchMembers(ctx, func([]backend.Member) {}), ErrPartitioned)
	r.Heal()

	require.NoError(t, v.Beat(ctx, m, time.Minute))
	sets := make(chan []backend.Member, 4)
	done := make(chan error, 1)
	go func() { done <- v.WatchMembers(ctx, func(all []backend.Member) { sets <- all }) }()
	select {
	case s := <-sets:
		assert.Equal(t, []backend.Member{m}, s)
	case <-time.After(10 * time.Second):
		require.FailNow(t, "no first set")
	}
	r.Partition()
	select {
	case err := <-done:
		require.ErrorIs(t, err, ErrPartitioned, "a partition cuts the watch")
	case <-time.After(10 * time.Second):
		require.FailNow(t, "the partition did not cut the watch")
	}
}
