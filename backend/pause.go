package backend

import (
	"context"
	"time"
)

// Pause is a stored pause: while it is in force, the slots of its job (of every job
// when Job is empty) are not run but recorded paused, on every instance.
type Pause struct {
	// Job is the paused job, or "" for all jobs.
	Job string
	// Reason and By say why and who asked; shown in history tools and logs.
	Reason string
	By     string
	// At is when the pause was stored, by the pausing instance's clock.
	At time.Time
	// Until, when set, ends the pause by itself; zero: until Resume.
	Until time.Time
}

// InForce reports whether the pause applies at now.
func (p Pause) InForce(now time.Time) bool { return p.Until.IsZero() || now.Before(p.Until) }

// MaxPauseText bounds a pause's Reason and By, in bytes.
const MaxPauseText = 1024

// Pauser is implemented by backends that store pauses, so that every instance
// honours a pause and it survives restarts. It is optional: on a backend without it,
// Pause and Resume return ErrPauseNotSupported and jobs always run.
type Pauser interface {
	// SetPause stores p, replacing a pause stored for the same Job.
	SetPause(ctx context.Context, p Pause) error
	// ClearPause removes the pause stored for job ("": the all-jobs pause). Clearing
	// a pause that is not stored is not an error.
	ClearPause(ctx context.Context, job string) error
	// Pauses returns the stored pauses, expired ones included.
	Pauses(ctx context.Context) ([]Pause, error)
	// WatchPauses calls fn with the stored pauses at once and again after every
	// change, until ctx ends (it then returns nil) or the watch fails. fn is called
	// from one goroutine at a time and must return quickly.
	WatchPauses(ctx context.Context, fn func([]Pause)) error
}
