package kvlease

import (
	"context"
	"errors"
	"fmt"
	"time"

	"github.com/anarchon/anarchon/backend"
	"github.com/anarchon/anarchon/backend/machine"
)

var _ backend.RecordsUser = (*Store)(nil)

// UseRecords makes w the history the store writes its records into
// (backend.RecordsUser): jetstream.NewLeased calls it. Without one the store
// keeps no records.
func (s *Store) UseRecords(w backend.RecordWriter) { s.writer.Store(&w) }

func (s *Store) recordWriter() backend.RecordWriter {
	if w := s.writer.Load(); w != nil {
		return *w
	}
	return nil
}

// runWrite is the write of run, with recs to write, over a run record at
// revision expect. Without a RecordWriter, recs are not kept.
func (s *Store) runWrite(job string, expect uint64, run machine.Run, recs []backend.StoredResult, keep backend.Retention) (write, error) {
	if s.recordWriter() == nil {
		recs = nil
	}
	v := runValue{V: recordVersion, Job: job, Run: runJSON(run), Records: recs, Keep: keep}
	return write{key: keysFor(job, run.Slot).run, value: v, expect: expect, ttl: runTTL(run, len(recs) > 0, run.Changed)}, nil
}

// putRun stores run and recs over the run record at revision expect.
func (s *Store) putRun(ctx context.Context, b *bucket, job string, expect uint64, run machine.Run, recs []backend.StoredResult, keep backend.Retention) (uint64, error) {
	w, err := s.runWrite(job, expect, run, recs, keep)
	if err != nil {
		return 0, err
	}
	return s.put(ctx, b, w)
}

// records writes recs, stored with run at revision rev, to the store's
// RecordWriter, then clears them from the run record without waiting.
func (s *Store) records(ctx context.Context, b *bucket, job string, rev uint64, run machine.Run, recs []backend.StoredResult, keep backend.Retention) error {
	wr := s.recordWriter()
	if len(recs) == 0 || wr == nil {
		return nil
	}
	if s.died(job, run.Slot, stepStored) {
		return errDied
	}
	if err := wr.WriteRecords(ctx, job, recs, keep); err != nil {
		return fmt.Errorf("kvlease: write the records of %s: %w", describe(job, run.Slot), err)
	}
	if s.died(job, run.Slot, stepWritten) {
		return errDied
	}
	if w, err := s.runWrite(job, rev, run, nil, keep); err == nil {
		s.putNoWait(b, w)
	}
	return nil
}

// writePending writes the records v's run record holds, left by a call that
// stopped before writing them; the caller's next write of the run record, or
// clearPending, drops them. It reports whether it wrote them.
func (s *Store) writePending(ctx context.Context, job string, v view) bool {
	wr := s.recordWriter()
	if !v.pending() || wr == nil {
		return false
	}
	return wr.WriteRecords(ctx, job, v.rv.Records, v.rv.Keep) == nil
}

// clearPending drops from v's run record the records writePending wrote,
// without waiting, when no other write of it follows.
func (s *Store) clearPending(b *bucket, job string, v view, written bool) {
	if !written {
		return
	}
	if w, err := s.runWrite(job, v.run.rev, v.rv.run(), nil, v.rv.Keep); err == nil {
		s.putNoWait(b, w)
	}
}

// Steps between two writes where a test may stop a call (OnStepForTest).
const (
	stepLease   = "lease"   // a new lease's key written, nothing else
	stepJob     = "job"     // the job key written, the run record not
	stepAsked   = "asked"   // a cancel request in a run record, not in its lease key
	stepStored  = "stored"  // the run record with its records, none written
	stepWritten = "written" // the records written, the run record not cleared
)

// errDied is what a call stopped by a test's step hook returns.
var errDied = errors.New("kvlease: stopped between two writes (test)")

// died reports whether the test's step hook stops the call at step.
func (s *Store) died(job string, slot time.Time, step string) bool {
	return s.stepHook != nil && s.stepHook(job, slot, step)
}

func describe(job string, slot time.Time) string {
	return fmt.Sprintf("job %q slot %s", job, slot.UTC().Format(time.RFC3339Nano))
}
