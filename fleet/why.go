package fleet

import (
	"context"
	"time"

	"github.com/anarchon/anarchon/scheduler"
)

// WhyRequest is the body of <prefix>.WHY.<job>.
type WhyRequest struct {
	// V is the request format, RequestVersion; Client sets it when zero.
	V int `json:"v"`
	// Entry asks about a slot of this schedule entry of the job.
	Entry string `json:"entry,omitempty"`
	// Slot is the slot, at millisecond precision, as History reports it.
	Slot time.Time `json:"slot"`
}

// WhyReply answers a why request: what the replica's scheduler.Why says of
// the slot.
type WhyReply struct {
	Job      string    `json:"job"`
	Entry    string    `json:"entry,omitempty"`
	Slot     time.Time `json:"slot"`
	Instance string    `json:"instance"`
	// Now is the replica's time when it read the records.
	Now time.Time `json:"now"`
	// Open says the slot's fate is not settled yet (scheduler.WhyReport.Open).
	Open bool `json:"open,omitempty"`
	// Read is how many of the job's newest records the replica read; Reached
	// says they reach back past the slot.
	Read    int       `json:"read"`
	Reached bool      `json:"reached,omitempty"`
	Steps   []WhyStep `json:"steps"`
	// Part and Parts number this message among the messages of one reply (see
	// HistoryReply.Part).
	Part  int `json:"part,omitempty"`
	Parts int `json:"parts,omitempty"`
}

// WhyStep is one thing a why reply says of the slot (scheduler.WhyStep): Kind
// is one of the scheduler.WhyKind values.
type WhyStep struct {
	Kind     string           `json:"kind"`
	Text     string           `json:"text"`
	Attempt  int              `json:"attempt,omitempty"`
	Instance string           `json:"instance,omitempty"`
	Status   scheduler.Status `json:"status,omitempty"`
	At       time.Time        `json:"at,omitzero"`
	// Run is the record the step was built from, if any.
	Run *Run `json:"run,omitempty"`
}

// Why says what was decided for one slot of job, or of one of its schedule
// entries, and what is still open, as one replica that declares the job reads
// it from the stored decisions (scheduler.Why), from every part of the reply
// (see History).
func (c *Client) Why(ctx context.Context, job string, in WhyRequest) (WhyReply, error) {
	in.V = versioned(in.V)
	out, err := gatherParts(ctx, c, endpoint{c.subj.job(verbWhy, job), job}, in,
		func(r *WhyReply) (int, int, *[]WhyStep) { return r.Part, r.Parts, &r.Steps })
	out.Part = 0
	return out, err
}

func (f *Service) why(job string) func(context.Context, []byte) (any, error) {
	return func(ctx context.Context, data []byte) (any, error) {
		var in WhyRequest
		if err := decode(data, &in); err != nil {
			return nil, err
		}
		if in.Slot.IsZero() {
			return nil, badRequest("a slot is required")
		}
		if in.Entry != "" {
			if err := checkEntryID(in.Entry); err != nil {
				return nil, err
			}
		}
		now := f.s.Clock().Now()
		r, err := f.s.Why(ctx, job, scheduler.WhyOptions{Entry: in.Entry, Slot: in.Slot})
		if err != nil {
			return nil, err
		}
		out := WhyReply{Job: job, Entry: in.Entry, Slot: r.Slot, Instance: f.s.Instance(), Now: now,
			Open: r.Open, Read: r.Read, Reached: r.Reached}
		wire := make([]WhyStep, 0, len(r.Steps))
		for _, st := range r.Steps {
			w := WhyStep{Kind: string(st.Kind), Text: st.Text, Attempt: st.Attempt, Instance: st.Instance, Status: st.Status, At: st.At}
			if st.Record != nil {
				run := runOf(*st.Record, scheduler.MaxErrorText)
				w.Run = &run
			}
			wire = append(wire, w)
		}
		items, err := marshalEach(wire)
		if err != nil {
			return nil, err
		}
		return parted{items: items, field: "steps", envelope: func(part, parts int) any {
			out := out
			out.Part, out.Parts = part, parts
			return struct {
				WhyReply
				Steps []WhyStep `json:"steps,omitempty"`
			}{WhyReply: out}
		}}, nil
	}
}
