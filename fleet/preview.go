package fleet

import (
	"context"
	"time"

	"github.com/anarchon/anarchon/scheduler"
)

// DefaultPreviewSlots is how many slots a preview request lists when it
// gives no N.
const DefaultPreviewSlots = 10

// PreviewRequest is the body of <prefix>.PREVIEW.<job>.
type PreviewRequest struct {
	// V is the request format, RequestVersion; Client sets it when zero.
	V int `json:"v"`
	// Entry asks for the slots of this schedule entry of the job.
	Entry string `json:"entry,omitempty"`
	// From is where the list starts (a slot at From is listed); zero: after
	// the replica's now.
	From time.Time `json:"from,omitzero"`
	// N is how many slots: 0 means DefaultPreviewSlots, more than
	// scheduler.MaxPreviewSlots is clamped to it, a negative N is a bad request.
	N int `json:"n,omitempty"`
}

// PreviewReply answers a preview request: the slots as the replica's
// scheduler.Preview lists them.
type PreviewReply struct {
	Job      string `json:"job"`
	Entry    string `json:"entry,omitempty"`
	Instance string `json:"instance"`
	// Now is the replica's time when it read what the notes say.
	Now time.Time `json:"now"`
	// N is the number of slots asked (after the default and the clamp); fewer
	// come when the schedule has no further slot.
	N     int           `json:"n"`
	Slots []PreviewSlot `json:"slots"`
	// Cut says the list stops before a slot after the year 9999, which JSON
	// times cannot carry.
	Cut bool `json:"cut,omitempty"`
	// Part and Parts number this message among the messages of one reply (see
	// HistoryReply.Part).
	Part  int `json:"part,omitempty"`
	Parts int `json:"parts,omitempty"`
}

// PreviewSlot is a slot of a preview (scheduler.PreviewSlot).
type PreviewSlot struct {
	Slot    time.Time     `json:"slot"`
	Nominal time.Time     `json:"nominal"`
	Runs    bool          `json:"runs"`
	Notes   []PreviewNote `json:"notes,omitempty"`
}

// PreviewNote is what a preview says of a slot (scheduler.PreviewNote): Kind is
// one of the scheduler.PreviewKind values.
type PreviewNote struct {
	Kind string `json:"kind"`
	Text string `json:"text"`
}

// Preview lists the next slots of job, or of one of its schedule entries, as
// one replica that declares the job previews them (scheduler.Preview), from
// every part of the reply (see History).
func (c *Client) Preview(ctx context.Context, job string, in PreviewRequest) (PreviewReply, error) {
	in.V = versioned(in.V)
	out, err := gatherParts(ctx, c, endpoint{c.subj.job(verbPreview, job), job}, in,
		func(r *PreviewReply) (int, int, *[]PreviewSlot) { return r.Part, r.Parts, &r.Slots })
	out.Part = 0
	return out, err
}

func (f *Service) preview(job string) func(context.Context, []byte) (any, error) {
	return func(ctx context.Context, data []byte) (any, error) {
		var in PreviewRequest
		if err := decode(data, &in); err != nil {
			return nil, err
		}
		n, err := clampLimit("n", in.N, DefaultPreviewSlots, scheduler.MaxPreviewSlots)
		if err != nil {
			return nil, err
		}
		if in.Entry != "" {
			if err := checkEntryID(in.Entry); err != nil {
				return nil, err
			}
		}
		now := f.s.Clock().Now()
		slots, err := f.s.Preview(ctx, job, scheduler.PreviewOptions{Entry: in.Entry, From: in.From, N: n})
		if err != nil {
			return nil, err
		}
		out := PreviewReply{Job: job, Entry: in.Entry, Instance: f.s.Instance(), Now: now, N: n}
		wire := make([]PreviewSlot, 0, len(slots))
		for _, s := range slots {
			if s.Slot.Year() > 9999 || s.Nominal.Year() > 9999 {
				out.Cut = true
				break
			}
			ps := PreviewSlot{Slot: s.Slot, Nominal: s.Nominal, Runs: s.Runs}
			for _, note := range s.Notes {
				ps.Notes = append(ps.Notes, PreviewNote{Kind: string(note.Kind), Text: note.Text})
			}
			wire = append(wire, ps)
		}
		items, err := marshalEach(wire)
		if err != nil {
			return nil, err
		}
		return parted{items: items, field: "slots", envelope: func(part, parts int) any {
			out := out
			out.Part, out.Parts = part, parts
			return struct {
				PreviewReply
				Slots []PreviewSlot `json:"slots,omitempty"`
			}{PreviewReply: out}
		}}, nil
	}
}
