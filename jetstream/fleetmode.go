package jetstream

import (
	"fmt"
	"strconv"
)

// A job stream's metadata says which kinds of instance claim its slots: its
// claim mode. PrepareJob refuses a mode that would run a slot twice beside this
// instance, and writes its own; docs/backends.md ("Mixed fleets") gives the
// reasoning and the steps of a rolling upgrade.
const (
	metaClaims = "anarchon.claims"
	// modePlain: the last instance started claims without leases (New).
	modePlain = "plain"
	// modeLeases: the last instance started has leases and records nothing
	// before the handler (NewLeased without WithMixedFleet).
	modeLeases = "leases"
	// modeMixed: the last instance started was made WithMixedFleet.
	modeMixed = "mixed"
)

// claimMode is the mode this backend's instances claim in. WithMixedFleet
// changes only a leased one's: a plain claim always meets the others.
func (b *Backend) claimMode() string {
	switch {
	case !b.cfg.leased:
		return modePlain
	case b.cfg.mixedFleet:
		return modeMixed
	}
	return modeLeases
}

// checkMode refuses a stream whose claim mode cannot share slots with this
// backend's. A stream without one (an older release's) takes this backend's.
func (b *Backend) checkMode(job, stream string, meta map[string]string) error {
	have, set := meta[metaClaims]
	own := b.claimMode()
	known := have == modePlain || have == modeLeases || have == modeMixed
	switch {
	case !set, have == own, have == modeMixed:
		return nil
	case own == modeMixed && known:
		return nil
	case !known:
		return fmt.Errorf("%w: job %q: stream %q has the claim mode %s, which this release does not know (this instance's is %q); "+
			"run one release on every instance", ErrMixedFleet, job, stream, strconv.Quote(truncate(have, 40)), own)
	case own == modeLeases:
		return fmt.Errorf("%w: job %q: this instance has leases (mode %q) and stream %q is in mode %q: instances without leases claim its slots, "+
			"and the two kinds would run a slot twice; start the instances with leases WithMixedFleet() until none runs without leases, "+
			"then restart them without it (docs/backends.md, Mixed fleets)", ErrMixedFleet, job, own, stream, have)
	}
	return fmt.Errorf("%w: job %q: this instance has no leases (mode %q) and stream %q is in mode %q: instances with leases run its slots "+
		"without a claim this one would meet, so a slot would run twice; restart every instance with leases WithMixedFleet() first, "+
		"then start the ones without leases (docs/backends.md, Mixed fleets)", ErrMixedFleet, job, own, stream, have)
}
