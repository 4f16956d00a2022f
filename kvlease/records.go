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

// runRecord is what a run record holds: job's run, and the records of its
// attempts still to be written, kept as keep.
type runRecord struct {
	job  string
	run  machine.Run
	recs []backend.StoredResult
	keep backend.Retention
}

// runWrite is the write of r over a run record at revision expect. Without a
// RecordWriter, r.recs are not kept.
func (s *Store) runWrite(r runRecord, expect uint64) (write, error) {
	if s.recordWriter() == nil {
		r.recs = nil
	}
	v := runValue{V: recordVersion, Job: r.job, Run: runJSON(r.run), Records: r.recs, Keep: r.keep}
	return write{key: keysFor(r.job, r.run.Slot).run, value: v, expect: expect, ttl: runTTL(r.run, len(r.recs) > 0, r.run.Changed)}, nil
}

// putRun stores r over the run record at revision expect.
func (s *Store) putRun(ctx context.Context, b *bucket, r runRecord, expect uint64) (uint64, error) {
	w, err := s.runWrite(r, expect)
	if err != nil {
		return 0, err
	}
	return s.put(ctx, b, w)
}

// records writes r.recs, stored with r.run at revision rev, to the store's
// RecordWriter, then clears them from the run record without waiting.
func (s *Store) records(ctx context.Context, b *bucket, r runRecord, rev uint64) error {
	wr := s.recordWriter()
	if len(r.recs) == 0 || wr == nil {
		return nil
	}
	if s.died(r.job, r.run.Slot, stepStored) {
		return errDied
	}
	if err := wr.WriteRecords(ctx, r.job, r.recs, r.keep); err != nil {
		return fmt.Errorf("kvlease: write the records of %s: %w", describe(r.job, r.run.Slot), err)
	}
	if s.died(r.job, r.run.Slot, stepWritten) {
		return errDied
	}
	r.recs = nil
	if w, err := s.runWrite(r, rev); err == nil {
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
	if w, err := s.runWrite(runRecord{job: job, run: v.rv.run(), keep: v.rv.Keep}, v.run.rev); err == nil {
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
