package jetstream

import (
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
)

// The claim memo's decisions without a server: which duplicates are read back.
func TestClaimMemo(t *testing.T) {
	now := time.Unix(1_900_000_000, 0)
	const ttl = time.Minute
	k := slotKey{stream: "S", slot: 1}
	lostBlind := claimAnswer{seq: 7}

	t.Run("the slot's first token on this backend loses without a read back", func(t *testing.T) {
		var m claimMemo
		assert.False(t, m.send(k, "a", now, ttl), "never sent before")
		assert.False(t, m.mayHold(k, "a", 7))
		m.answered(k, "a", lostBlind, now, ttl)
		assert.False(t, m.send(k, "a", now, ttl), "a lost token is no longer one that may be stored")
		assert.False(t, m.mayHold(k, "a", 7), "and its repeat is known lost")
		assert.True(t, m.mayHold(k, "w", 7), "another token of the slot is a repeat from elsewhere: read back")
		m.answered(k, "w", claimAnswer{seq: 7, held: &claimRecord{Token: "w"}}, now, ttl)
		assert.False(t, m.mayHold(k, "x", 7), "the holder is known: a loss needs no read back")
		assert.True(t, m.mayHold(k, "w", 7), "the holder's repeat is read back")
	})
	t.Run("a token that may be stored is sent before", func(t *testing.T) {
		var m claimMemo
		assert.False(t, m.send(k, "a", now, ttl))
		assert.True(t, m.send(k, "a", now, ttl), "no answer yet: a repeat reads back")
		m.answered(k, "a", claimAnswer{stored: true, seq: 7}, now, ttl)
		assert.True(t, m.send(k, "a", now, ttl), "won: a repeat reads back")
		assert.False(t, m.mayHold(k, "b", 7), "another token loses to the known holder")
	})
	t.Run("a new stored claim forgets what was known of the old one", func(t *testing.T) {
		var m claimMemo
		m.send(k, "a", now, ttl)
		m.answered(k, "a", claimAnswer{stored: true, seq: 7}, now, ttl)
		assert.False(t, m.mayHold(k, "b", 9), "first word on the claim at 9")
		m.answered(k, "b", claimAnswer{seq: 9}, now, ttl)
		assert.True(t, m.mayHold(k, "a", 9), "the holder at 7 says nothing about 9")
	})
	t.Run("entries end with the claims they speak of", func(t *testing.T) {
		var m claimMemo
		m.send(k, "a", now, ttl)
		m.send(slotKey{stream: "S", slot: 2}, "b", now.Add(2*time.Minute), ttl)
		assert.Equal(t, 1, m.len(), "the first slot's entry expired and was swept")
		m.clear()
		assert.Zero(t, m.len())
	})
}
