package fleet

import (
	"encoding/json"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

func TestSplitItems(t *testing.T) {
	item := func(n int) json.RawMessage { return json.RawMessage(`"` + strings.Repeat("x", n-2) + `"`) }
	for _, c := range []struct {
		name   string
		sizes  []int
		budget int
		want   []int // items per part
	}{
		{"none", nil, 100, []int{0}},
		{"one", []int{10}, 100, []int{1}},
		{"all in one", []int{10, 10, 10}, 100, []int{3}},
		{"exactly full", []int{39, 39}, 100, []int{2}}, // 20 + 40 + 40
		{"one over", []int{39, 40}, 100, []int{1, 1}},
		{"many", []int{30, 30, 30, 30, 30}, 100, []int{2, 2, 1}},
		{"one alone at the limit", []int{79}, 100, []int{1}},
	} {
		var items []json.RawMessage
		for _, n := range c.sizes {
			items = append(items, item(n))
		}
		got, err := splitItems(items, 20, c.budget)
		require.NoError(t, err, c.name)
		var counts []int
		for _, g := range got {
			counts = append(counts, len(g))
		}
		assert.Equal(t, c.want, counts, c.name)
	}
	_, err := splitItems([]json.RawMessage{item(80)}, 20, 100)
	assert.ErrorContains(t, err, "one item of the reply is 80 bytes, more than a message holds (80)")
}

func TestPartedMessagesFitTheBudget(t *testing.T) {
	var items []json.RawMessage
	for i := range 1000 {
		items = append(items, json.RawMessage(`{"n":`+strings.Repeat("1", 1+i%50)+`}`))
	}
	p := parted{items: items, field: "runs", envelope: func(part, parts int) any {
		return struct {
			Job   string `json:"job"`
			Part  int    `json:"part"`
			Parts int    `json:"parts"`
		}{"report", part, parts}
	}}
	msgs, err := p.messages(2000)
	require.NoError(t, err)
	require.Greater(t, len(msgs), 10)
	n := 0
	for i, m := range msgs {
		assert.LessOrEqual(t, len(m), 2000)
		var got struct {
			Part, Parts int
			Runs        []json.RawMessage
		}
		require.NoError(t, json.Unmarshal(m, &got))
		assert.Equal(t, i+1, got.Part)
		assert.Equal(t, len(msgs), got.Parts)
		n += len(got.Runs)
	}
	assert.Equal(t, 1000, n)
	one, err := parted{field: "runs", envelope: p.envelope}.messages(2000)
	require.NoError(t, err)
	require.Len(t, one, 1)
	assert.Contains(t, string(one[0]), `"runs":[]`)
}

func TestGathering(t *testing.T) {
	g := newGathering()
	part := func(id, inst string, n, of int, jobs ...string) Replica {
		r := Replica{Instance: inst, ServiceID: id, Part: n, Parts: of}
		for _, j := range jobs {
			r.Jobs = append(r.Jobs, JobState{Name: j})
		}
		return r
	}
	require.NoError(t, g.add(part("s1", "A", 1, 2, "a", "b")))
	require.NoError(t, g.add(part("s2", "A", 1, 1, "x"))) // another replica answering as A
	assert.Equal(t, 1, g.pending())
	require.NoError(t, g.add(part("s1", "A", 2, 2, "c")))
	assert.Zero(t, g.pending())
	require.Len(t, g.done, 2)
	assert.Len(t, g.done[1].Jobs, 3)
	assert.Equal(t, 2, g.done[1].Parts)
	assert.Zero(t, g.done[1].Part)

	assert.ErrorIs(t, g.add(part("s3", "B", 2, 3)), ErrBadReply, "a part without part 1")
	require.NoError(t, g.add(part("s4", "C", 1, 3)))
	err := g.add(part("s4", "C", 3, 3))
	assert.ErrorIs(t, err, ErrBadReply)
	assert.ErrorContains(t, err, `replica "C": part 3 of 3 of its jobs answer after part 1 of 3`)
	require.NoError(t, g.add(part("s5", "D", 1, 2)))
	assert.Equal(t, []string{`replica "D" sent 1 of the 2 parts of its jobs answer (no part for 500ms, or the deadline): it is not listed; ask again`},
		g.incomplete(500*time.Millisecond))
	assert.False(t, g.answered["D"])
	assert.True(t, g.answered["A"])
	require.NoError(t, g.add(Replica{Instance: "E"}), "a reply in one message may leave its parts out")
	assert.True(t, g.answered["E"])
}
