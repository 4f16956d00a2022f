package modelcheck

import (
	"context"
	"math"
	"time"

	"github.com/anarchon/anarchon/backend"
	"github.com/anarchon/anarchon/scheduler"
)

// Absurd is a job option value, or a Config, that no job can mean: one that
// overflows the times the machine computes from it (a lease's expiry, a
// deadline, how long a run is remembered). A scheduler refuses it at
// registration (rule 11).
type Absurd struct {
	Name string
	// Opts are registered with an Every job of a minute; Config, when set,
	// changes the instance's Config instead.
	Opts   []scheduler.JobOption
	Config func(*scheduler.Config)
}

// longest is the longest time.Duration.
const longest = time.Duration(math.MaxInt64)

// AbsurdValues lists the absurd values the harness tries, one per instance start.
func AbsurdValues() []Absurd {
	return []Absurd{
		{Name: "WithLease(longest)", Opts: []scheduler.JobOption{scheduler.WithLease(longest)}},
		{Name: "WithMaxLate(longest)", Opts: []scheduler.JobOption{scheduler.WithMaxLate(longest)}},
		{Name: "WithCatchUp(all, longest)", Opts: []scheduler.JobOption{scheduler.WithCatchUp(backend.CatchUpAll, longest)}},
		{Name: "WithMaxLate, WithLease and WithCatchUp of half the longest each", Opts: []scheduler.JobOption{
			scheduler.WithMaxLate(longest / 2), scheduler.WithLease(longest / 2), scheduler.WithCatchUp(backend.CatchUpLatest, longest/2)}},
		{Name: "Config.MaxClockSkew longest", Config: func(c *scheduler.Config) { c.MaxClockSkew = longest }},
	}
}

// tryAbsurd registers the absurd value drawn for in's start on a scheduler of
// its own over in's store, and records whether it was refused.
func (h *Harness) tryAbsurd(in *inst, store backend.Backend) {
	all := AbsurdValues()
	a := all[Mix(h.plan.Seed, 0x6162_7364, uint64(in.slot), Str(in.name))%uint64(len(all))]
	cfg := scheduler.Config{Backend: store, Instance: in.name + "-absurd"}
	if a.Config != nil {
		a.Config(&cfg)
	}
	s, err := scheduler.New(cfg)
	if err == nil {
		err = s.Every("absurd", time.Minute, func(context.Context, scheduler.Run) error { return nil }, a.Opts...)
	}
	h.rec.absurdTried(in, a.Name, err)
}
