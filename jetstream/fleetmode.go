package jetstream

import (
	"fmt"
	"strconv"
)

// A job stream's metadata says which kinds of instance claim its slots: its
// claim mode. PrepareJob refuses a mode that would run a slot twice here, and
// writes its own. docs/backends.md ("Mixed fleets") gives the reasoning.
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

// setMode takes the claim mode in meta, and reports whether it changed.
func (st *streamState) setMode(meta map[string]string) bool {
	m := meta[metaClaims]
	old := st.mode.Swap(&m)
	return old != nil && *old != m
}

// lastMode is the stream's claim mode as last read ("" without one).
func (st *streamState) lastMode() string {
	if m := st.mode.Load(); m != nil {
		return *m
	}
	return ""
}

// arbitrates reports whether a leased backend records a won lease of job before
// the handler: made WithMixedFleet, or while its stream's mode lets plain
// instances in.
func (b *Backend) arbitrates(job string) bool {
	if b.cfg.mixedFleet {
		return true
	}
	st := b.cached(job)
	if st == nil {
		return false
	}
	m := st.lastMode()
	return m == modePlain || m == modeMixed
}

// claimRefusal refuses a plain claim on st once an instance with leases marked
// it "leases": that instance records nothing a plain claim would meet.
func (b *Backend) claimRefusal(st *jobStream) error {
	if b.cfg.leased || st.lastMode() != modeLeases {
		return nil
	}
	return fmt.Errorf("%w: job %q: stream %q changed to mode %q after this instance without leases started: an instance with leases "+
		"started beside it without WithMixedFleet(); this one claims none of the job's slots while the mode stays (docs/backends.md, Mixed fleets)",
		ErrMixedFleet, st.job, st.names.stream, modeLeases)
}

// modeChanged logs what st's new claim mode, set by another instance, means here.
func (b *Backend) modeChanged(st *jobStream, old string) {
	mode := st.lastMode()
	log := b.cfg.log.With("job", st.job, "stream", st.names.stream, "mode", mode, "was", old, "own", b.claimMode())
	switch {
	case b.claimRefusal(st) != nil:
		log.Error("jetstream: an instance with leases and without WithMixedFleet started on a job this instance claims without leases; " +
			"this instance claims none of its slots while the mode stays")
	case b.cfg.leased && !b.cfg.mixedFleet && b.arbitrates(st.job):
		log.Warn("jetstream: a job stream's mode lets instances without leases in; each won lease is recorded before its handler while it stays")
	default:
		log.Info("jetstream: a job stream's claim mode changed")
	}
}
