package fleet

import (
	"encoding/json"
	"strings"
	"testing"

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
