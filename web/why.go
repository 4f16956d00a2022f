package web

import (
	"context"

	"github.com/anarchon/anarchon/fleet"
)

// Explainer is a Source that also says what was decided for a slot: the
// attempt page's Why, shown only when the Source is one. *fleet.Client is one.
type Explainer interface {
	Why(ctx context.Context, job string, in fleet.WhyRequest) (fleet.WhyReply, error)
}

var _ Explainer = (*fleet.Client)(nil)

// whySection is the attempt page's account of its slot: the steps a replica
// read from the stored decisions, or why there are none.
type whySection struct {
	Steps []fleet.WhyStep
	// ReadBy is the replica that read them; Token the page's attempt, whose
	// step is marked.
	ReadBy string
	Token  string
	// Err says why the steps could not be read.
	Err string
}

// whyOf reads what was decided for run's slot, of job or its entry: nil when
// the Source cannot say.
func (h *Handler) whyOf(ctx context.Context, job, entry string, run fleet.Run) *whySection {
	e, ok := h.cfg.Source.(Explainer)
	if !ok {
		return nil
	}
	w, err := e.Why(ctx, job, fleet.WhyRequest{Entry: entry, Slot: run.Slot})
	if err != nil {
		return &whySection{Err: err.Error()}
	}
	return &whySection{Steps: w.Steps, ReadBy: w.Instance, Token: run.Token}
}
