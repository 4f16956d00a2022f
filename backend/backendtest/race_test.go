package backendtest

import (
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/anarchon/anarchon/backend"
	"github.com/anarchon/anarchon/backend/memory"
)

// sharedMemory is one process's value of a shared memory.Backend.
type sharedMemory struct{ *memory.Backend }

// The race catches a backend that decides in per-value memory: a fresh
// memory.Backend per claimer lets every claimer win, as separate processes would,
// each with its own memory.
func TestRaceCatchesPerValueMemory(t *testing.T) {
	o := Options{Rounds: 3, Claimers: 4}
	faults, rounds, err := raceSection(t.Context(), func() (backend.Backend, error) {
		return memory.New(), nil
	}, o)
	require.NoError(t, err)
	require.Len(t, rounds, o.Rounds)
	for _, r := range rounds {
		assert.Equal(t, o.Claimers, r.Wins, "round %d: each value decides alone, so every claimer wins", r.Round)
	}
	assert.NotEmpty(t, faults, "the race must fail a backend that decides in per-value memory")
	t.Logf("faults found, as they should be: %q", faults)
}

// The control: the same store shared by distinct values passes.
func TestRacePassesSharedMemory(t *testing.T) {
	shared := memory.New()
	o := Options{Rounds: 3, Claimers: 4}
	faults, rounds, err := raceSection(t.Context(), func() (backend.Backend, error) {
		return &sharedMemory{shared}, nil
	}, o)
	require.NoError(t, err)
	require.Len(t, rounds, o.Rounds)
	assert.Empty(t, faults)
}

// A winner whose repeated claim loses is a fault too.
func TestRaceFaults(t *testing.T) {
	assert.Empty(t, raceFaults([]raceRound{{Round: 0, Wins: 1, RepeatWon: true}}, 4))
	assert.Len(t, raceFaults([]raceRound{{Round: 0, Wins: 1}}, 4), 1, "repeat lost")
	assert.Len(t, raceFaults([]raceRound{{Round: 0, Wins: 0}}, 4), 1, "no winner")
	assert.Len(t, raceFaults([]raceRound{{Round: 0, Wins: 2, RepeatWon: true}}, 4), 1, "two winners")
}
