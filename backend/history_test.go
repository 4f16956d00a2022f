package backend

import (
	"cmp"
	"math/rand/v2"
	"slices"
	"strconv"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
)

// BuildHistory orders runs newest first (slot, then attempt, then claim time, each
// descending), stable for ties, whether the stores read them oldest first (the
// reverse is taken), newest first, shuffled, or with ties.
func TestBuildHistoryOrder(t *testing.T) {
	base := time.UnixMilli(1_700_000_000_000)
	stable := func(recs []RunRecord) []RunRecord {
		out := slices.Clone(recs)
		slices.SortStableFunc(out, func(a, b RunRecord) int {
			if c := b.Slot.Compare(a.Slot); c != 0 {
				return c
			}
			if c := cmp.Compare(b.Attempt, a.Attempt); c != 0 {
				return c
			}
			return b.ClaimedAt.Compare(a.ClaimedAt)
		})
		return out
	}
	rng := rand.New(rand.NewPCG(1, 2))
	for _, tc := range []struct {
		name  string
		order func([]ClaimRecord)
		ties  bool
	}{
		{"oldest first", func([]ClaimRecord) {}, false},
		{"newest first", slices.Reverse[[]ClaimRecord], false},
		{"shuffled", func(c []ClaimRecord) { rng.Shuffle(len(c), func(i, j int) { c[i], c[j] = c[j], c[i] }) }, false},
		{"oldest first with ties", func([]ClaimRecord) {}, true},
	} {
		t.Run(tc.name, func(t *testing.T) {
			var claims []ClaimRecord
			for i := range 60 {
				slot := base.Add(time.Duration(i/2) * time.Second) // two attempts per slot
				at := slot.Add(time.Duration(i%2) * time.Millisecond)
				if tc.ties && i%7 == 0 {
					at = slot // the same claim time as the slot's other attempt
				}
				attempt := 1 + i%2
				if tc.ties && i%5 == 0 {
					attempt = 1
				}
				claims = append(claims, ClaimRecord{Slot: slot, Token: "t" + strconv.Itoa(i), Instance: "i" + strconv.Itoa(i), Attempt: attempt, At: at})
			}
			tc.order(claims)
			got := BuildHistory("job", claims, nil, 0)
			// The same records before any sort: BuildHistory with a single record
			// each, concatenated in the claims' order.
			var unsorted []RunRecord
			for _, c := range claims {
				unsorted = append(unsorted, BuildHistory("job", []ClaimRecord{c}, nil, 0)...)
			}
			assert.Equal(t, stable(unsorted), got)
		})
	}
}
