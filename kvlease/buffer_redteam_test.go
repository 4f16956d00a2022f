package kvlease_test

import (
	"strings"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/anarchon/anarchon/backend"
	"github.com/anarchon/anarchon/kvlease"
)

// Red-team cases of the buffer policies on kvlease.

// Jobs named after the words of the bucket's layout, with subject separators
// and wildcards, and at the longest name: each one's buffer is its own. Every
// job buffers slot 2 behind slot 1; each job's Active lists its own two runs,
// and the slot each one buffered runs once its own slot 1 ends, not before.
func TestRedteamBufferNames(t *testing.T) {
	t.Parallel()
	s := newStore(t, singleJS(t), kvlease.WithBucket(bucket))
	suffix := token()
	names := []string{"buffer", "lease", "run", "count", "pause", "=all", "a.b", "*", ">", "buffer.x", "a b", "ünï", strings.Repeat("n", 1024-len(suffix))}
	one := backend.OverlapBufferOne
	firsts := map[string]backend.RunClaim{}
	for _, n := range names {
		job := n + suffix
		first := bufferClaim(job, 1, one, 0)
		mustClaim(t, s, first, backend.OutcomeWon)
		mustClaim(t, s, bufferClaim(job, 2, one, 0), backend.OutcomeBuffered)
		mustClaim(t, s, bufferClaim(job, 3, one, 0), backend.OutcomeOverlap)
		firsts[job] = first
	}
	claimed := map[string]bool{}
	for job, first := range firsts {
		runs, err := s.Active(t.Context(), job)
		require.NoError(t, err)
		require.Len(t, runs, 2, "%q: %+v", job, runs)
		assert.False(t, runs[0].Buffered)
		assert.True(t, runs[1].Buffered)
		require.NoError(t, s.Finish(t.Context(), first.Key(), backend.StatusOK))
		mustClaim(t, s, bufferClaim(job, 2, one, 0), backend.OutcomeWon)
		claimed[job] = true
		for other := range firsts {
			// The other jobs' buffers are untouched.
			r, ok := bufferedAt(t, s, other, 2)
			require.True(t, ok, "%q's slot 2 is listed after %q's was claimed", other, job)
			assert.Equal(t, !claimed[other], r.Buffered, "%q's slot 2 after %q's was claimed: %+v", other, job, r)
		}
	}
}

// Values a newer release (or someone with write access) may leave in a job's
// buffer key: the claims of the job fail with an error naming the buffer
// record, or read what they know of it; never a panic, never a slot decided
// silently from a value they cannot read.
func TestRedteamBufferJunk(t *testing.T) {
	t.Parallel()
	js := singleJS(t)
	s := newStore(t, js, kvlease.WithBucket(bucket))
	kv, err := js.KeyValue(t.Context(), bucket)
	require.NoError(t, err)
	one := backend.OverlapBufferOne
	for name, value := range map[string]string{
		"truncated":   `{"v":1,"slots":[{"slot_ms":19`,
		"not json":    "\x00\xff",
		"wrong types": `{"v":1,"slots":{"a":1}}`,
		"a string ms": `{"v":1,"slots":[{"slot_ms":"1900000060000"}]}`,
	} {
		t.Run(name, func(t *testing.T) {
			job := "junk-" + token()
			first := bufferClaim(job, 1, one, 0)
			mustClaim(t, s, first, backend.OutcomeWon)
			_, err := kv.Put(t.Context(), kvlease.BufferKeyForTest(job), []byte(value))
			require.NoError(t, err)
			_, err = s.Claim(t.Context(), bufferClaim(job, 2, one, 0))
			require.Error(t, err)
			assert.Contains(t, err.Error(), "buffer record")
			_, err = s.Active(t.Context(), job)
			require.Error(t, err)
		})
	}
	t.Run("newer fields", func(t *testing.T) {
		job := "junk-" + token()
		first := bufferClaim(job, 1, one, 0)
		mustClaim(t, s, first, backend.OutcomeWon)
		second := bufferClaim(job, 2, one, 0)
		mustClaim(t, s, second, backend.OutcomeBuffered)
		e, err := kv.Get(t.Context(), kvlease.BufferKeyForTest(job))
		require.NoError(t, err)
		newer := strings.Replace(string(e.Value()), `"v":1`, `"v":2,"future":{"x":[1,2]}`, 1)
		_, err = kv.Update(t.Context(), kvlease.BufferKeyForTest(job), []byte(newer), e.Revision())
		require.NoError(t, err)
		mustClaim(t, s, bufferClaim(job, 3, one, 0), backend.OutcomeOverlap)
		require.NoError(t, s.Finish(t.Context(), first.Key(), backend.StatusOK))
		mustClaim(t, s, second, backend.OutcomeWon)
	})
}
