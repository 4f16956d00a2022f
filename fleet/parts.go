package fleet

import (
	"encoding/json"
	"fmt"
)

// A reply that grows with the fleet (jobs, history, active) is sent in parts: as
// many messages as it takes for each to fit in the connection's max payload, each a
// reply of the same type that carries some of the items (jobs, runs) and says which
// part of how many it is (Part, Parts). Client reads every part.

// replyHeadroom is what a reply message leaves free of the connection's max payload
// for its headers.
const replyHeadroom = 4 << 10

// budget is how many bytes of JSON one reply message may carry.
func (f *Service) budget() int {
	mp := int(f.nc.MaxPayload())
	return max(mp-replyHeadroom, mp/2)
}

// parted is a reply sent in parts: its items, the name of the field that holds
// them, and the envelope of one part: a struct that marshals to the same size
// whatever the part numbers up to 99999, with no field of that name.
type parted struct {
	items    []json.RawMessage
	field    string
	envelope func(part, parts int) any
}

// messages splits p into the JSON of its parts, each at most budget bytes: the
// envelope's fields, then the field of the part's items.
func (p parted) messages(budget int) ([][]byte, error) {
	head, err := json.Marshal(p.envelope(99999, 99999))
	if err != nil {
		return nil, err
	}
	overhead := len(head) + len(`,"":[]`) + len(p.field)
	groups, err := splitItems(p.items, overhead, budget)
	if err != nil {
		return nil, err
	}
	out := make([][]byte, 0, len(groups))
	for i, g := range groups {
		head, err := json.Marshal(p.envelope(i+1, len(groups)))
		if err != nil {
			return nil, err
		}
		if len(head) < 2 || head[len(head)-1] != '}' {
			return nil, fmt.Errorf("fleet: a reply's envelope is not a JSON object: %s", head)
		}
		size := overhead
		for _, it := range g {
			size += len(it) + 1
		}
		data := make([]byte, 0, size)
		data = append(data, head[:len(head)-1]...)
		if len(head) > 2 {
			data = append(data, ',')
		}
		data = append(data, '"')
		data = append(data, p.field...)
		data = append(data, `":[`...)
		for j, it := range g {
			if j > 0 {
				data = append(data, ',')
			}
			data = append(data, it...)
		}
		data = append(data, "]}"...)
		out = append(out, data)
	}
	return out, nil
}

// splitItems groups items, in order, into as few parts as hold each within budget
// bytes with overhead bytes of envelope: always at least one part, an empty one for
// no items.
func splitItems(items []json.RawMessage, overhead, budget int) ([][]json.RawMessage, error) {
	out := [][]json.RawMessage{}
	cur := []json.RawMessage{}
	size := overhead
	for _, it := range items {
		n := len(it) + 1 // and its comma
		if overhead+n > budget {
			return nil, fmt.Errorf("fleet: one item of the reply is %d bytes, more than a message holds (%d)", len(it), budget-overhead)
		}
		if len(cur) > 0 && size+n > budget {
			out = append(out, cur)
			cur, size = []json.RawMessage{}, overhead
		}
		cur = append(cur, it)
		size += n
	}
	return append(out, cur), nil
}

// marshalEach marshals each item on its own.
func marshalEach[T any](items []T) ([]json.RawMessage, error) {
	out := make([]json.RawMessage, 0, len(items))
	for _, it := range items {
		data, err := json.Marshal(it)
		if err != nil {
			return nil, err
		}
		out = append(out, data)
	}
	return out, nil
}
